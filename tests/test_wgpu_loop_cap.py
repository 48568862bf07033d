"""No WebGPU kernel loops past lavapipe's cap: 65,535 loop iterations per invocation, in
total over all its loops, after which lavapipe quietly returns what was written so far.

Inputs just past each formerly unguarded threshold run twice: at their real size on the
native adapter (lavapipe here), where they used to come back wrong, and with the
backend's loop budget (loopcap.BUDGET) lowered so that small inputs take the same paths
across dtypes and layouts in a fraction of a second.
"""
import numpy as np
import pytest

import ember
from ember.backends.webgpu import loopcap
from helpers import TOL
from wgpu_device import wgpu  # noqa: F401  (fixture)

_LOW = 200   # iterations: rows of ~15,000 elements (three passes) and 200 ids are "long"


@pytest.fixture
def low_budget(monkeypatch):
    monkeypatch.setattr(loopcap, "BUDGET", _LOW)


@pytest.fixture(autouse=True)
def _give_memory_back(request):
    yield
    if "wgpu" in request.fixturenames:
        import gc
        gc.collect()
        request.getfixturevalue("wgpu").backend.empty_cache()


def _dispatches(device, fn):
    before = device.backend.counters["dispatches"]
    result = fn()
    return result, device.backend.counters["dispatches"] - before


def _softmax(x, axis, log):
    x = x.astype(np.float64)
    m = x.max(axis, keepdims=True)
    e = np.exp(x - m)
    s = e.sum(axis, keepdims=True)
    return x - m - np.log(s) if log else e / s


def _norm(x, w, b, eps, rms):
    x = x.astype(np.float64)
    if rms:
        y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    else:
        y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


def _on_device(device, x, dtype_name):
    """x as a device tensor of dtype, and the values it holds (rounded to dtype) in f32."""
    t = ember.tensor(x, device=device).to(getattr(ember, dtype_name))
    return t, t.to(ember.f32).numpy()


# --- real sizes: inputs that used to pass the cap -------------------------------------------
# A row of 5.6M f32 with 256 invocations sharing it: three passes (softmax, layer_norm) of
# 21,875 iterations each are 65,625 in every invocation, just over 65,535; rms_norm makes
# two passes, so its row is 8.4M: 2 x 32,813.
_REAL_ROW = 5_600_000
_REAL_RMS_ROW = 8_400_000


@pytest.mark.parametrize("log", [False, True])
def test_real_softmax_row_past_the_cap(wgpu, log):
    x = np.random.default_rng(1).standard_normal((1, _REAL_ROW)).astype(np.float32)
    t = ember.tensor(x, device=wgpu)
    got = (t.log_softmax(-1) if log else t.softmax(-1)).numpy()
    expected = _softmax(x, -1, log)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6 if log else 1e-12)
    if not log:
        assert abs(float(got.sum(dtype=np.float64)) - 1.0) < 1e-4


@pytest.mark.parametrize("rms", [False, True])
def test_real_norm_row_past_the_cap(wgpu, rms):
    rng = np.random.default_rng(2)
    n = _REAL_RMS_ROW if rms else _REAL_ROW
    x = (3.0 + rng.standard_normal((1, n))).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    b = None if rms else rng.standard_normal(n).astype(np.float32)
    tx, tw = ember.tensor(x, device=wgpu), ember.tensor(w, device=wgpu)
    if rms:
        got = tx.rms_norm(tw, eps=1e-6).numpy()
    else:
        got = tx.layer_norm(tw, ember.tensor(b, device=wgpu), eps=1e-5).numpy()
    np.testing.assert_allclose(got, _norm(x, w, b, 1e-5 if not rms else 1e-6, rms),
                               rtol=1e-4, atol=1e-4)


def test_real_scatter_add_with_more_ids_than_the_cap(wgpu):
    # Each output element scans all ids along dim: 70,000 of them used to stop at 65,535.
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 5, size=70_000)
    src = rng.integers(-3, 4, size=70_000).astype(np.float32)
    got = ember.zeros(5, device=wgpu).scatter_add(
        0, ember.tensor(ids, device=wgpu), ember.tensor(src, device=wgpu)).numpy()
    expected = np.zeros(5, np.float32)
    np.add.at(expected, ids, src)
    np.testing.assert_array_equal(got, expected)


