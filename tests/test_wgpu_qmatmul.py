"""Quantized matmul on WebGPU: GGUF blocks kept raw on the device and dequantized inside the
kernel (core/backends/webgpu/qmatmul.py, shaders/qmatmul.wgsl), against numpy's
x @ dequantize(W).T (ember.io.quant, bit-exact with the `gguf` package)."""
import numpy as np
import pytest

import ember
from ember.errors import ShapeMismatch, UnsupportedOp
from ember.io import quant
from ember.io.quant import BLOCK_SIZES, GGMLType, QTensor
from ember.layout import Layout
from wgpu_device import capped, wgpu  # noqa: F401  (fixtures)

TYPES = [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q6_K]


def _qtensor(rng, t, n_out, n_in, scale=None):
    """Random valid blocks: random bytes, f16 fields random normals (times `scale`), or,
    with scale None, drawn with zeros, subnormals and +-65504 among them."""
    n_blocks = n_out * n_in // BLOCK_SIZES[t][0]
    raw = rng.integers(0, 256, size=(n_blocks, BLOCK_SIZES[t][1]), dtype=np.uint8)
    view = raw.view(quant._LAYOUTS[t]).reshape(-1)
    for name in quant._LAYOUTS[t].names:
        if quant._LAYOUTS[t][name] == np.dtype("<f2"):
            if scale is None:
                v = (rng.standard_normal(n_blocks) * np.exp2(rng.integers(-20, 8, n_blocks)))
                v = v.astype(np.float16)
                pick = rng.random(n_blocks) < 0.2
                v[pick] = rng.choice(np.array([0.0, -0.0, 6e-8, -6e-8, 3e-5, 65504.0, -65504.0],
                                              np.float16), pick.sum())
                v[~np.isfinite(v)] = np.float16(1.0)
            else:
                v = (rng.standard_normal(n_blocks) * scale).astype(np.float16)
            view[name] = v
    return QTensor(raw.reshape(-1), t, (n_out, n_in))


def _run(device, qw, x, dtype=ember.f32):
    be = device.backend
    dq = be.upload_quantized(qw.raw, qw.ggml_type, qw.shape)
    tx = x if isinstance(x, ember.Tensor) else ember.tensor(x, device=device)
    st, shape = be.qmatmul(tx.storage, tx.layout, dq, dtype)
    return ember.Tensor(st, Layout(shape), ember.f32, device).numpy()


