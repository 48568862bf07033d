"""WebGPU limits handled, not hoped for: bindings over the adapter's maximum storage
binding, grids over 65,535 workgroups per dimension, at most 8 storage buffers a kernel."""
import re
from importlib import resources

import numpy as np
import pytest

import ember
from ember.backends.webgpu import kernels
from wgpu_device import CAP, capped, wgpu  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _give_memory_back(request):
    """These tests allocate hundreds of MiB; return the pooled buffers afterwards so the
    rest of the session does not carry them."""
    yield
    if "wgpu" in request.fixturenames:
        import gc
        gc.collect()
        request.getfixturevalue("wgpu").backend.empty_cache()


def _over_binding(backend, extra):
    """An element count whose f32 tensor is larger than one storage binding."""
    return backend.max_binding // 4 + extra


def test_add_larger_than_max_binding(wgpu):
    n = _over_binding(wgpu.backend, 4099)
    assert n * 4 > wgpu.backend.max_binding
    a = (np.arange(n, dtype=np.float32) % 1000.0)
    b = np.float32(0.5) * (np.arange(n, dtype=np.float32) % 7.0)
    ta = ember.tensor(a, device=wgpu)
    tb = ember.tensor(b, device=wgpu)
    out = (ta + tb).numpy()
    np.testing.assert_array_equal(out, a + b)
    # A broadcast operand next to the large one, with an offset view of the large one.
    row = np.arange(4, dtype=np.float32)
    m = n // 4
    got = (ta[: m * 4].reshape(m, 4) * ember.tensor(row, device=wgpu)).numpy()
    np.testing.assert_array_equal(got, a[: m * 4].reshape(m, 4) * row)


@pytest.mark.parametrize("layout", ["weight_k_by_n", "linear_weight_transposed"])
def test_matmul_weight_larger_than_max_binding(wgpu, layout):
    backend = wgpu.backend
    k = 4096
    n = backend.max_binding // (4 * k) + 8
    assert k * n * 4 > backend.max_binding
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, k), dtype=np.float32)
    if layout == "weight_k_by_n":
        w = rng.standard_normal((k, n), dtype=np.float32)
        tw = ember.tensor(w, device=wgpu)
    else:  # a Linear weight [N, K] used as W.T: the split runs over output columns
        wt = rng.standard_normal((n, k), dtype=np.float32)
        w = wt.T
        tw = ember.tensor(wt, device=wgpu).t()
    got = (ember.tensor(x, device=wgpu) @ tw).numpy()
    expected = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-3)


def test_1d_op_over_more_than_65535_workgroups(wgpu):
    n = 2 ** 24 + 1   # 65,537 workgroups of 256: the grid folds into two dimensions
    x = (np.arange(n, dtype=np.float32) % 4096.0)
    t = ember.tensor(x, device=wgpu)
    got = (t * 2.0 + 1.0).numpy()
    np.testing.assert_array_equal(got, x * 2.0 + 1.0)
    assert got[-1] == x[-1] * 2.0 + 1.0   # the very last element is computed
    # A reduction over all of it (one workgroup) sees every element too.
    assert (t > 4094.5).to(ember.i32).sum().item() == int((x > 4094.5).sum())
    # argmax/argmin over all of it: per-chunk extremes, then the first chunk holding one.
    assert t.argmax().item() == int(x.argmax()) and t.argmin().item() == int(x.argmin())
    assert (t * -1.0).argmax(0).item() == int((-x).argmax())


def _storage_bindings(text):
    return re.findall(r"var<storage\b", text)


def test_no_kernel_binds_more_than_8_storage_buffers():
    names = sorted(p.name[:-5] for p in resources.files("ember.shaders").iterdir()
                   if p.name.endswith(".wgsl") and p.name != "prelude.wgsl")
    assert set(names) == set(kernels.BINDINGS), "every shader file has a binding table row"
    for name in names:
        count = len(_storage_bindings(kernels.source(name)))
        assert count <= 8, f"{name}.wgsl binds {count} storage buffers"
        assert count == len(kernels.BINDINGS[name]), name
    assert not _storage_bindings(kernels.source("prelude"))


def test_every_built_pipeline_respects_the_storage_limit(wgpu):
    """Pipelines the backend actually built (after the tests above) bind <= 8 buffers and
    the device was opened with the adapter's larger binding limit."""
    backend = wgpu.backend
    a = ember.tensor(np.ones((4, 4), np.float32), device=wgpu)
    ember.where(a > 0, a, a).layer_norm(a[0], a[0]).numpy()
    for key in backend.pipelines:
        assert len(kernels.BINDINGS[key[0]]) <= 8
    adapter_limit = backend.driver.adapter.limits["max-storage-buffer-binding-size"]
    assert backend.max_binding == adapter_limit


