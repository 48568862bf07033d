"""Reductions (one or more dims, keepdim), softmax/log_softmax and cumsum on every device."""
import warnings

import numpy as np
import pytest

import ember
from helpers import require
from strided import (ALL, F32Guard, FLOATS, INTS, VARIANTS, check, on_device, rng_for, sample,
                     variant)

SHAPE = (3, 4, 5)
DIMS = [None, 1, -1, (0, 2), (-1, -3)]
ACC = {"f32": np.float32, "f16": np.float32, "bf16": np.float32, "f64": np.float64}


def _np_reduce(op, x, dims, keepdim):
    axis = None if dims is None else dims
    if op == "sum":
        return np.sum(x, axis=axis, keepdims=keepdim, dtype=x.dtype)
    if op == "mean":
        return np.mean(x, axis=axis, keepdims=keepdim, dtype=x.dtype)
    if op == "max":
        return np.max(x, axis=axis, keepdims=keepdim)
    if op == "min":
        return np.min(x, axis=axis, keepdims=keepdim)
    if op == "var":
        return np.var(x, axis=axis, keepdims=keepdim, ddof=1, dtype=x.dtype)
    raise ValueError(op)


REDUCE = {"sum": ALL, "mean": FLOATS, "max": ALL, "min": ALL, "var": FLOATS}


def _tol(op, dtype_name):
    # Sums of 60 rounded f16/bf16 values differ from f32 sums by a few result ulps.
    if op in ("sum", "mean", "var") and dtype_name == "f32":
        return 1e-5, 1e-5
    if op == "var" and dtype_name in ("f16", "bf16"):
        return (3e-3, 3e-3) if dtype_name == "f16" else (2e-2, 2e-2)
    return None, None


@pytest.mark.parametrize("dims,keepdim", [(d, k) for d in DIMS for k in (False, True)
                                           if d is not None or not k], ids=str)
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("op,dtype_name", [(op, d) for op, ds in REDUCE.items() for d in ds])
def test_reduce(device, op, dtype_name, kind, dims, keepdim):
    rng = rng_for(op, dtype_name, kind, dims)
    t, x = variant(kind, SHAPE, dtype_name, device, rng, 0, 4)
    call = getattr(t, op)
    out = call() if dims is None else call(dims, keepdim=keepdim)
    rtol, atol = _tol(op, dtype_name)
    check(out, _np_reduce(op, x, dims, keepdim), dtype_name, rtol, atol)


@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), (-1, False),
                                         (-1, True)], ids=str)
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype_name", ALL)
def test_argmax_argmin(device, op, dtype_name, kind, dim, keepdim):
    rng = rng_for(op, dtype_name, kind, dim)
    t, x = variant(kind, SHAPE, dtype_name, device, rng, 0, 100)
    if dim is None:
        out = getattr(t, op)()
        expected = getattr(np, op)(x)
    else:
        out = getattr(t, op)(dim, keepdim=keepdim)
        expected = getattr(np, op)(x, axis=dim, keepdims=keepdim)
    # Ties resolve to the first index, as numpy and torch do on the CPU.
    check(out, np.asarray(expected, np.int64), "i64")


def test_argmax_ties_take_first(device):
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)
    t = on_device(x, "f32", device)
    check(t.argmax(1), np.array([1, 0]), "i64")
    check(t.argmin(1), np.array([3, 0]), "i64")


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "var", "argmax", "argmin"])
def test_reduce_0d(device, op):
    x = np.float32(2.5)
    t = on_device(x, "f32", device)
    out = getattr(t, op)()
    if op in ("argmax", "argmin"):
        check(out, np.int64(0), "i64")
    elif op == "var":
        with np.errstate(all="ignore"):
            check(out, np.float32(np.nan), "f32")
    else:
        check(out, x, "f32")
    check(getattr(t, op)(0) if op != "var" else t.var(0, correction=0),
          np.int64(0) if op.startswith("arg") else (np.float32(0) if op == "var" else x),
          "i64" if op.startswith("arg") else "f32")


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "argmax"])
def test_reduce_empty(device, op):
    x = np.zeros((2, 0, 3), np.float32)
    t = on_device(x, "f32", device)
    if op in ("max", "min", "argmax"):
        # Reducing a non-empty dim of an empty tensor is fine; the empty dim is an error.
        out = getattr(t, op)(2)
        expected = getattr(np, op)(x, axis=2)
        check(out, expected, "i64" if op == "argmax" else "f32")
        with pytest.raises(ember.ShapeMismatch, match=f"{op}.*empty dim 1.*\\[2, 0, 3\\]"):
            getattr(t, op)(1)
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "mean of empty slice"
        check(getattr(t, op)(1), getattr(np, op)(x, axis=1), "f32")
        check(getattr(t, op)(), getattr(np, op)(x), "f32")


