"""Binary ops with NumPy broadcasting, comparisons (u8 results) and where, on every device."""
import numpy as np
import pytest

import ember
from strided import (ALL, FLOATS, INTS, VARIANTS, check, on_device, representable, rng_for,
                     sample, variant)

# name -> (ember call, numpy reference, dtypes)
BINARY = {
    "add": (lambda a, b: a + b, np.add, ALL),
    "sub": (lambda a, b: a - b, np.subtract, ALL),
    "mul": (lambda a, b: a * b, np.multiply, ALL),
    "div": (lambda a, b: a / b, np.divide, FLOATS),
    # Integer division floors, like Python's // (ember never turns ints into floats).
    "floordiv_int": (lambda a, b: a / b, np.floor_divide, INTS),
    "maximum": (lambda a, b: a.maximum(b), np.maximum, ALL),
    "minimum": (lambda a, b: a.minimum(b), np.minimum, ALL),
    "pow": (lambda a, b: a.pow(b), np.power, FLOATS),
}
COMPARE = {
    "eq": (lambda a, b: a == b, np.equal), "ne": (lambda a, b: a != b, np.not_equal),
    "lt": (lambda a, b: a < b, np.less), "le": (lambda a, b: a <= b, np.less_equal),
    "gt": (lambda a, b: a > b, np.greater), "ge": (lambda a, b: a >= b, np.greater_equal),
}
SHAPE = (3, 4, 5)


def _operands(op, dtype_name, kind, device):
    rng = rng_for(op, dtype_name, kind)
    low, high = None, None
    if op == "pow":
        low, high = 0.5, 2.0
    a, x = variant(kind, SHAPE, dtype_name, device, rng, low, high)
    # The right operand is a contiguous tensor of another layout, so the two differ.
    if op in ("div", "floordiv_int"):
        low, high = (0.5, 3.0) if dtype_name in FLOATS else (1, 7)
    y = sample(SHAPE, dtype_name, rng, low, high)
    if op == "pow":
        y = representable(rng.uniform(-2, 2, SHAPE), dtype_name)
    return a, x, on_device(y, dtype_name, device), y


CASES = [(op, d) for op, (_, _, dtypes) in BINARY.items() for d in dtypes]


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("op,dtype_name", CASES)
def test_binary(device, op, dtype_name, kind):
    call, ref, _ = BINARY[op]
    a, x, b, y = _operands(op, dtype_name, kind, device)
    with np.errstate(all="ignore"):
        expected = ref(x, y)
    pow_f32 = op == "pow" and dtype_name == "f32"
    check(call(a, b), expected, dtype_name, rtol=2e-6 if pow_f32 else None)
    # The strided operand on the right too.
    with np.errstate(all="ignore"):
        expected = ref(y, x)
    if op in ("div", "floordiv_int", "pow"):
        return
    check(call(b, a), expected, dtype_name)


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("shapes", [((4, 1, 3), (5, 1)), ((1,), (2, 3)), ((), (2, 3)),
                                    ((2, 3), ()), ((0, 3), (1, 3)), ((2, 1, 0), (4, 1)),
                                    ((), ())], ids=str)
def test_binary_broadcasting_0d_and_empty(device, op, shapes):
    call, ref, dtypes = BINARY[op]
    dtype_name = "f32" if "f32" in dtypes else "i32"
    rng = rng_for(op, shapes)
    low, high = (None, None)
    if op in ("div", "pow"):
        low, high = 0.5, 2.0
    elif dtype_name == "i32":
        low, high = 1, 6
    x = sample(shapes[0], dtype_name, rng, low, high)
    y = sample(shapes[1], dtype_name, rng, low, high)
    check(call(on_device(x, dtype_name, device), on_device(y, dtype_name, device)),
          ref(x, y), dtype_name, rtol=2e-6)