def test_matmul_with_a_long_inner_dim(wgpu):
    """K = 70,001 (odd: the general strided kernel) is split into accumulated partial
    products; lavapipe stops any invocation after 65,535 loop iterations."""
    rng = np.random.default_rng(4)
    k = 70001
    a = rng.standard_normal((3, k), dtype=np.float32)
    b = rng.standard_normal((k, 5), dtype=np.float32)
    got = (ember.tensor(a, device=wgpu) @ ember.tensor(b, device=wgpu)).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=5e-3)


@pytest.mark.parametrize("dtype_name", ["f32", "i32"])
def test_cumsum_over_a_long_dim(wgpu, dtype_name):
    """A scan of 70,001 elements (and a strided one across rows of 9,000) runs in chunks
    with carries: no invocation loops 65,535 times, lavapipe's cap."""
    rng = np.random.default_rng(6)
    x = rng.integers(-3, 4, size=70001).astype(np.float32)
    got = ember.tensor(x, dtype=dtype_name, device=wgpu).cumsum(0).numpy()
    np.testing.assert_array_equal(got, np.cumsum(x))
    y = rng.integers(-3, 4, size=(3, 9000)).astype(np.float32)
    got = ember.tensor(y, dtype=dtype_name, device=wgpu).t().cumsum(0).numpy()
    np.testing.assert_array_equal(got, np.cumsum(y.T, axis=0))


# (the `capped` fixture and CAP come from wgpu_device.py)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _dispatches(device, fn):
    before = device.backend.counters["dispatches"]
    fn()
    return device.backend.counters["dispatches"] - before


def test_capped_backend_splits_what_fits_uncapped(wgpu, capped):
    x = _f32(np.random.default_rng(10), 40, 300)
    plain = _dispatches(wgpu, lambda: ember.tensor(x, device=wgpu).sum(-1).numpy())
    split = _dispatches(capped, lambda: ember.tensor(x, device=capped).sum(-1).numpy())
    assert split > plain >= 1


def test_capped_elementwise_over_transposed_views(capped):
    rng = np.random.default_rng(11)
    a, b = _f32(rng, 300, 40), _f32(rng, 40, 300)
    ta, tb = ember.tensor(a, device=capped), ember.tensor(b, device=capped)
    # One row of a.t() reads a whole column of a: 300 elements 160 bytes apart.
    np.testing.assert_allclose(ta.t().exp().numpy(), np.exp(a.T), rtol=2e-6)
    np.testing.assert_array_equal((ta.t() + tb).numpy(), a.T + b)
    np.testing.assert_array_equal((ta.t() * 2.0).numpy(), a.T * 2.0)
    np.testing.assert_array_equal(ta.t().contiguous().numpy(), a.T)
    np.testing.assert_array_equal(ta.t().to(ember.f16).numpy(), a.T.astype(np.float16))
    np.testing.assert_array_equal(ember.cat([ta.t(), tb], 0).numpy(),
                                  np.concatenate([a.T, b], 0))
    np.testing.assert_array_equal(ember.where(ta.t() > 0, tb, ta.t()).numpy(),
                                  np.where(a.T > 0, b, a.T))
    # Slice assignment into a transposed destination: the copy cuts both sides into tiles.
    dst = ember.zeros(300, 40, device=capped)
    dst.t().narrow(1, 10, 240).copy_(tb.narrow(1, 0, 240))
    expected = np.zeros((300, 40), np.float32)
    expected.T[:, 10:250] = b[:, :240]
    np.testing.assert_array_equal(dst.numpy(), expected)


def _reduce_cases():
    for op in ("sum", "mean", "max", "min", "prod"):
        for dims in (-1, 0, None, (0, 2), (1,)):
            yield op, dims