# --- lowered budget: the same paths on small inputs -----------------------------------------
@pytest.mark.parametrize("dtype_name", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("log", [False, True])
def test_long_softmax_rows_match_numpy(wgpu, low_budget, dtype_name, dim, log):
    rng = np.random.default_rng(4)
    x = (4.0 * rng.standard_normal((3, 15_000))).astype(np.float32)
    if dim == 0:
        x = np.ascontiguousarray(x.T)      # rows down the columns: strided rows
    t, held = _on_device(wgpu, x, dtype_name)
    got, launched = _dispatches(wgpu, lambda: (
        t.log_softmax(dim) if log else t.softmax(dim)).to(ember.f32).numpy())
    assert launched > 2      # not the fused kernel's single pass
    rtol, atol = TOL[dtype_name]
    np.testing.assert_allclose(got, _softmax(held, dim, log), rtol=rtol,
                               atol=atol if log else atol / 1000)


@pytest.mark.parametrize("dtype_name", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("kind", ["layer_norm", "layer_norm_plain", "rms_norm"])
def test_long_norm_rows_match_numpy(wgpu, low_budget, dtype_name, kind):
    rng = np.random.default_rng(5)
    n = 25_000      # rms_norm makes two passes: 2 x (98 + 9) iterations > 200
    x = (2.0 + rng.standard_normal((4, n))).astype(np.float32)
    t, held = _on_device(wgpu, x, dtype_name)
    tw, w = _on_device(wgpu, rng.standard_normal(2 * n).astype(np.float32), dtype_name)
    tw, w = tw[::2], w[::2]        # a strided weight
    tb, b = _on_device(wgpu, rng.standard_normal(n).astype(np.float32), dtype_name)
    if kind == "layer_norm":
        fn, ref = lambda: t.layer_norm(tw, tb, eps=1e-5), _norm(held, w, b, 1e-5, False)
    elif kind == "layer_norm_plain":
        fn, ref = lambda: t.layer_norm(None, None, eps=1e-5), _norm(held, None, None, 1e-5, False)
    else:
        fn, ref = lambda: t.rms_norm(tw, eps=1e-6), _norm(held, w, None, 1e-6, True)
    got, launched = _dispatches(wgpu, lambda: fn().to(ember.f32).numpy())
    assert launched > 2
    rtol, atol = TOL[dtype_name]
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=max(atol, 1e-5))


@pytest.mark.parametrize("op", ["softmax", "layer_norm"])
def test_many_short_rows_leave_one_invocation_per_row_under_budget(wgpu, low_budget, op):
    # 100 rows of 500: on CPU adapters one invocation would make 3 x 500 iterations, over
    # the lowered budget; a workgroup tree per row stays under it, in the fused kernel.
    x = np.random.default_rng(6).standard_normal((100, 500)).astype(np.float32)
    t = ember.tensor(x, device=wgpu)
    if op == "softmax":
        got, launched = _dispatches(wgpu, lambda: t.softmax(-1).numpy())
        expected = _softmax(x, -1, False)
    else:
        got, launched = _dispatches(wgpu, lambda: t.layer_norm(None, None, eps=1e-5).numpy())
        expected = _norm(x, None, None, 1e-5, False)
    assert launched == 1
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype_name", ["f32", "i32"])
def test_scatter_add_with_long_ids_matches_numpy(wgpu, low_budget, dim, dtype_name):
    rng = np.random.default_rng(7)
    dst = rng.integers(-5, 6, size=(7, 6)).astype(np.float32)
    shape = (1000, 4) if dim == 0 else (5, 1000)       # ids narrower than dst elsewhere
    ids = rng.integers(0, dst.shape[dim], size=shape)
    src = rng.integers(-3, 4, size=(shape[0] + 1, shape[1] + 1)).astype(np.float32)
    dt = getattr(ember, dtype_name)
    td = ember.tensor(dst, device=wgpu).to(dt).t().contiguous().t()    # strided dst
    got, launched = _dispatches(wgpu, lambda: td.scatter_add(
        dim, ember.tensor(ids, device=wgpu), ember.tensor(src, device=wgpu).to(dt)).numpy())
    assert launched >= 1000 // _LOW
    expected = dst.copy()
    for idx in np.ndindex(*shape):
        at = list(idx)
        at[dim] = ids[idx]
        expected[tuple(at)] += src[idx]
    np.testing.assert_array_equal(got, expected.astype(got.dtype))
