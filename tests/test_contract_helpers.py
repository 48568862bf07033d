"""Small pieces of the contract work: Linear.from_tensors, the bf16 bit helpers in
hostdata, ShapeMismatch's one field, QuantLinear through the contract on every device."""
import numpy as np
import pytest

import ember
import ember.nn as nn
from ember.hostdata import bf16_to_f32, f32_to_bf16


def test_linear_from_tensors_runs_like_a_loaded_linear(device):
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    layer = nn.Linear.from_tensors(ember.tensor(w, device=device), ember.tensor(b, device=device))
    assert (layer.in_features, layer.out_features) == (5, 3)
    assert sorted(name for name, _ in layer.named_parameters()) == ["bias", "weight"]
    np.testing.assert_allclose(layer(ember.tensor(x, device=device)).numpy(), x @ w.T + b,
                               rtol=1e-5, atol=1e-5)
    no_bias = nn.Linear.from_tensors(ember.tensor(w, device=device))
    assert no_bias.bias is None
    np.testing.assert_allclose(no_bias(ember.tensor(x, device=device)).numpy(), x @ w.T,
                               rtol=1e-5, atol=1e-5)


def test_linear_from_tensors_refuses_bad_shapes():
    with pytest.raises(ember.ShapeMismatch, match="2-D tensor"):
        nn.Linear.from_tensors(ember.zeros(3))
    with pytest.raises(ember.ShapeMismatch, match=r"bias \[4\] must be \[3\]"):
        nn.Linear.from_tensors(ember.zeros(3, 5), ember.zeros(4))
    with pytest.raises(ember.DTypeMismatch):
        nn.Linear.from_tensors(ember.zeros(3, 5), ember.zeros(3, dtype=ember.f16))


def test_bf16_bits_round_to_nearest_even_and_keep_nan():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, np.nan, 3e38], np.float32)
    bits = f32_to_bf16(np, x)
    assert bits.dtype == np.uint16
    # 1 + 2^-8 is a tie (rounds to even 1.0); 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
    np.testing.assert_array_equal(bf16_to_f32(np, bits)[:5], [1.0, 1.0, 1.015625, -2.5, np.inf])
    assert np.isnan(bf16_to_f32(np, bits)[5])
    assert f32_to_bf16(np, np.float32(1.0)).shape == ()


def test_shape_mismatch_has_one_field():
    for err in (ember.ShapeMismatch("m", shape=(2, 3)), ember.ShapeMismatch("m", shapes=((2, 3),))):
        assert err.shapes == ((2, 3),) and not hasattr(err, "shape")
    with pytest.raises(ember.ShapeMismatch) as info:
        ember.zeros(2, 3).reshape(4, 2)
    assert info.value.shapes == ((2, 3),)


def test_quant_linear_runs_the_contract_on_every_device(device):
    from ember.io.quant import GGMLType, QTensor
    from ember.models.quant_layers import QuantLinear
    rng = np.random.default_rng(1)
    dense = rng.standard_normal((6, 64)).astype(np.float32)
    q = QTensor(dense.tobytes(), GGMLType.F32, dense.shape)   # a type no kernel keeps
    x = rng.standard_normal((2, 64)).astype(np.float32)
    layer = QuantLinear(q)
    got = layer(ember.tensor(x, device=device)).numpy()
    np.testing.assert_allclose(got, x @ dense.T, rtol=1e-5, atol=1e-4)
    # numpy reads the host weight in chunks; WebGPU, with no kernel for F32 blocks, holds
    # the dense copy Backend.place_quantized made once (6 x 64 f32)
    assert layer.device_bytes() == (0 if device.kind == "cpu" else 4 * 6 * 64)