@pytest.mark.parametrize("op,dims", list(_reduce_cases()))
@pytest.mark.parametrize("view", ["contiguous", "permuted"])
def test_capped_reductions_match_numpy(capped, op, dims, view):
    rng = np.random.default_rng(12)
    x = _f32(rng, 6, 50, 40)
    if op == "prod":   # values near 1, so the product of thousands stays finite
        x = (1.0 + x / 200.0).astype(np.float32)
    t = ember.tensor(x, device=capped)
    if view == "permuted":
        x, t = x.transpose(2, 0, 1), t.permute(2, 0, 1)
    got = (getattr(t, op)() if dims is None else getattr(t, op)(dims)).numpy()
    expected = getattr(np, op)(x.astype(np.float64), axis=dims)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_capped_argmax_argmin_keep_the_global_index(capped, op):
    rng = np.random.default_rng(13)
    x = _f32(rng, 6, 50, 40)
    t = ember.tensor(x, device=capped)
    for dim in (None, 0, 1, 2):
        got = (getattr(t, op)() if dim is None else getattr(t, op)(dim)).numpy()
        np.testing.assert_array_equal(got, getattr(x, op)(axis=dim), err_msg=f"dim {dim}")
    got = getattr(t.permute(2, 0, 1), op)(1).numpy()
    np.testing.assert_array_equal(got, getattr(x.transpose(2, 0, 1), op)(axis=1))
    # Ties across pieces keep the first index; a NaN wins (first NaN), as in numpy.
    z = np.zeros(3000, np.float32)
    z[[700, 2500]] = 5.0 if op == "argmax" else -5.0
    assert getattr(ember.tensor(z, device=capped), op)().item() == 700
    z[[1200, 2900]] = np.nan
    assert getattr(ember.tensor(z, device=capped), op)().item() == 1200


def test_capped_integer_reductions(capped):
    x = np.random.default_rng(14).integers(-1000, 1000, size=(40, 300))
    t = ember.tensor(x, dtype=ember.i64, device=capped)
    np.testing.assert_array_equal(t.sum(0).numpy(), x.sum(0))
    np.testing.assert_array_equal(t.sum().numpy(), x.sum())
    np.testing.assert_array_equal(t.max(-1).numpy(), x.max(-1))
    np.testing.assert_array_equal(t.argmin(0).numpy(), x.argmin(0))


