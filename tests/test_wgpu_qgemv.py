"""The quantized GEMV of GPU adapters (shaders/qmatmul.wgsl in gemv mode: up to 64 lanes
share one output column, each decoding part of W's row, their sums added through workgroup
memory) for decoding, 1 to 4 rows of x, on lavapipe with the GPU kernel set forced: every
common GGUF type against numpy's x @ dequantize(W).T (ember.io.quant), odd column counts,
block counts that leave lanes idle, K in parts and a weight split over the binding."""
import numpy as np
import pytest

from ember.io.quant import BLOCK_SIZES, GGMLType
from test_wgpu_qmatmul import _assert_close, _qtensor, _run
from wgpu_device import CAP, wgpu  # noqa: F401  (fixture)

ALL = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0,
       GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]
N_OUT = 67      # odd: the last workgroup's columns are partly past N


def _gpu_kernels_device(wgpu, name, cap=None):  # noqa: F811
    """A second backend on the test adapter whose driver asks for the GPU kernel set
    (as Runtime reads a driver's `kernel_set`), optionally with `cap`-byte bindings."""
    import ember
    from ember.backends.webgpu.backend import WebGPUBackend
    from ember.backends.webgpu.native import NativeDriver

    driver = NativeDriver(wgpu.backend.driver.adapter)
    driver.kernel_set = "gpu"
    if cap is not None:
        driver.limits["max-storage-buffer-binding-size"] = cap
        driver.limits["min-storage-buffer-offset-alignment"] = 256
    device = ember.Device("wgpu", 98 if cap is None else 97, WebGPUBackend(driver, name))
    assert device.backend.kernel_set == "gpu"
    return device


@pytest.fixture(scope="module")
def gpu(wgpu):  # noqa: F811
    return _gpu_kernels_device(wgpu, "wgpu:gpu-kernels")


@pytest.fixture(scope="module")
def gpu_capped(wgpu):  # noqa: F811
    return _gpu_kernels_device(wgpu, "wgpu:gpu-kernels-capped", CAP)


def _gemv_labels(device, t):
    return [label for label in device.backend.labels.values()
            if "MODE=gemv" in label and f"QTYPE={t.name.lower()}," in label]


@pytest.mark.parametrize("n_blocks", [3, 67], ids=lambda b: f"{b}blocks")
@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_gemv_matches_numpy(gpu, t, n_blocks):
    """3 blocks a row: most lanes of a column idle; 67: every lane busy, three of them a
    second time. Rows of x 1 to 4 (tiles of 1, 2 and 4, the last with a row unused)."""
    rng = np.random.default_rng(int(t) * 10 + n_blocks)
    k = n_blocks * BLOCK_SIZES[t][0]
    qw = _qtensor(rng, t, N_OUT, k, scale=0.01)
    w = qw.dequantize()
    for rows in (1, 2, 3, 4):
        x = rng.standard_normal((rows, k)).astype(np.float32)
        got = _run(gpu, qw, x)
        assert got.shape == (rows, N_OUT)
        for r in range(rows):       # row by row: numpy's float64 x @ w.T is a slow gemm here
            _assert_close(got[r:r + 1], x[r:r + 1], w)
    assert len(_gemv_labels(gpu, t)) >= 3         # one pipeline per tile of rows at least


@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
def test_gemv_places_each_decoded_weight(gpu, t):
    """x rows that each pick one weight (1 * w plus zeros: exact) from blocks handled by
    different lanes, with f16 scales among zeros, subnormals and +-65504: each result is
    the weight numpy decodes, in its own row and column (1 ulp for a fused multiply-add)."""
    rng = np.random.default_rng(int(t) + 300)
    qk = BLOCK_SIZES[t][0]
    k = 5 * qk
    qw = _qtensor(rng, t, N_OUT, k)
    w = qw.dequantize()
    assert np.isfinite(w).all()
    for _ in range(4):
        picks = rng.choice(k, size=4, replace=False)
        x = np.zeros((4, k), np.float32)
        x[np.arange(4), picks] = 1.0
        np.testing.assert_array_max_ulp(_run(gpu, qw, x), w[:, picks].T, maxulp=1)
    assert _gemv_labels(gpu, t)


@pytest.mark.parametrize("t", [GGMLType.Q8_0, GGMLType.Q5_1, GGMLType.Q4_K, GGMLType.Q3_K],
                         ids=lambda t: t.name)
def test_gemv_k_in_parts_accumulates(gpu, monkeypatch, t):
    """A loop budget of 3 blocks: K runs in parts of whole blocks, each part's sums added
    to the output the previous parts left."""
    from ember.backends.webgpu import loopcap, qmatmul as wq

    rng = np.random.default_rng(int(t) + 400)
    k = 11 * BLOCK_SIZES[t][0]
    qw = _qtensor(rng, t, N_OUT, k, scale=0.01)
    x = rng.standard_normal((2, k)).astype(np.float32)
    monkeypatch.setattr(loopcap, "BUDGET", 3 * wq._TYPES[int(t)][3](2) + 8)
    before = gpu.backend.counters["dispatches"]
    got = _run(gpu, qw, x)
    assert gpu.backend.counters["dispatches"] - before >= 4      # ceil(11 / 3) parts
    _assert_close(got, x, qw.dequantize())
    assert _gemv_labels(gpu, t)


@pytest.mark.parametrize("t", [GGMLType.Q4_0, GGMLType.Q5_0, GGMLType.Q2_K, GGMLType.Q6_K],
                         ids=lambda t: t.name)
def test_gemv_splits_a_weight_over_the_binding(gpu_capped, t):
    """4 KiB bindings: the weight binds ranges of whole rows, one dispatch each."""
    rng = np.random.default_rng(int(t) + 500)
    qw = _qtensor(rng, t, 75, 512, scale=0.01)
    assert qw.nbytes > 4096
    x = rng.standard_normal((3, 512)).astype(np.float32)
    be = gpu_capped.backend
    before = be.counters["dispatches"]
    got = _run(gpu_capped, qw, x)
    assert be.counters["dispatches"] - before >= qw.nbytes // 4096
    _assert_close(got, x, qw.dequantize())
    assert _gemv_labels(gpu_capped, t)


def test_only_the_gpu_kernel_set_decodes_through_the_gemv(wgpu, gpu):  # noqa: F811
    """The session's device keeps its own kernel set's choice (on lavapipe, unforced, the
    CPU adapters' one invocation per column); on the GPU set, 5 rows are no longer
    decoding and keep the per-column tiles too."""
    rng = np.random.default_rng(600)
    qw = _qtensor(rng, GGMLType.Q4_1, N_OUT, 256, scale=0.01)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    _assert_close(_run(wgpu, qw, x), x, qw.dequantize())
    assert bool(_gemv_labels(wgpu, GGMLType.Q4_1)) == (wgpu.backend.kernel_set == "gpu")
    x5 = rng.standard_normal((5, 256)).astype(np.float32)
    _assert_close(_run(gpu, qw, x5), x5, qw.dequantize())
    assert any("MODE=matmul" in label and "QTYPE=q4_1," in label and "TM=8" in label
               for label in gpu.backend.labels.values())
