"""WebGPU limits handled, not hoped for: bindings over the adapter's maximum storage
binding, grids over 65,535 workgroups per dimension, at most 8 storage buffers a kernel."""
import re
from importlib import resources

import numpy as np
import pytest

import ember
from ember.backends.webgpu import kernels
from wgpu_device import wgpu  # noqa: F401  (fixture)


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