def _softmax(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def test_capped_softmax_rows(capped):
    rng = np.random.default_rng(15)
    x = _f32(rng, 40, 300)
    t = ember.tensor(x, device=capped)
    np.testing.assert_allclose(t.softmax(-1).numpy(), _softmax(x, -1), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(t.log_softmax(-1).numpy(), np.log(_softmax(x, -1)),
                               rtol=1e-5, atol=1e-5)
    # Rows that are columns (dim 0) or strided (a transposed view) run on a copy with
    # the row contiguous, copied back in place.
    np.testing.assert_allclose(t.softmax(0).numpy(), _softmax(x, 0), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(t.t().softmax(-1).numpy(), _softmax(x.T, -1), rtol=1e-4,
                               atol=1e-7)
    y = _f32(rng, 3, 40, 30)
    np.testing.assert_allclose(ember.tensor(y, device=capped).softmax(1).numpy(),
                               _softmax(y, 1), rtol=1e-4, atol=1e-7)


def test_capped_norms(capped):
    rng = np.random.default_rng(16)
    x, w, b = _f32(rng, 40, 300), _f32(rng, 300), _f32(rng, 300)
    t = ember.tensor(x, device=capped)
    tw, tb = ember.tensor(w, device=capped), ember.tensor(b, device=capped)

    def layer_norm(v):
        v = v.astype(np.float64)
        c = v - v.mean(-1, keepdims=True)
        return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b

    def rms_norm(v):
        v = v.astype(np.float64)
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-6) * w

    np.testing.assert_allclose(t.layer_norm(tw, tb, eps=1e-5).numpy(), layer_norm(x),
                               rtol=2e-4, atol=1e-4)
    np.testing.assert_allclose(t.rms_norm(tw, eps=1e-6).numpy(), rms_norm(x), rtol=2e-4,
                               atol=1e-4)
    xt = _f32(rng, 300, 40)
    tt = ember.tensor(xt, device=capped).t()
    np.testing.assert_allclose(tt.layer_norm(tw, tb, eps=1e-5).numpy(), layer_norm(xt.T),
                               rtol=2e-4, atol=1e-4)


@pytest.mark.parametrize("expression", ["a.softmax(-1)", "a.log_softmax(0)",
                                        "a.layer_norm(None, None, eps=1e-5)",
                                        "a.rms_norm(None, eps=1e-6)"])
def test_capped_row_over_the_limit_raises_naming_the_op(capped, expression):
    # One row of 2,000 f32 is 8,000 bytes: it cannot be split, only refused clearly.
    a = ember.tensor(np.ones((2, 2000), np.float32), device=capped)
    if "(0)" in expression:
        a = a.t()
    with pytest.raises(ember.UnsupportedOp) as info:
        eval(expression)
    message = str(info.value)
    op = expression.split(".")[1].split("(")[0]
    assert message.startswith(f"{op}:") and "8000 bytes" in message and str(CAP) in message


def test_capped_readback_of_packed_dtypes(capped):
    rng = np.random.default_rng(17)
    x = _f32(rng, 40, 301)
    t = ember.tensor(x, device=capped)
    np.testing.assert_array_equal(t.to(ember.f16).numpy(), x.astype(np.float16))
    bits = x.view(np.uint32)
    bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)
    np.testing.assert_array_equal(t.to(ember.bf16).numpy(), bf16)
    np.testing.assert_array_equal((t > 0).numpy(), (x > 0).astype(np.uint8))
    ids = rng.integers(-10 ** 6, 10 ** 6, size=5001)
    np.testing.assert_array_equal((ember.tensor(ids, dtype=ember.i64, device=capped) + 1)
                                  .numpy(), ids + 1)


def test_capped_index_select_from_a_table_larger_than_a_binding(capped):
    rng = np.random.default_rng(18)
    table = _f32(rng, 500, 24)            # 48,000 bytes: bound in ranges of rows
    tt = ember.tensor(table, device=capped)
    ids = rng.integers(0, 500, size=(3, 70))
    ti = ember.tensor(ids, dtype=ember.i64, device=capped)
    np.testing.assert_array_equal(ember.embedding(ti, tt).numpy(), table[ids])
    # Ids computed on the device carry no known range: every range of rows is visited.
    np.testing.assert_array_equal(ember.embedding(ti * 1, tt).numpy(), table[ids])
    # Ids in a narrow range visit only the ranges that hold them.
    few = rng.integers(100, 140, size=50)
    tf = ember.tensor(few, dtype=ember.i64, device=capped)
    narrow = _dispatches(capped, lambda: tt.index_select(0, tf).numpy())
    wide = _dispatches(capped, lambda: tt.index_select(0, ti.reshape(-1)).numpy())
    assert narrow < wide
    cols = rng.integers(0, 24, size=10)
    tc = ember.tensor(cols, dtype=ember.i64, device=capped)
    np.testing.assert_array_equal(tt.index_select(1, tc).numpy(), table[:, cols])
    np.testing.assert_array_equal(tt.t().index_select(1, tf).numpy(), table.T[:, few])
    picks = rng.integers(0, 500, size=(30, 24))
    np.testing.assert_array_equal(
        tt.gather(0, ember.tensor(picks, dtype=ember.i64, device=capped)).numpy(),
        np.take_along_axis(table, picks, 0))


# --- one real tensor over lavapipe's 128 MiB binding per op family ------------------------
@pytest.fixture(scope="module")
def over_limit(wgpu):
    """[rows, 4096] f32 a few rows over one binding, and its device copy."""
    rows = wgpu.backend.max_binding // (4 * 4096) + 3
    x = (np.arange(rows * 4096, dtype=np.float32) % 1013.0).reshape(rows, 4096)
    x *= np.float32(0.001)
    return x, ember.tensor(x, device=wgpu)


def test_real_reductions_over_the_binding_limit(over_limit):
    x, t = over_limit
    np.testing.assert_allclose(t.sum(-1).numpy(), x.sum(-1, dtype=np.float64), rtol=1e-5)
    np.testing.assert_allclose(t.sum(0).numpy(), x.sum(0, dtype=np.float64), rtol=1e-5)
    assert t.argmax().item() == int(x.argmax())
    np.testing.assert_array_equal(t.argmin(0).numpy(), x.argmin(0))


def test_real_rows_over_the_binding_limit(over_limit):
    x, t = over_limit
    got = t.softmax(-1).numpy()
    np.testing.assert_allclose(got[::997], _softmax(x[::997], -1), rtol=1e-4, atol=1e-9)
    got = t.rms_norm(None, eps=1e-6).numpy()
    v = x[::997].astype(np.float64)
    np.testing.assert_allclose(got[::997], v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-6),
                               rtol=2e-4, atol=1e-5)


def test_real_transposed_copy_and_packed_readback_over_the_binding_limit(over_limit):
    x, t = over_limit
    got = t.t().exp().numpy()
    np.testing.assert_allclose(got[::331], np.exp(x.T[::331]), rtol=2e-6)
    np.testing.assert_array_equal(t.to(ember.f16).numpy()[::997], x[::997].astype(np.float16))