def test_var_correction(device):
    rng = rng_for("var")
    x = sample((4, 6), "f32", rng)
    t = on_device(x, "f32", device)
    check(t.var(1, correction=0), np.var(x, axis=1), "f32", rtol=1e-5)
    check(t.var(1, unbiased=False), np.var(x, axis=1), "f32", rtol=1e-5)
    check(t.var(), np.var(x, ddof=1), "f32", rtol=1e-5)
    check(t.std(0), np.std(x, axis=0, ddof=1), "f32", rtol=1e-5)


def test_sum_of_large_f32_stays_accurate(device):
    """A sum over 4096 elements: pairwise/tree summation keeps f32 close to f64."""
    x = np.full((4096,), 0.1, np.float32)
    check(on_device(x, "f32", device).sum(), np.sum(x.astype(np.float64)), "f32", rtol=1e-5)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
def test_softmax(device, dtype_name, kind, dim, log):
    torch = require("torch")
    rng = rng_for("softmax", dtype_name, kind, dim, log)
    t, x = variant(kind, SHAPE, dtype_name, device, rng)
    tx = torch.from_numpy(np.array(x * 4, copy=True))
    t = t * 4
    if log:
        out, expected = t.log_softmax(dim), torch.log_softmax(tx, dim).numpy()
    else:
        out, expected = t.softmax(dim), torch.softmax(tx, dim).numpy()
    check(out, expected, dtype_name)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_is_stable_for_large_inputs(device, log):
    torch = require("torch")
    x = np.array([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, 1e4], [-np.inf, 0.0, 1.0]], np.float32)
    t = on_device(x, "f32", device)
    fn = torch.log_softmax if log else torch.softmax
    check(t.log_softmax(-1) if log else t.softmax(-1), fn(torch.from_numpy(x), -1).numpy(), "f32")


@pytest.mark.parametrize("shape", [(), (0,), (3, 0)], ids=str)
def test_softmax_0d_and_empty(device, shape):
    torch = require("torch")
    x = np.ones(shape, np.float32)
    t = on_device(x, "f32", device)
    check(t.softmax(-1), torch.softmax(torch.from_numpy(x), -1).numpy(), "f32")
    check(t.log_softmax(-1), torch.log_softmax(torch.from_numpy(x), -1).numpy(), "f32")
    check(ember.softmax(t, -1), torch.softmax(torch.from_numpy(x), -1).numpy(), "f32")


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_cumsum(device, dtype_name, kind, dim):
    rng = rng_for("cumsum", dtype_name, kind, dim)
    t, x = variant(kind, SHAPE, dtype_name, device, rng, 0, 4)
    check(t.cumsum(dim), np.cumsum(x, axis=dim, dtype=x.dtype), dtype_name,
          *((1e-5, 1e-5) if dtype_name == "f32" else (None, None)))


@pytest.mark.parametrize("shape", [(), (0,), (2, 0)], ids=str)
def test_cumsum_0d_and_empty(device, shape):
    x = np.full(shape, 1.5, np.float32)
    check(on_device(x, "f32", device).cumsum(0), np.cumsum(x.reshape(-1), 0).reshape(shape) if
          x.ndim == 0 else np.cumsum(x, axis=0), "f32")


@pytest.mark.parametrize("fn", ["sum", "mean", "max", "var", "softmax", "log_softmax",
                                "cumsum", "layer_norm", "rms_norm"])
