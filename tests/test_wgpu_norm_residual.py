"""WebGPU's layer_norm / rms_norm with residual=: the norm kernel reads x + residual when
the residual is laid out as x (one dispatch); other layouts, rows split over a capped
binding and rows long enough for the long-row path add first. Expected values: numpy in
float64."""
import numpy as np
import pytest

import ember
from ember.backends.base import Backend
from ember.backends.webgpu import loopcap
from wgpu_device import capped, wgpu  # noqa: F401  (fixtures)


def _want(x, r, w, b, eps, rms):
    s = x.astype(np.float64) + r
    if rms:
        y = s / np.sqrt((s * s).mean(-1, keepdims=True) + eps)
    else:
        c = s - s.mean(-1, keepdims=True)
        y = c / np.sqrt((c * c).mean(-1, keepdims=True) + eps)
    y = y * w
    return y + b if b is not None else y


def _data(seed, rows, n):
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return f(rows, n), f(rows, n), f(n), f(n)


def _norm(x, r, w, b, rms):
    return x.rms_norm(w, 1e-6, residual=r) if rms else x.layer_norm(w, b, 1e-5, residual=r)


def _check(got, x, r, w, b, rms, tol=2e-5):
    want = _want(x, r, w, None if rms else b, 1e-6 if rms else 1e-5, rms)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _dispatches(device, fn):
    before = device.backend.counters["dispatches"]
    out = fn()
    return device.backend.counters["dispatches"] - before, out


@pytest.mark.parametrize("rms", [False, True])
def test_residual_is_read_by_the_norm_kernel(wgpu, rms):
    assert type(wgpu.backend).layer_norm is not Backend.layer_norm   # its own norm kernel
    x, r, w, b = _data(1, 10, 384)
    tx, tr, tw, tb = (ember.tensor(a, device=wgpu) for a in (x, r, w, b))
    count, got = _dispatches(wgpu, lambda: _norm(tx, tr, tw, tb, rms))
    assert count == 1
    _check(got.numpy(), x, r, w, b, rms)


@pytest.mark.parametrize("rms", [False, True])
def test_views_with_equal_strides_fuse_and_others_add_first(wgpu, rms):
    x, r, w, b = _data(2, 6, 40)
    wide_x = np.zeros((6, 52), np.float32)
    wide_x[:, 5:45] = x
    wide_r = np.zeros((6, 52), np.float32)
    wide_r[:, 9:49] = r
    tw, tb = ember.tensor(w, device=wgpu), ember.tensor(b, device=wgpu)
    tx = ember.tensor(wide_x, device=wgpu)[:, 5:45]
    tr = ember.tensor(wide_r, device=wgpu)[:, 9:49]   # same strides, another offset
    count, got = _dispatches(wgpu, lambda: _norm(tx, tr, tw, tb, rms))
    assert count == 1
    _check(got.numpy(), x, r, w, b, rms)
    tr_t = ember.tensor(np.ascontiguousarray(r.T), device=wgpu).t()   # column-major
    count, got = _dispatches(wgpu, lambda: _norm(tx, tr_t, tw, tb, rms))
    assert count == 2
    _check(got.numpy(), x, r, w, b, rms)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision(wgpu, dtype):
    x, r, w, b = _data(3, 9, 64)
    d = ember.as_dtype(dtype)
    cast = lambda a: ember.tensor(a, device=wgpu).to(d)   # noqa: E731
    got = _norm(cast(x), cast(r), cast(w), cast(b), False)
    assert got.dtype is d
    held = [cast(a).to(ember.f32).numpy() for a in (x, r, w, b)]
    _check(got.to(ember.f32).numpy(), *held, False, tol=4e-3 if dtype == "f16" else 3e-2)


@pytest.mark.parametrize("rms", [False, True])
def test_long_rows_add_first(wgpu, monkeypatch, rms):
    monkeypatch.setattr(loopcap, "BUDGET", 200)
    x, r, w, b = _data(4, 3, 16000)
    got = _norm(*(ember.tensor(a, device=wgpu) for a in (x, r, w, b)), rms)
    _check(got.numpy(), x, r, w, b, rms, tol=1e-4)




@pytest.mark.parametrize("rms", [False, True])
def test_rows_split_over_a_capped_binding_bind_the_residual_for_each_box(capped, rms):
    x, r, w, b = _data(5, 40, 300)
    tr = ember.tensor(np.concatenate([np.zeros((3, 300), np.float32), r]), device=capped)[3:]
    count, got = _dispatches(capped, lambda: _norm(
        ember.tensor(x, device=capped), tr, *(ember.tensor(a, device=capped) for a in (w, b)),
        rms).numpy())
    assert count > 1
    _check(got, x, r, w, b, rms, tol=1e-4)
