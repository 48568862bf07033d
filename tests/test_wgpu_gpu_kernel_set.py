"""The "gpu" kernel set (shared-memory tiled matmul, workgroup-reduction GEMV, row
kernels with a workgroup per row) forced on this adapter, so the kernels that discrete and
integrated GPUs get are proven here on lavapipe: a second device on the same adapter opened
with the set forced (as EMBER_WGPU_KERNELS=gpu would), the matmul in every layout the
planner distinguishes (vec4 along K, vec4 along N or M, scalar), M on both sides of the GEMV
bound, both block sizes, batched and broadcast, f16 and bf16, the fused epilogue, K split
into partial products, operands over a (capped) binding limit, and the row kernels.
Expected values: numpy in float64. The whole op suite also passes with the set forced
(EMBER_WGPU_KERNELS=gpu); this file keeps the default run covering it."""
import math

import numpy as np
import pytest

import ember
import ember.functional as F
from ember.backends.webgpu import matmul as wgpu_matmul
from ember.backends.webgpu.backend import WebGPUBackend
from ember.backends.webgpu.native import NativeDriver
from wgpu_device import CAP, wgpu  # noqa: F401  (fixture)


def _open(wgpu, index, cap=None):
    driver = NativeDriver(wgpu.backend.driver.adapter)
    driver.kernel_set = "gpu"
    if cap:
        driver.limits["max-storage-buffer-binding-size"] = cap
        driver.limits["min-storage-buffer-offset-alignment"] = 256
    device = ember.Device("wgpu", index, WebGPUBackend(driver, f"wgpu:gpu-set{index}"))
    assert device.backend.kernel_set == "gpu"
    return device


@pytest.fixture(scope="module")
def gpu(wgpu):
    return _open(wgpu, 97)


@pytest.fixture(scope="module")
def gpu_capped(wgpu):
    return _open(wgpu, 96, CAP)


@pytest.fixture
def built(gpu, monkeypatch):
    """The kernel names (and specs) the gpu device launches during a test."""
    names = []
    rt = gpu.backend.runtime
    real = rt.kernel

    def kernel(name, t, spec, op=None):
        names.append((name, spec))
        return real(name, t, spec, op)

    monkeypatch.setattr(rt, "kernel", kernel)
    return names


def _operand(dev, a, how):
    """`a` on the device laid out as `how` says, same values: contiguous; stored
    transposed and viewed back (unit stride along the first dim); or a column slice of a
    wider array starting one element in (strides and offset off every multiple of 4)."""
    if how == "contiguous":
        return ember.tensor(a, device=dev)
    if how == "transposed":
        stored = np.ascontiguousarray(np.swapaxes(a, -1, -2))
        return ember.tensor(stored, device=dev).transpose(-1, -2)
    wide = np.zeros(a.shape[:-1] + (a.shape[-1] + 3,), np.float32)
    wide[..., 1 : 1 + a.shape[-1]] = a
    return ember.tensor(wide, device=dev)[..., 1 : 1 + a.shape[-1]]


def _check(got, x, w, k, rtol=1e-5):
    want = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 4 * math.sqrt(k))


LAYOUTS = ["contiguous", "transposed", "offset"]