@pytest.mark.parametrize("dtype_name", ALL)
def test_python_scalars_take_the_tensor_dtype(device, dtype_name):
    rng = rng_for("scalar", dtype_name)
    x = sample((2, 3), dtype_name, rng, 1, 5)
    t = on_device(x, dtype_name, device)
    cd = x.dtype.type
    check(t + 2, x + cd(2), dtype_name)
    check(2 + t, cd(2) + x, dtype_name)
    check(t * 3, x * cd(3), dtype_name)
    check(3 * t, cd(3) * x, dtype_name)
    check(t - 1, x - cd(1), dtype_name)
    check(t.maximum(3), np.maximum(x, cd(3)), dtype_name)
    if dtype_name in FLOATS:
        check(t / 4, x / cd(4), dtype_name)
        check(1.5 - t, cd(1.5) - x, dtype_name)
        check(2.0 / t, cd(2.0) / x, dtype_name)
        check(2.0 ** t, np.power(cd(2.0), x), dtype_name,
              rtol=2e-6 if dtype_name == "f32" else None)
        check(t * 0.5, x * cd(0.5), dtype_name)
    else:
        check(t / 2, x // cd(2), dtype_name)
        check(9 - t, cd(9) - x, dtype_name)
        with pytest.raises(ember.DTypeMismatch, match=f"2.5.*{dtype_name}"):
            t + 2.5


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("op", sorted(COMPARE))
@pytest.mark.parametrize("dtype_name", ALL)
def test_compare(device, op, dtype_name, kind):
    call, ref = COMPARE[op]
    rng = rng_for(op, dtype_name, kind)
    a, x = variant(kind, SHAPE, dtype_name, device, rng, 0, 4)
    # Few distinct values, so equality happens often.
    y = sample(SHAPE, dtype_name, rng, 0, 4)
    if dtype_name in FLOATS:
        x = np.floor(x)
        a = a.floor()
        y = np.floor(y)
    b = on_device(y, dtype_name, device)
    check(call(a, b), ref(x, y).astype(np.uint8), "u8")
    check(call(a, 2), ref(x, 2).astype(np.uint8), "u8")
    check(call(a, b[0]), ref(x, y[0]).astype(np.uint8), "u8")


@pytest.mark.parametrize("shape", [(), (0,), (2, 0)], ids=str)
def test_compare_0d_and_empty(device, shape):
    x = np.zeros(shape, np.float32) + np.float32(1.5)
    t = on_device(x, "f32", device)
    check(t > 1, (x > 1).astype(np.uint8), "u8")
    check(t == t, (x == x).astype(np.uint8), "u8")


def test_compare_nan(device):
    x = np.array([np.nan, 1.0, np.inf], np.float32)
    t = on_device(x, "f32", device)
    check(t == t, (x == x).astype(np.uint8), "u8")
    check(t != t, (x != x).astype(np.uint8), "u8")
    check(t < np.inf, (x < np.inf).astype(np.uint8), "u8")


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_where(device, dtype_name, kind):
    rng = rng_for("where", dtype_name, kind)
    a, x = variant(kind, SHAPE, dtype_name, device, rng)
    c, m = variant(kind, SHAPE, "u8", device, rng, 0, 2)
    y = sample((SHAPE[-1],), dtype_name, rng)
    b = on_device(y, dtype_name, device)
    check(ember.where(c, a, b), np.where(m != 0, x, y), dtype_name)
    check(ember.where(c, b, a), np.where(m != 0, y, x), dtype_name)
    check(ember.where(c, a, 3), np.where(m != 0, x, x.dtype.type(3)), dtype_name)
    check(ember.where(c, 1, a), np.where(m != 0, x.dtype.type(1), x), dtype_name)
    check(a.masked_fill(c, 5), np.where(m != 0, x.dtype.type(5), x), dtype_name)
    # A comparison result is a valid condition.
    check(ember.where(a > b, a, b), np.where(x > y, x, y), dtype_name)


@pytest.mark.parametrize("shapes", [((), (), ()), ((0,), (0,), (1,)), ((2, 1), (1, 3), ()),
                                    ((3, 1, 2), (2,), (4, 1))], ids=str)
def test_where_broadcast_0d_and_empty(device, shapes):
    rng = rng_for("where0", shapes)
    m = rng.integers(0, 2, shapes[0]).astype(np.uint8)
    x = sample(shapes[1], "f32", rng)
    y = sample(shapes[2], "f32", rng)
    check(ember.where(on_device(m, "u8", device), on_device(x, "f32", device),
                      on_device(y, "f32", device)), np.where(m != 0, x, y), "f32")


def test_integer_overflow_wraps_like_numpy(device):
    x = np.array([250, 3], np.uint8)
    t = on_device(x, "u8", device)
    check(t + 10, x + np.uint8(10), "u8")
    check(t - 5, x - np.uint8(5), "u8")
