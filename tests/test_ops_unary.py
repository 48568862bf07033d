"""Unary ops on every device, dtype and layout, against numpy (torch for erf and GELU)."""
import math

import numpy as np
import pytest

import ember
from helpers import require
from ember.ops import UNARY as ROWS
from strided import (ALL, F32Guard, FLOATS, INTS, SIGNED, VARIANTS, check, on_device, representable,
                     rng_for, variant)


def _torch_fn(name):
    def run(x):
        torch = require("torch")
        t = torch.from_numpy(np.array(x, copy=True))
        if name == "gelu":
            y = torch.nn.functional.gelu(t)
        elif name == "gelu_tanh":
            y = torch.nn.functional.gelu(t, approximate="tanh")
        else:
            y = torch.erf(t)
        return y.numpy()
    return run


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# name -> (ember call, numpy reference, dtypes, (low, high) input range or None)
UNARY = {
    "neg": (lambda t: -t, lambda x: -x, FLOATS + SIGNED, None),
    "abs": (lambda t: t.abs(), np.abs, ALL, None),
    "exp": (lambda t: t.exp(), np.exp, FLOATS, None),
    "log": (lambda t: t.log(), np.log, FLOATS, (0.1, 5.0)),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, FLOATS, (0.0, 5.0)),
    "rsqrt": (lambda t: t.rsqrt(), lambda x: 1 / np.sqrt(x), FLOATS, (0.1, 5.0)),
    "sin": (lambda t: t.sin(), np.sin, FLOATS, None),
    "cos": (lambda t: t.cos(), np.cos, FLOATS, None),
    "tanh": (lambda t: t.tanh(), np.tanh, FLOATS, None),
    "sigmoid": (lambda t: t.sigmoid(), _sigmoid, FLOATS, (-8.0, 8.0)),
    "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0), ALL, None),
    "gelu": (lambda t: t.gelu(), _torch_fn("gelu"), FLOATS, (-5.0, 5.0)),
    "gelu_tanh": (lambda t: t.gelu_tanh(), _torch_fn("gelu_tanh"), FLOATS, (-5.0, 5.0)),
    "silu": (lambda t: t.silu(), lambda x: x * _sigmoid(x), FLOATS, (-8.0, 8.0)),
    "sign": (lambda t: t.sign(), np.sign, FLOATS + SIGNED, None),
    "floor": (lambda t: t.floor(), np.floor, ALL, (-4.0, 4.0)),
    "ceil": (lambda t: t.ceil(), np.ceil, ALL, (-4.0, 4.0)),
    "round": (lambda t: t.round(), np.round, ALL, (-4.0, 4.0)),
    "square": (lambda t: t.square(), np.square, ALL, None),
    "reciprocal": (lambda t: t.reciprocal(), lambda x: 1 / x, FLOATS, (0.5, 4.0)),
    "erf": (lambda t: t.erf(), _torch_fn("erf"), FLOATS, (-4.0, 4.0)),
    "clamp": (lambda t: t.clamp(-1, 2), lambda x: np.clip(x, -1, 2), FLOATS + SIGNED, None),
    "clamp_u": (lambda t: t.clamp(2, 7), lambda x: np.clip(x, 2, 7), ("u32", "u8"), None),
    "clamp_min": (lambda t: t.clamp(min=0.5), lambda x: np.maximum(x, 0.5), FLOATS, None),
    "clamp_max": (lambda t: t.clamp(max=1), lambda x: np.minimum(x, 1), ALL, None),
    "pow_scalar": (lambda t: t.pow(1.5), lambda x: np.power(x, 1.5), FLOATS, (0.0, 3.0)),
    "pow_3": (lambda t: t ** 3, lambda x: x * x * x, FLOATS, None),
    "affine": (lambda t: t.affine(2, 3), lambda x: x * 2 + 3, ALL, (0, 20)),
}
# erf-based ops approximate erf to f32 accuracy, so f64 results are good to ~1e-7.
LOOSE_F64 = {"gelu", "erf"}
CASES = [(op, d) for op, (_, _, dtypes, _) in UNARY.items() for d in dtypes]


def _reference(op, x, dtype_name):
    ref = UNARY[op][1]
    if op in ("gelu", "gelu_tanh", "erf"):
        return ref(x)
    with np.errstate(all="ignore"):
        return ref(x)