def test_reductions_keep_f32_on_the_cpu(fn):
    """Fast by construction: every numpy call inside the CPU backend stays in f32."""
    cpu = ember.Device.cpu()
    data = np.linspace(-2, 2, 24, dtype=np.float32).view(F32Guard)
    t = ember.Tensor(data, ember.Layout((4, 6)), ember.f32, cpu)
    if fn in ("softmax", "log_softmax", "cumsum"):
        out = getattr(t, fn)(-1)
    elif fn in ("layer_norm", "rms_norm"):
        out = getattr(t, fn)()
    else:
        out = getattr(t, fn)(-1)
    assert out.numpy().dtype == np.float32


@pytest.mark.parametrize("dtype_name", INTS)
def test_mean_var_softmax_refuse_integers(device, dtype_name):
    t = on_device(np.arange(6).reshape(2, 3), dtype_name, device)
    for op in ("mean", "var", "softmax", "log_softmax"):
        with pytest.raises(ember.UnsupportedDType, match=f"{op}.*{dtype_name}"):
            getattr(t, op)(-1) if op.endswith("softmax") else getattr(t, op)()


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
def test_layer_norm_and_rms_norm(device, dtype_name, kind, affine):
    torch = require("torch")
    rng = rng_for("norm", dtype_name, kind, affine)
    # 2-D, so that the broadcast variant repeats rows, not values within a row (a constant
    # row normalizes to 0/sqrt(eps), where any rounding of the mean is amplified 300x).
    t, x = variant(kind, (6, SHAPE[-1]), dtype_name, device, rng)
    w = sample((SHAPE[-1],), dtype_name, rng) if affine else None
    b = sample((SHAPE[-1],), dtype_name, rng) if affine else None
    tw = on_device(w, dtype_name, device) if affine else None
    tb = on_device(b, dtype_name, device) if affine else None
    tx = torch.from_numpy(np.array(x, np.float64))
    tw64 = torch.from_numpy(np.array(w, np.float64)) if affine else None
    tb64 = torch.from_numpy(np.array(b, np.float64)) if affine else None
    expected = torch.nn.functional.layer_norm(tx, (SHAPE[-1],), tw64, tb64, eps=1e-5).numpy()
    tol = (1e-5, 1e-5) if dtype_name == "f32" else (None, None)
    check(t.layer_norm(tw, tb, eps=1e-5), expected, dtype_name, *tol)
    expected = torch.nn.functional.rms_norm(tx, (SHAPE[-1],), tw64, eps=1e-6).numpy()
    check(t.rms_norm(tw, eps=1e-6), expected, dtype_name, *tol)


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ["f32", "f64", "i64", "i32"])
def test_prod(device, dtype_name, kind):
    rng = rng_for("prod", dtype_name, kind)
    t, x = variant(kind, SHAPE, dtype_name, device, rng, 1, 3)
    check(t.prod(-1), np.prod(x, axis=-1, dtype=x.dtype), dtype_name)
    check(t.prod((0, 1), keepdim=True), np.prod(x, axis=(0, 1), keepdims=True, dtype=x.dtype),
          dtype_name)


def test_reductions_over_long_rows(device):
    """A few explicit sizes past one workgroup / one tile: 70,001 elements in a row."""
    rng = rng_for("long-rows")
    x = sample((2, 70001), "f32", rng)
    t = on_device(x, "f32", device)
    check(t.sum(-1), x.astype(np.float64).sum(-1), "f32", rtol=1e-4, atol=1e-3)
    check(t.max(-1), x.max(-1), "f32")
    check(t.argmin(-1), x.argmin(-1), "i64")
    check(t.mean(0), x.mean(0), "f32")
    torch = require("torch")
    check(t.softmax(-1), torch.softmax(torch.from_numpy(x), -1).numpy(), "f32", rtol=1e-4,
          atol=1e-9)
    y = x[:, :5003]
    check(on_device(y, "f32", device).cumsum(-1), np.cumsum(y.astype(np.float64), -1), "f32",
          rtol=1e-4, atol=1e-3)
