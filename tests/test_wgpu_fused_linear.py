"""WebGPU's fused linear: bias, activation and residual applied by the matmul kernel as it
stores. One dispatch for bias + gelu + residual; every activation on each matmul kernel
(the vec4 x @ W.T and x @ W kernels, the general strided one, and lavapipe's subgroup
kernel from 8 rows on); a K split into partial products (the epilogue must run once, after
the last); operands over a (capped) binding limit, split by rows and columns with bias and
residual bound for the matching range; strided x, bias and residual; f16 and bf16; K = 0.
Expected values: numpy in float64."""
import math

import numpy as np
import pytest

import ember
from ember.backends.base import Backend
import ember.functional as F
from ember.backends.webgpu import matmul as wgpu_matmul
from wgpu_device import capped, wgpu  # noqa: F401  (fixtures)

_erf = np.vectorize(math.erf)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


ACT = {None: lambda x: x,
       "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
       "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi)
                                                         * (x + 0.044715 * x ** 3))),
       "quick_gelu": lambda x: x * _sigmoid(1.702 * x),
       "relu": lambda x: np.maximum(x, 0.0),
       "silu": lambda x: x * _sigmoid(x),
       "sigmoid": _sigmoid,
       "tanh": np.tanh}


def _want(x, w, b, act, r):
    y = x.astype(np.float64) @ w.astype(np.float64).T
    if b is not None:
        y = y + b
    y = ACT[act](y)
    return y + r if r is not None else y


def _data(seed, m, k, n):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return f(m, k), f(n, k) * np.float32(1 / math.sqrt(max(k, 1))), f(n), f(m, n)


def _dispatches(device, fn):
    before = device.backend.counters["dispatches"]
    out = fn()
    return device.backend.counters["dispatches"] - before, out


def test_wgpu_lists_linear_as_fused(wgpu):
    assert type(wgpu.backend).linear is not Backend.linear   # its own, in the matmul kernels


def test_bias_gelu_residual_is_one_dispatch(wgpu):
    x, w, b, r = _data(0, 16, 64, 48)
    tx, tw, tb, tr = (ember.tensor(a, device=wgpu) for a in (x, w, b, r))
    count, got = _dispatches(wgpu, lambda: F.linear(tx, tw, tb, "gelu", tr))
    assert count == 1
    # The composite path pays a dispatch per step.
    composite, _ = _dispatches(wgpu, lambda: ((tx @ tw.t()) + tb).gelu() + tr)
    assert composite == 4
    np.testing.assert_allclose(got.numpy(), _want(x, w, b, "gelu", r), rtol=1e-5, atol=2e-5)


# (rows, in, out, weight layout): "nk" keeps the weight (out, in) as a Linear does (x @ W.T
# kernels), "kn" stores it (in, out) and hands linear its transpose (x @ W kernels); an
# odd K takes the general strided kernel. 3 rows stay on the plain kernels, 9 take
# lavapipe's subgroup kernels.
PATHS = [(3, 64, 40, "nk"), (9, 64, 40, "nk"), (3, 64, 40, "kn"), (9, 64, 40, "kn"),
         (5, 7, 6, "nk"), (2, 36, 10, "nk")]


def _weight(device, w, layout):
    if layout == "nk":
        return ember.tensor(w, device=device)
    return ember.tensor(np.ascontiguousarray(w.T), device=device).t()


@pytest.mark.parametrize("act", sorted(ACT, key=str))
@pytest.mark.parametrize("m,k,n,layout", PATHS)
def test_every_activation_on_every_kernel(wgpu, act, m, k, n, layout):
    x, w, b, r = _data(m * 100 + n, m, k, n)
    got = F.linear(ember.tensor(x, device=wgpu), _weight(wgpu, w, layout),
                   ember.tensor(b, device=wgpu), act, ember.tensor(r, device=wgpu))
    np.testing.assert_allclose(got.numpy(), _want(x, w, b, act, r), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("with_bias,act,with_res", [(True, None, False), (False, "relu", False),
                                                    (False, None, True), (False, None, False)])
def test_each_part_of_the_epilogue_alone(wgpu, with_bias, act, with_res):
    x, w, b, r = _data(5, 10, 32, 12)
    b, r = (b if with_bias else None), (r if with_res else None)
    t = lambda a: None if a is None else ember.tensor(a, device=wgpu)  # noqa: E731
    got = F.linear(t(x), t(w), t(b), act, t(r))
    np.testing.assert_allclose(got.numpy(), _want(x, w, b, act, r), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("m", [3, 9])
def test_long_k_applies_the_epilogue_once_after_the_last_part(wgpu, monkeypatch, layout, m):
    """K split into parts accumulated into the output: gelu of a partial sum, or the bias
    added per part, would give other values."""
    monkeypatch.setattr(wgpu_matmul, "_MAX_K", 64)
    x, w, b, r = _data(7, m, 260, 20)
    tw = _weight(wgpu, w, layout)
    tx, tb, tr = (ember.tensor(a, device=wgpu) for a in (x, b, r))
    count, got = _dispatches(wgpu, lambda: F.linear(tx, tw, tb, "gelu", tr).numpy())
    assert count >= 4    # 260 in parts of at most 64
    np.testing.assert_allclose(got, _want(x, w, b, "gelu", r), rtol=1e-5, atol=5e-5)


def test_strided_input_bias_and_residual(wgpu):
    x, w, b, r = _data(8, 12, 40, 24)
    wide = np.zeros((12, 47), np.float32)
    wide[:, 3:43] = x                                 # rows 47 apart, offset 3 (not vec4)
    b2 = np.zeros(48, np.float32)
    b2[::2] = b                                       # bias with stride 2
    tx = ember.tensor(wide, device=wgpu)[:, 3:43]
    tb = ember.tensor(b2, device=wgpu)[::2]
    tr = ember.tensor(np.ascontiguousarray(r.T), device=wgpu).t()   # column-major residual
    got = F.linear(tx, ember.tensor(w, device=wgpu), tb, "silu", tr)
    np.testing.assert_allclose(got.numpy(), _want(x, w, b, "silu", r), rtol=1e-5, atol=2e-5)
    # Aligned strided rows (offset and row stride multiples of 4) keep the vec4 kernel.
    wide = np.zeros((12, 48), np.float32)
    wide[:, 4:44] = x
    got = F.linear(ember.tensor(wide, device=wgpu)[:, 4:44], ember.tensor(w, device=wgpu),
                   tb, "tanh", tr)
    np.testing.assert_allclose(got.numpy(), _want(x, w, b, "tanh", r), rtol=1e-5, atol=2e-5)


def test_three_dim_input(wgpu):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 5, 24)).astype(np.float32)
    _, w, b, _ = _data(9, 1, 24, 40)
    r = rng.standard_normal((2, 5, 40)).astype(np.float32)
    got = F.linear(*(ember.tensor(a, device=wgpu) for a in (x, w, b)), activation="gelu_tanh",
                   residual=ember.tensor(r, device=wgpu))
    assert got.shape == (2, 5, 40)
    want = _want(x.reshape(10, 24), w, b, "gelu_tanh", r.reshape(10, 40)).reshape(2, 5, 40)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=2e-5)