@pytest.mark.parametrize("m,k,n", [(1, 36, 20), (4, 13, 9), (70, 20, 130)])
@pytest.mark.parametrize("xl", LAYOUTS)
@pytest.mark.parametrize("wl", LAYOUTS)
def test_matmul_every_layout(gpu, m, k, n, xl, wl):
    rng = np.random.default_rng(m * 100 + k + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    got = (_operand(gpu, x, xl) @ _operand(gpu, w, wl)).numpy()
    _check(got, x, w, k)


def test_the_planner_reaches_every_kernel_and_load(gpu, built):
    """Decoding rows take the GEMVs (x @ W.T and x @ W), more rows the tiled kernel;
    large outputs its 128 x 128 blocks; each operand is staged along its contiguous axis,
    vec4 where aligned, scalar where not."""
    rng = np.random.default_rng(1)

    def run(m, k, n, xl="contiguous", wl="contiguous"):
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((k, n)).astype(np.float32)
        built.clear()
        _check((_operand(gpu, x, xl) @ _operand(gpu, w, wl)).numpy(), x, w, k)
        return built[-1]

    assert run(2, 64, 40, wl="transposed")[0] == "gemv_nt"
    assert run(2, 64, 40)[0] == "gemv_nn"
    name, spec = run(9, 64, 40)
    assert (name, spec["BM"], spec["AW"], spec["A_ALONG_K"], spec["BW"], spec["B_ALONG_K"]) == (
        "matmul_tiled", 64, 4, "true", 4, "false")
    name, spec = run(9, 64, 40, xl="transposed", wl="transposed")
    assert (spec["A_ALONG_K"], spec["B_ALONG_K"]) == ("false", "true")
    name, spec = run(9, 63, 41, xl="offset", wl="offset")
    assert (spec["AW"], spec["BW"]) == (1, 1)
    name, spec = run(520, 24, 516)
    assert (name, spec["BM"], spec["BN"]) == ("matmul_tiled", 128, 128)


@pytest.mark.parametrize("xs,ws", [((3, 33, 260), (3, 260, 72)),    # batched W
                                   ((4, 16, 64), (64, 32)),         # one W for all (stride 0)
                                   ((2, 1, 2, 64), (1, 3, 64, 8))])  # both broadcast, M = 2
@pytest.mark.parametrize("wl", ["contiguous", "transposed"])
def test_batched_and_broadcast(gpu, xs, ws, wl):
    rng = np.random.default_rng(len(xs) + ws[-1])
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    got = (ember.tensor(x, device=gpu) @ _operand(gpu, w, wl)).numpy()
    _check(got, x, w, xs[-1])


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m", [1, 40])
@pytest.mark.parametrize("wl", ["contiguous", "transposed"])
def test_half_precision_sums_in_f32_and_rounds_once(gpu, dtype, m, wl):
    rng = np.random.default_rng(7 + m)
    x = rng.standard_normal((m, 260)).astype(np.float32)
    w = rng.standard_normal((260, 36)).astype(np.float32)
    dt = getattr(ember, dtype)
    tx = ember.tensor(x, device=gpu).to(dt)
    tw = _operand(gpu, w, wl).to(dt)
    xs, ws = tx.to(ember.f32).numpy(), tw.to(ember.f32).numpy()   # the values rounded
    got = (tx @ tw).to(ember.f32).numpy()
    want = ember.tensor(xs.astype(np.float64) @ ws.astype(np.float64)).to(dt).to(
        ember.f32).numpy()
    # One rounding of the f32 sum: at most one unit in the last place from the exact one.
    ulp = 2.0 ** (-10 if dtype == "f16" else -7)
    np.testing.assert_allclose(got, want, rtol=ulp * 1.01, atol=1e-2)


def test_integers_keep_the_general_kernel(gpu, built):
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (5, 7)).astype(np.int32)
    b = rng.integers(-50, 50, (7, 6)).astype(np.int32)
    got = (ember.tensor(a, device=gpu) @ ember.tensor(b, device=gpu)).numpy()
    np.testing.assert_array_equal(got, a @ b)
    assert built[-1][0] == "matmul"


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _linear_want(x, w, b, r):
    y = x.astype(np.float64) @ w.astype(np.float64).T + b
    return y * _sigmoid(y) + r  # silu


def _linear_data(seed, m, k, n):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return f(m, k), f(n, k) * np.float32(1 / math.sqrt(k)), f(n), f(m, n)


