"""Every common GGUF type stays quantized on WebGPU: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
Q4_K, Q5_K and Q6_K each have a decoder in shaders/qmatmul.wgsl, checked against numpy's
dequantizers (ember.io.quant, bit-exact with ggml's). The four types the kernel decoded first
are also covered by the broader cases of test_wgpu_qmatmul.py; here every type gets the
decoded weights themselves, and the six newer ones the matmul cases (decode tiles, the
dequantized prompt path, K in parts, subnormal scales, weights split over the binding)."""
import numpy as np
import pytest

from ember.io.quant import BLOCK_SIZES, GGMLType
from test_wgpu_qmatmul import _assert_close, _qtensor, _run
from wgpu_device import capped, wgpu  # noqa: F401  (fixtures)

ALL = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0,
       GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]
NEW = [GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q2_K, GGMLType.Q3_K,
       GGMLType.Q5_K]
N_OUT = 67      # odd, and more than one workgroup of 64 output columns


def test_every_common_type_is_kept_quantized(wgpu):
    be = wgpu.backend
    assert [t.name for t in ALL if not be.keeps_quantized(t)] == []
    assert not be.keeps_quantized(GGMLType.IQ4_NL)      # no decoder: dense f32 at load


@pytest.mark.parametrize("path", ["tiled", "dequantized"])
@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_decoded_weights_are_numpys(wgpu, monkeypatch, t, path):
    """x = the identity picks each weight out alone (1 * w plus zeros: exact), so the
    result is dequantize(W).T as the shader decodes it, in both the tiled kernel (tiles of
    8 rows) and the dequant mode that feeds the f32 matmul. Bit-exact on lavapipe; 1 ulp
    allowed for a compiler that fuses the scale's multiply-add."""
    from ember.backends.webgpu import qmatmul as wq

    monkeypatch.setattr(wq, "_DEQUANT_ROWS", 10**9 if path == "tiled" else 1)
    rng = np.random.default_rng(int(t) + 100)
    qw = _qtensor(rng, t, N_OUT, 512, scale=0.01)
    got = _run(wgpu, qw, np.eye(512, dtype=np.float32))
    np.testing.assert_array_max_ulp(got, qw.dequantize().T, maxulp=1)


@pytest.mark.parametrize("t", NEW, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [1, 5, 8, 70])
def test_qmatmul_matches_numpy(wgpu, t, rows):
    """1: decoding (a tile of 1 row); 5: a tile of 8 with rows left unused; 8 and 70 (more
    than one workgroup of rows): W dequantized in chunks and the f32 matmul."""
    rng = np.random.default_rng(int(t) * 100 + rows)
    qw = _qtensor(rng, t, N_OUT, 512, scale=0.01)
    x = rng.standard_normal((rows, 512)).astype(np.float32)
    got = _run(wgpu, qw, x)
    assert got.shape == (rows, N_OUT)
    _assert_close(got, x, qw.dequantize())


@pytest.mark.parametrize("t", NEW, ids=lambda t: t.name)
def test_scales_with_subnormals_and_extremes(wgpu, t):
    """f16 scales (and Q4_1/Q5_1 minimums, K-quant dmin) with zeros, subnormals and
    +-65504, one block column at a time so a subnormal scale is not hidden by a big one."""
    rng = np.random.default_rng(int(t) + 7)
    qw = _qtensor(rng, t, 9, 512)
    w = qw.dequantize()
    assert np.isfinite(w).all()
    x = rng.standard_normal((3, 512)).astype(np.float32)
    qb = BLOCK_SIZES[t][0]
    for b in range(512 // qb):
        xb = np.zeros_like(x)
        xb[:, b * qb:(b + 1) * qb] = x[:, b * qb:(b + 1) * qb]
        _assert_close(_run(wgpu, qw, xb), xb, w)


@pytest.mark.parametrize("t", NEW, ids=lambda t: t.name)
def test_k_in_parts_accumulates(wgpu, monkeypatch, t):
    """A loop budget of 3 blocks: K runs in parts of whole blocks, each accumulated into
    the output (what keeps long rows under lavapipe's 65,535-iteration loop cap)."""
    from ember.backends.webgpu import loopcap, qmatmul as wq

    rng = np.random.default_rng(int(t) + 8)
    qw = _qtensor(rng, t, 9, 1024, scale=0.01)
    x = rng.standard_normal((3, 1024)).astype(np.float32)
    monkeypatch.setattr(loopcap, "BUDGET", 3 * wq._TYPES[int(t)][3](4) + 16)
    before = wgpu.backend.counters["dispatches"]
    got = _run(wgpu, qw, x)
    assert wgpu.backend.counters["dispatches"] - before >= 1024 // BLOCK_SIZES[t][0] // 3
    _assert_close(got, x, qw.dequantize())


@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_device_memory_is_the_tensor_bytes(wgpu, t):
    """The blocks go up as the file holds them: no re-pack, no f32 copy; 4 to 7 bytes of
    padding let the shader read a whole word past the last byte."""
    qw = _qtensor(np.random.default_rng(int(t) + 9), t, 30, 1024, scale=0.01)
    be = wgpu.backend
    before = be.memory_stats()["bytes_in_use"]
    dq = be.upload_quantized(qw.raw, qw.ggml_type, qw.shape)
    grown = be.memory_stats()["bytes_in_use"] - before
    assert qw.nbytes + 4 <= grown <= qw.nbytes + 7, (t.name, grown, qw.nbytes)
    assert dq.nbytes == qw.nbytes
    del dq
    assert be.memory_stats()["bytes_in_use"] == before


@pytest.mark.parametrize("t", NEW, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [3, 20])
def test_capped_weight_splits_by_output_rows(capped, t, rows):
    """4 KiB bindings: the weight binds a range of whole rows at a time (3 rows: tiled
    kernel; 20: dequant chunks and a split f32 matmul)."""
    rng = np.random.default_rng(int(t) + 60 + rows)
    qw = _qtensor(rng, t, 75, 512, scale=0.01)
    assert qw.nbytes > 4096
    x = rng.standard_normal((rows, 512)).astype(np.float32)
    be = capped.backend
    before = be.counters["dispatches"]
    got = _run(capped, qw, x)
    assert be.counters["dispatches"] - before >= qw.nbytes // 4096
    _assert_close(got, x, qw.dequantize())