def _assert_close(got, x, w):
    """Within f32 rounding of the sum: 1e-4 relative to sum |x||w| (the scale of the
    rounding error of any summation order), plus 1e-4 relative to the result."""
    x2 = x.reshape(-1, x.shape[-1]).astype(np.float64)
    ref = x2 @ w.astype(np.float64).T
    bound = 1e-4 * (np.abs(x2) @ np.abs(w.astype(np.float64)).T) + 1e-4 * np.abs(ref) + 1e-30
    got = got.reshape(ref.shape)
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound).all(), f"worst error / bound {float((err / bound).max()):.3g}"


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n_in", [256, 768])
@pytest.mark.parametrize("rows", [1, 3, 7, 37])
def test_qmatmul_matches_numpy(wgpu, t, n_in, rows):
    """1-7 rows: the tiled kernel (tiles of 1, 4 and 8 rows); 37: W dequantized in chunks
    into a scratch buffer and the f32 matmul."""
    rng = np.random.default_rng(int(t) * 1000 + n_in + rows)
    qw = _qtensor(rng, t, 70, n_in, scale=0.01)      # 70: not a multiple of the workgroup
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    got = _run(wgpu, qw, x)
    assert got.shape == (rows, 70)
    _assert_close(got, x, qw.dequantize())


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_qmatmul_scales_with_subnormals_and_extremes(wgpu, t):
    """f16 scale fields decoded by hand: zeros, subnormals, +-65504 as numpy reads them."""
    rng = np.random.default_rng(int(t))
    qw = _qtensor(rng, t, 67, 512)
    w = qw.dequantize()
    assert np.isfinite(w).all()
    x = rng.standard_normal((5, 512)).astype(np.float32)
    _assert_close(_run(wgpu, qw, x), x, w)
    # one block column at a time, so a subnormal scale is not hidden by a big neighbour
    qb = BLOCK_SIZES[t][0]
    for b in range(512 // qb):
        xb = np.zeros_like(x)
        xb[:, b * qb:(b + 1) * qb] = x[:, b * qb:(b + 1) * qb]
        _assert_close(_run(wgpu, qw, xb), xb, w)


@pytest.mark.parametrize("path", ["tiled", "dequantized"])
def test_both_paths_for_any_row_count(wgpu, monkeypatch, path):
    from ember.backends.webgpu import qmatmul as wq
    monkeypatch.setattr(wq, "_DEQUANT_ROWS", 10 ** 9 if path == "tiled" else 1)
    if path == "dequantized":
        monkeypatch.setattr(wq, "_SCRATCH_BYTES", 20 * 512 * 4)     # 20 rows of W a chunk
    rng = np.random.default_rng(11)
    for t in TYPES:
        qw = _qtensor(rng, t, 70, 512, scale=0.01)
        for rows in (1, 2, 37):
            x = rng.standard_normal((rows, 512)).astype(np.float32)
            _assert_close(_run(wgpu, qw, x), x, qw.dequantize())


def test_qmatmul_lead_dims_and_strided_x(wgpu):
    rng = np.random.default_rng(3)
    qw = _qtensor(rng, GGMLType.Q4_K, 40, 512, scale=0.02)
    w = qw.dequantize()
    x = rng.standard_normal((2, 3, 512)).astype(np.float32)
    got = _run(wgpu, qw, x)
    assert got.shape == (2, 3, 40)
    _assert_close(got, x, w)
    xt = rng.standard_normal((512, 6)).astype(np.float32)      # a transposed view
    _assert_close(_run(wgpu, qw, ember.tensor(xt, device=wgpu).t()), xt.T, w)
    odd = ember.tensor(rng.standard_normal(513).astype(np.float32), device=wgpu)[1:]
    _assert_close(_run(wgpu, qw, odd.reshape(1, 512)), odd.numpy().reshape(1, 512), w)


def test_qmatmul_k_in_parts_accumulates(wgpu, monkeypatch):
    """K split into parts of whole blocks, each accumulated into the output."""
    from ember.backends.webgpu import loopcap, qmatmul as wq
    rng = np.random.default_rng(4)
    for t in TYPES:
        qw = _qtensor(rng, t, 9, 1024, scale=0.01)
        x = rng.standard_normal((3, 1024)).astype(np.float32)
        monkeypatch.setattr(loopcap, "BUDGET", 3 * wq._TYPES[int(t)][3](4) + 16)
        before = wgpu.backend.counters["dispatches"]
        got = _run(wgpu, qw, x)
        assert wgpu.backend.counters["dispatches"] - before > 1, t.name
        _assert_close(got, x, qw.dequantize())


def test_qmatmul_long_rows_stay_under_the_loop_cap(wgpu):
    """Q8_0 rows of 70,000 blocks: one invocation looping over all of them gives wrong sums
    on lavapipe (it stops loops at 65,535 iterations; measured: -245.4 for -189.9); split
    in K parts of whole blocks, the result is right."""
    rng = np.random.default_rng(5)
    k = 32 * 70000
    qw = _qtensor(rng, GGMLType.Q8_0, 2, k, scale=0.01)
    x = rng.standard_normal((1, k)).astype(np.float32)
    _assert_close(_run(wgpu, qw, x), x, qw.dequantize())


def test_weight_memory_is_the_raw_bytes(wgpu):
    rng = np.random.default_rng(6)
    qw = _qtensor(rng, GGMLType.Q6_K, 300, 1024, scale=0.01)    # 252,000 bytes; f32: 1.2 MB
    be = wgpu.backend
    before = be.memory_stats()["bytes_in_use"]
    dq = be.upload_quantized(qw.raw, qw.ggml_type, qw.shape)
    grown = be.memory_stats()["bytes_in_use"] - before
    assert qw.nbytes <= grown <= qw.nbytes + 8, (grown, qw.nbytes)
    del dq
    assert be.memory_stats()["bytes_in_use"] == before


def test_empty_operands(wgpu):
    rng = np.random.default_rng(9)
    qw = _qtensor(rng, GGMLType.Q4_K, 5, 256, scale=0.01)
    assert _run(wgpu, qw, np.zeros((0, 256), np.float32)).shape == (0, 5)
    empty_k = QTensor(np.zeros(0, np.uint8), GGMLType.Q8_0, (6, 0))
    got = _run(wgpu, empty_k, np.zeros((2, 0), np.float32))
    np.testing.assert_array_equal(got, np.zeros((2, 6), np.float32))


def test_bad_operands_are_refused(wgpu):
    rng = np.random.default_rng(7)
    be = wgpu.backend
    iq4 = np.zeros(4 * 256 // 32 * 18, np.uint8)           # IQ4_NL: no WebGPU decoder
    with pytest.raises(UnsupportedOp, match="ggml type 20"):
        be.upload_quantized(iq4, GGMLType.IQ4_NL, (4, 256))
    qw = _qtensor(rng, GGMLType.Q8_0, 4, 256, scale=0.01)
    with pytest.raises(ShapeMismatch, match="needs 272 bytes"):
        be.upload_quantized(qw.raw[:-1], qw.ggml_type, (1, 256))
    with pytest.raises(ShapeMismatch, match="whole blocks"):
        be.upload_quantized(qw.raw, qw.ggml_type, (17, 60))
    dq = be.upload_quantized(qw.raw, qw.ggml_type, qw.shape)
    x = ember.tensor(np.ones((2, 128), np.float32), device=wgpu)
    with pytest.raises(ShapeMismatch, match="needs last dim 256"):
        be.qmatmul(x.storage, x.layout, dq, ember.f32)


# --- a weight over the binding limit, on a backend that plans with 4 KiB bindings --------


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [3, 20])
def test_capped_weight_splits_by_output_rows(capped, t, rows):
    """3 rows: the tiled kernel over ranges of weight rows; 20: the dequantized path, whose
    scratch chunks and matmul split too."""
    rng = np.random.default_rng(int(t) + 50 + rows)
    qw = _qtensor(rng, t, 75, 512, scale=0.01)
    assert qw.nbytes > 4096
    x = rng.standard_normal((rows, 512)).astype(np.float32)
    be = capped.backend
    before = be.counters["dispatches"]
    got = _run(capped, qw, x)
    assert be.counters["dispatches"] - before >= qw.nbytes // 4096
    _assert_close(got, x, qw.dequantize())


def test_capped_row_over_the_limit_is_refused(capped):
    rng = np.random.default_rng(8)
    qw = _qtensor(rng, GGMLType.Q8_0, 2, 32 * 128, scale=0.01)      # 4,352-byte rows
    with pytest.raises(UnsupportedOp, match="maximum storage binding"):
        _run(capped, qw, np.ones((1, 32 * 128), np.float32))