def _tolerance(op, dtype_name):
    if dtype_name == "f64" and op in LOOSE_F64:
        return 1e-7, 1e-7
    if dtype_name == "f32" and op in ("gelu", "erf", "gelu_tanh", "sigmoid", "silu"):
        return 1e-5, 2e-6
    return None, None


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("op,dtype_name", CASES)
def test_unary(device, op, dtype_name, kind):
    call, _, _, bounds = UNARY[op]
    rng = rng_for(op, dtype_name, kind)
    low, high = bounds if bounds and dtype_name in FLOATS else (None, None)
    if dtype_name in INTS and op == "affine":
        low, high = 0, 20
    t, x = variant(kind, (3, 5, 4), dtype_name, device, rng, low, high)
    rtol, atol = _tolerance(op, dtype_name)
    check(call(t), _reference(op, x, dtype_name), dtype_name, rtol, atol)


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3)], ids=["0d", "empty", "empty3d"])
def test_unary_0d_and_empty(device, op, shape):
    call, _, _, bounds = UNARY[op]
    rng = np.random.default_rng(7)
    low, high = bounds or (-2.0, 2.0)
    x = representable(rng.uniform(low, high, size=shape), "f32")
    dtype_name = "f32" if "f32" in UNARY[op][2] else "u8"
    if dtype_name == "u8":
        x = rng.integers(0, 9, size=shape).astype(np.uint8)
    rtol, atol = _tolerance(op, dtype_name)
    check(call(on_device(x, dtype_name, device)), _reference(op, x, dtype_name), dtype_name,
          rtol, atol)


def test_round_is_half_to_even(device):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5], np.float32)
    check(on_device(x, "f32", device).round(), np.round(x), "f32")


@pytest.mark.parametrize("dtype_name", ["f32", "f16", "bf16"])
def test_special_values(device, dtype_name):
    """inf, -inf and NaN go through like IEEE says (the GPU gives the same, so no warnings)."""
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 30.0, -30.0], np.float32)
    t = on_device(x, dtype_name, device)
    with np.errstate(all="ignore"):
        check(t.exp(), np.exp(x), dtype_name)
        check(t.tanh(), np.tanh(x), dtype_name)
        check(t.sigmoid(), 1 / (1 + np.exp(-x)), dtype_name)
        check(t.relu(), np.maximum(x, 0), dtype_name)
    check(on_device(np.array([0.0, 1.0, 4.0], np.float32), dtype_name, device).log(),
          np.array([-np.inf, 0.0, np.log(4.0)]), dtype_name)


@pytest.mark.parametrize("op", ["sqrt", "exp", "log", "gelu", "sin", "reciprocal", "pow_scalar"])
@pytest.mark.parametrize("dtype_name", INTS)
def test_float_only_ops_refuse_integers(device, op, dtype_name):
    t = on_device(np.arange(4), dtype_name, device)
    with pytest.raises(ember.UnsupportedDType) as info:
        UNARY[op][0](t)
    assert dtype_name in str(info.value) and op.split("_")[0] in str(info.value)


def test_neg_refuses_unsigned(device):
    with pytest.raises(ember.UnsupportedDType, match="neg.*u8"):
        -on_device(np.arange(3), "u8", device)


def test_gelu_tanh_on_denormal_producing_inputs_matches_torch(device):
    """x*x*x of these underflows to denormals or zero in f32; the result must still match
    torch (and on the CPU it must not take numpy's slow x**3 path, see test below)."""
    torch = require("torch")
    tiny = np.array([1e-13, -1e-13, 3e-14, 1e-20, -2e-15, 1e-38, 0.0], np.float32)
    expected = torch.nn.functional.gelu(torch.from_numpy(tiny), approximate="tanh").numpy()
    check(on_device(tiny, "f32", device).gelu_tanh(), expected, "f32", rtol=1e-6, atol=0)
    x = np.linspace(-4, 4, 33, dtype=np.float32) * np.float32(1e-12) + np.linspace(
        -4, 4, 33, dtype=np.float32)
    expected = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    check(on_device(x, "f32", device).gelu_tanh(), expected, "f32", rtol=1e-5, atol=2e-7)


@pytest.mark.parametrize("name", sorted(set(ROWS) - {"pow_scalar"}))
def test_ops_table_forms_keep_f32_and_avoid_pow(name):
    """Fast by construction: every numpy form of the ops table stays in f32 and uses no `**`."""
    row = ROWS[name]
    x = np.linspace(-3, 3, 16, dtype=np.float32).view(F32Guard)
    params = [0.5, 1.5][:row.nparams]
    y = row.array(np, x, *params)
    assert np.asarray(y).dtype == np.float32


def test_pow_scalar_exponents(device):
    x = np.array([0.5, 1.0, 2.0, 3.0], np.float32)
    t = on_device(x, "f32", device)
    for p in (0, 1, 2, 0.5, -1, -2.5, 3):
        check(t.pow(p), np.power(x, np.float32(p)), "f32", rtol=2e-6)
    assert math.isclose((on_device(np.float32(2.0), "f32", device) ** 10).item(), 1024.0)
