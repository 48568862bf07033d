"""Where a quantized weight lives is the backend's decision (Backend.place_quantized), and
every device gives x @ dequantize(W).T: numpy reads the host blocks, WebGPU keeps the
types its kernel decodes as raw blocks and holds the others as a dense copy made once."""
import numpy as np
import pytest

import ember
from ember.backends.composites import DenseWeight
from ember.io.quant import GGMLType, QTensor
from ember.models.quant_layers import QuantLinear
from test_wgpu_qmatmul import _qtensor

ALL_TYPES = [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1,
             GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q5_K]


@pytest.mark.parametrize("t", ALL_TYPES, ids=lambda t: t.name)
def test_quant_linear_matches_the_dequantized_weight_on_every_device(device, t):
    rng = np.random.default_rng(int(t))
    qw = _qtensor(rng, t, 40, 256, scale=0.05)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    layer = QuantLinear(qw)
    got = layer(ember.tensor(x, device=device)).numpy()
    ref = x.astype(np.float64) @ qw.dequantize().astype(np.float64).T
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    placed = layer._placed[1]
    backend = device.backend
    if backend.keeps_quantized(t):
        assert layer.device_bytes() == qw.nbytes           # raw blocks, nothing more
    elif placed is qw:
        assert layer.device_bytes() == 0                   # read in place (numpy)
    else:
        # dequantized once, not per call: the same dense copy serves every forward
        assert isinstance(placed, DenseWeight) and layer.device_bytes() == 4 * 40 * 256
        layer(ember.tensor(x, device=device))
        assert layer._placed[1] is placed


def test_numpy_keeps_every_type_on_the_host(cpu):
    qw = _qtensor(np.random.default_rng(0), GGMLType.Q4_1, 8, 64, scale=0.1)
    assert cpu.backend.place_quantized(qw) is qw


def test_a_type_without_a_wgpu_decoder_is_made_dense_once(device):
    """F16 (GGUF's unquantized weights): WebGPU has no decoder for it in qmatmul, so it
    takes the dense path every other device type without a kernel takes."""
    rng = np.random.default_rng(12)
    w = (rng.standard_normal((24, 64)) * 0.1).astype(np.float16)
    qw = QTensor(w.view(np.uint8).reshape(-1), GGMLType.F16, (24, 64))
    x = rng.standard_normal((2, 64)).astype(np.float32)
    layer = QuantLinear(qw)
    got = layer(ember.tensor(x, device=device)).numpy()
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    if device.kind == "wgpu":
        assert not device.backend.keeps_quantized(GGMLType.F16)
        assert isinstance(layer._placed[1], DenseWeight)
        assert layer.device_bytes() == 4 * 24 * 64
