"""Inputs for op tests: the same values as an ember tensor in four layouts, plus numpy.

Every op test body runs on `contiguous`, `transposed`, `sliced` (steps and an offset)
and `broadcast` (stride-0) inputs, so a backend that ignores strides fails.

Values are chosen to be exactly representable in the target dtype (f16 through numpy's
rounding, bf16 by truncating f32 bits), so the expected values can be computed by numpy
in f32 (f64 for f64) from the very numbers ember holds, without asking ember to round.
"""
import zlib

import numpy as np
import pytest

import ember

FLOATS = ("f32", "f16", "bf16", "f64")
INTS = ("i64", "i32", "u32", "u8")
SIGNED = ("i64", "i32")
ALL = FLOATS + INTS
VARIANTS = ("contiguous", "transposed", "sliced", "broadcast")

# The numpy dtype expected values are computed in.
COMPUTE = {"f32": np.float32, "f16": np.float32, "bf16": np.float32, "f64": np.float64,
           "i64": np.int64, "i32": np.int32, "u32": np.uint32, "u8": np.uint8}
# The numpy dtype `.numpy()` returns (bf16 comes back as f32).
RESULT = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "f64": np.float64,
          "i64": np.int64, "i32": np.int32, "u32": np.uint32, "u8": np.uint8}


def rng_for(*keys):
    """A generator seeded from the test's parameters: reproducible across runs."""
    return np.random.default_rng(zlib.crc32(repr(keys).encode()))


def representable(values, dtype_name):
    """`values` rounded into `dtype_name`, returned in the compute dtype."""
    if dtype_name == "f16":
        return np.asarray(values, np.float32).astype(np.float16).astype(np.float32)
    if dtype_name == "bf16":
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        return (bits & np.uint32(0xFFFF0000)).view(np.float32)
    return np.asarray(values).astype(COMPUTE[dtype_name])


def sample(shape, dtype_name, rng, low=None, high=None):
    """Random values of `shape` for `dtype_name`: normal floats (or uniform in [low, high)),
    integers in [low, high) (defaults keep products and sums small)."""
    if dtype_name in FLOATS:
        if low is None:
            values = rng.standard_normal(shape)
        else:
            values = rng.uniform(low, high, size=shape)
        return representable(values, dtype_name)
    lo = (0 if dtype_name.startswith("u") else -9) if low is None else low
    hi = 10 if high is None else high
    return rng.integers(lo, hi, size=shape).astype(COMPUTE[dtype_name])


def on_device(values, dtype_name, device):
    """An ember tensor of `values`; a device that refuses the dtype (e.g. f64 on WebGPU)
    skips, while the CPU must accept every dtype."""
    try:
        return ember.tensor(values, dtype=getattr(ember, dtype_name), device=device)
    except ember.UnsupportedDType as exc:
        if device.kind == "cpu":
            raise
        pytest.skip(f"{device} does not hold {dtype_name}: {exc}")


_SUPPORTED = {}


def skip_unless_holds(device, dtype_name):
    """Skip on a non-CPU device that cannot hold `dtype_name` (e.g. f64 on WebGPU)."""
    key = (str(device), dtype_name)
    if key not in _SUPPORTED:
        try:
            ember.zeros(1, dtype=getattr(ember, dtype_name), device=device)
            _SUPPORTED[key] = None
        except ember.UnsupportedDType as exc:
            _SUPPORTED[key] = str(exc)
    if _SUPPORTED[key] is not None:
        if device.kind == "cpu":
            raise AssertionError(_SUPPORTED[key])
        pytest.skip(f"{device} does not hold {dtype_name}: {_SUPPORTED[key]}")


def variant(kind, shape, dtype_name, device, rng, low=None, high=None):
    """(ember tensor, numpy array) with the same logical values and shape, laid out as
    `kind`. Needs len(shape) >= 2 for `transposed` and >= 1 for `sliced`/`broadcast`."""
    shape = tuple(shape)
    if kind == "contiguous":
        values = sample(shape, dtype_name, rng, low, high)
        return on_device(values, dtype_name, device), values
    if kind == "transposed":
        assert len(shape) >= 2, "transposed needs 2 dims"
        base_shape = shape[:-2] + (shape[-1], shape[-2])
        base = sample(base_shape, dtype_name, rng, low, high)
        t = on_device(base, dtype_name, device).transpose(-1, -2)
        return t, base.swapaxes(-1, -2)
    if kind == "sliced":
        # Every dim twice as long; take odd positions of dim 0 and even ones elsewhere,
        # so the view has steps on every dim and a non-zero offset.
        base_shape = tuple(2 * d for d in shape)
        base = sample(base_shape, dtype_name, rng, low, high)
        index = tuple(slice(1, None, 2) if i == 0 else slice(None, None, 2)
                      for i in range(len(shape)))
        return on_device(base, dtype_name, device)[index], base[index]
    if kind == "broadcast":
        # Dim 0 (and the last dim when there are 3+) read one row through stride 0.
        src_shape = list(shape)
        src_shape[0] = 1
        if len(shape) >= 3:
            src_shape[-1] = 1
        src = sample(tuple(src_shape), dtype_name, rng, low, high)
        t = on_device(src, dtype_name, device).broadcast_to(shape)
        return t, np.broadcast_to(src, shape)
    raise ValueError(kind)


def check(actual, expected, dtype_name, rtol=None, atol=None):
    """Compare an ember result with a numpy expectation: dtype, shape and values."""
    got = actual.numpy()
    assert actual.dtype is getattr(ember, dtype_name), (actual.dtype, dtype_name)
    assert got.dtype == RESULT[dtype_name], (got.dtype, dtype_name)
    expected = np.asarray(expected)
    if dtype_name == "f16":
        with np.errstate(over="ignore"):  # f16 overflows to inf at 65520, like the result
            expected = expected.astype(np.float16)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if dtype_name in FLOATS:
        from helpers import TOL
        r, a = TOL[dtype_name]
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=r if rtol is None else rtol,
                                   atol=a if atol is None else atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected.astype(RESULT[dtype_name]))


class F32Guard(np.ndarray):
    """Fast by construction: an array that fails on `**` (numpy's pow hits denormal slow
    paths) and on anything that would promote f32 to f64 (numpy float64 scalars, f64
    operands). Every ufunc, reduction and matmul on it goes through __array_ufunc__."""

    def __pow__(self, other):
        raise AssertionError("x ** n in an ops-table form: write x * x * x")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        for i in inputs:
            if isinstance(i, (np.ndarray, np.generic)) and i.dtype == np.float64:
                raise AssertionError(f"{ufunc.__name__} got a float64 operand")
        def plain(a):
            return a.view(np.ndarray) if isinstance(a, F32Guard) else a
        if "out" in kwargs:
            kwargs["out"] = tuple(plain(o) for o in kwargs["out"])
        with np.errstate(all="ignore"):
            out = getattr(ufunc, method)(*[plain(i) for i in inputs], **kwargs)
        if isinstance(out, np.ndarray):
            assert out.dtype != np.float64, f"{ufunc.__name__} produced float64"
            return out.view(F32Guard)
        return out