def _weight(dev, w, layout):
    """A Linear weight [N, K] as linear takes it: stored [N, K] ("nk"), or stored [K, N]
    and viewed transposed ("kn")."""
    if layout == "nk":
        return ember.tensor(w, device=dev)
    return ember.tensor(np.ascontiguousarray(w.T), device=dev).t()


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("m", [1, 4, 13, 70])
def test_linear_applies_the_epilogue_on_every_kernel(gpu, layout, m):
    x, w, b, r = _linear_data(20 + m, m, 68, 36)
    t = lambda a: ember.tensor(a, device=gpu)  # noqa: E731
    got = F.linear(t(x), _weight(gpu, w, layout), t(b), "silu", t(r)).numpy()
    np.testing.assert_allclose(got, _linear_want(x, w, b, r), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("m", [2, 9])
def test_long_k_applies_the_epilogue_once_after_the_last_part(gpu, monkeypatch, layout, m):
    monkeypatch.setattr(wgpu_matmul, "_MAX_K", 64)
    x, w, b, r = _linear_data(7, m, 260, 20)
    t = lambda a: ember.tensor(a, device=gpu)  # noqa: E731
    before = gpu.backend.counters["dispatches"]
    got = F.linear(t(x), _weight(gpu, w, layout), t(b), "silu", t(r)).numpy()
    assert gpu.backend.counters["dispatches"] - before >= 4   # 260 in parts of at most 64
    np.testing.assert_allclose(got, _linear_want(x, w, b, r), rtol=1e-5, atol=5e-5)


@pytest.mark.parametrize("m,k,n", [(2, 300, 40), (40, 64, 48)])
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_operands_over_a_capped_binding_split(gpu_capped, m, k, n, layout):
    x, w, b, r = _linear_data(9, m, k, n)
    assert max(x.nbytes, w.nbytes) > CAP
    dev = gpu_capped
    t = lambda a: ember.tensor(a, device=dev)  # noqa: E731
    before = dev.backend.counters["dispatches"]
    got = F.linear(t(x), _weight(dev, w, layout), t(b), "silu", t(r)).numpy()
    assert dev.backend.counters["dispatches"] - before > 1
    np.testing.assert_allclose(got, _linear_want(x, w, b, r), rtol=1e-5, atol=5e-5)
    got = (t(x) @ _weight(dev, w, layout).t()).numpy()
    _check(got, x, w.T, k)


# Rows shorter than a workgroup (several rows share one), of one workgroup's width, and
# long enough for 256 lanes.
ROWS = [(37, 5), (9, 200), (3, 3000)]


@pytest.mark.parametrize("rows,n", ROWS)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_rows(gpu, rows, n, log):
    x = np.random.default_rng(n).standard_normal((rows, n)).astype(np.float32) * 4
    t = ember.tensor(x, device=gpu)
    got = (t.log_softmax(-1) if log else t.softmax(-1)).numpy()
    x64 = x.astype(np.float64)
    s = x64 - x64.max(-1, keepdims=True)
    lse = np.log(np.exp(s).sum(-1, keepdims=True))
    want = s - lse if log else np.exp(s - lse)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_softmax_down_the_columns(gpu):
    x = np.random.default_rng(4).standard_normal((70, 6)).astype(np.float32)
    got = ember.tensor(x, device=gpu).softmax(0).numpy()
    e = np.exp(x.astype(np.float64) - x.max(0))
    np.testing.assert_allclose(got, e / e.sum(0), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("rows,n", ROWS)
@pytest.mark.parametrize("rms", [False, True])
def test_norms_with_a_residual(gpu, rows, n, rms):
    rng = np.random.default_rng(n + rms)
    x, res = (rng.standard_normal((rows, n)).astype(np.float32) for _ in range(2))
    w, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    t = lambda a: ember.tensor(a, device=gpu)  # noqa: E731
    if rms:
        got = t(x).rms_norm(t(w), eps=1e-6, residual=t(res))
    else:
        got = t(x).layer_norm(t(w), t(b), eps=1e-5, residual=t(res))
    h = x.astype(np.float64) + res
    if rms:
        want = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-6) * w
    else:
        c = h - h.mean(-1, keepdims=True)
        want = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
