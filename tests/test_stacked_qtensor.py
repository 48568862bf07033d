"""io.quant.StackedQTensor: same-type quantized weights stacked by rows without copying
(a GGUF model's q/k/v and gate/up), run part by part by every CPU qmatmul path, and
assembled for an upload to a device."""

import numpy as np
import pytest
from test_qmatmul_cpu import TYPES, assert_matmul_to_f32_rounding, jit, weight  # noqa: F401

import ember
from ember.backends import row_parallel
from ember.errors import ShapeMismatch
from ember.io import quant
from ember.io.quant import GGMLType, QTensor, StackedQTensor
from ember.models.quant_layers import QuantLinear, _owns_its_memory
from wgpu_device import wgpu  # noqa: F401  (fixture)


def stack(rng, t, rows=(5, 3, 4), blocks=2):
    parts = [weight(rng, t, r, blocks) for r in rows]
    return StackedQTensor(parts), np.concatenate([p.dequantize() for p in parts])


@pytest.mark.parametrize("t", [GGMLType.Q4_1, GGMLType.Q6_K], ids=lambda t: t.name)
def test_rows_across_part_boundaries_dequantize_as_the_stacked_parts(t):
    w, dense = stack(np.random.default_rng(int(t)), t)
    assert w.shape == dense.shape and w.nbytes == sum(p.nbytes for p in w.parts)
    for start, stop in [(0, 12), (3, 9), (5, 8), (4, 5), (11, 40), (7, 7)]:
        np.testing.assert_array_equal(w.dequantize_rows(start, stop), dense[start:stop])
    # the assembled bytes are the parts' bytes in order, and read back as one QTensor
    whole = QTensor(w.raw, t, w.shape)
    np.testing.assert_array_equal(whole.dequantize(), dense)


@pytest.mark.parametrize("path", ["numpy", "fused", "decode"])
@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_every_cpu_path_multiplies_a_stack_as_its_dense_rows(request, path, t):
    if path != "numpy":
        request.getfixturevalue("jit")
    rng = np.random.default_rng(50 + int(t))
    w, dense = stack(rng, t, rows=(7, 2, 5))  # odd part sizes: kernels take rows in pairs
    for m in (1, 4):
        x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
        got = quant.qmatmul(x, w, path=path, chunk_rows=3)
        assert got.shape == (m, 14)
        assert_matmul_to_f32_rounding(got, x, dense)


def test_a_stack_split_over_threads_gives_the_bits_of_one_thread(jit, monkeypatch):  # noqa: F811
    rng = np.random.default_rng(9)
    w, _ = stack(rng, GGMLType.Q4_K, rows=(151, 75, 75), blocks=3)
    assert w.shape[0] * w.shape[1] >= 3 * row_parallel.MIN_PARALLEL_ELEMENTS
    x = rng.standard_normal((1, w.shape[1])).astype(np.float32)
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    one = quant.qmatmul(x, w, path="fused")
    monkeypatch.setitem(row_parallel._state, "workers", 3)
    three = quant.qmatmul(x, w, path="fused")
    np.testing.assert_array_equal(one, three)


def test_parts_of_another_type_or_row_length_are_refused_naming_them():
    rng = np.random.default_rng(3)
    a = weight(rng, GGMLType.Q4_0, 2, 2)
    with pytest.raises(ShapeMismatch, match=r"Q4_0 \[2, 64\], Q8_0 \[2, 64\]"):
        StackedQTensor([a, weight(rng, GGMLType.Q8_0, 2, 2)])
    with pytest.raises(ShapeMismatch, match=r"Q4_0 \[2, 64\], Q4_0 \[2, 96\]"):
        StackedQTensor([a, weight(rng, GGMLType.Q4_0, 2, 3)])
    with pytest.raises(TypeError, match="one or more 2-D QTensors"):
        StackedQTensor([])


def test_a_weight_of_its_own_placed_on_wgpu_lives_there_only_and_says_so(wgpu):
    """An in-memory QTensor (not a file's view) is released from the host once uploaded,
    and running its layer elsewhere names where it lives."""
    rng = np.random.default_rng(4)
    w = weight(rng, GGMLType.Q8_0, 6, 2)
    assert _owns_its_memory(w.raw)
    layer = QuantLinear(w).place(wgpu)
    x = rng.standard_normal((1, 64)).astype(np.float32)
    got = layer(ember.tensor(x, device=wgpu)).numpy()
    assert_matmul_to_f32_rounding(got, x, w.dequantize())
    with pytest.raises(ember.DeviceError, match=r"lives only on wgpu.*load the GGUF model"):
        layer(ember.zeros(1, 64))