def test_empty_inner_dim_gives_the_epilogue_of_zero(wgpu):
    _, _, b, r = _data(10, 4, 1, 6)
    x, w = np.zeros((4, 0), np.float32), np.zeros((6, 0), np.float32)
    got = F.linear(*(ember.tensor(a, device=wgpu) for a in (x, w, b)), activation="sigmoid",
                   residual=ember.tensor(r, device=wgpu))
    np.testing.assert_allclose(got.numpy(), _sigmoid(b.astype(np.float64)) + r, rtol=1e-6,
                               atol=1e-6)
    got = F.linear(ember.tensor(np.zeros((0, 3), np.float32), device=wgpu),
                   ember.tensor(np.ones((6, 3), np.float32), device=wgpu))
    assert got.shape == (0, 6)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m,layout", [(3, "nk"), (9, "nk"), (9, "kn")])
def test_half_precision_rounds_once(wgpu, dtype, m, layout):
    """f16 runs in native f16 storage where the adapter has shader-f16 (f32 storage
    rounded on store elsewhere), bf16 in f32 storage rounded on store; the sum and the
    epilogue run in f32, rounded to the dtype once."""
    x, w, b, r = _data(11, m, 64, 20)
    d = ember.as_dtype(dtype)
    np_dt = np.float16 if dtype == "f16" else None
    cast = lambda a: ember.tensor(a, device=wgpu).to(d)   # noqa: E731
    tw = cast(w) if layout == "nk" else cast(np.ascontiguousarray(w.T)).t()
    got = F.linear(cast(x), tw, cast(b), "gelu", cast(r))
    assert got.dtype is d
    # Reference from the operands as the dtype holds them.
    held = [cast(a).to(ember.f32).numpy() for a in (x, w, b, r)]
    want = _want(*held[:3], "gelu", held[3])
    if np_dt is not None:
        want = want.astype(np_dt).astype(np.float64)
    tol = 4e-3 if dtype == "f16" else 1.6e-2
    np.testing.assert_allclose(got.to(ember.f32).numpy(), want, rtol=tol, atol=tol)


# --- over the binding limit, on a backend that plans with 4 KiB bindings ------------------


@pytest.mark.parametrize("m,k,n,layout", [(40, 64, 48, "nk"), (40, 64, 48, "kn"),
                                          (3, 8, 1500, "nk"), (30, 7, 50, "nk")])
def test_operands_over_the_binding_limit(capped, m, k, n, layout):
    """Residual, output and weight of several KiB (a 1,500-wide bias past 4 KiB too) run
    as launches over row and column ranges, bias and residual bound for each range."""
    x, w, b, r = _data(m + n, m, k, n)
    tr = ember.tensor(np.ascontiguousarray(r.T), device=capped).t()   # strided residual
    count, got = _dispatches(capped, lambda: F.linear(
        ember.tensor(x, device=capped), _weight(capped, w, layout),
        ember.tensor(b, device=capped), "quick_gelu", tr).numpy())
    assert count > 1
    np.testing.assert_allclose(got, _want(x, w, b, "quick_gelu", r), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("layout", ["nk", "kn"])
@pytest.mark.parametrize("m", [1, 13, 70])
def test_gpu_tiles_on_this_adapter(wgpu, monkeypatch, layout, m):
    """The kernels GPUs get (the gpu kernel set: shared-memory tiles, the GEMV for M = 1),
    run here too: rows and columns off the tile edges, the epilogue on every stored
    element."""
    monkeypatch.setattr(wgpu.backend.runtime, "kernel_set", "gpu")
    x, w, b, r = _data(12 + m, m, 68, 36)
    got = F.linear(ember.tensor(x, device=wgpu), _weight(wgpu, w, layout),
                   ember.tensor(b, device=wgpu), "gelu_tanh", ember.tensor(r, device=wgpu))
    np.testing.assert_allclose(got.numpy(), _want(x, w, b, "gelu_tanh", r), rtol=1e-5,
                               atol=2e-5)
