"""Ops as data: one row per elementwise op, with its array form and its WGSL expression.

A new elementwise op is one row here; the CPU backend evaluates `array` with the array
module `xp` (numpy or cupy), and the WebGPU backend pastes `wgsl` into a kernel template.
Array forms keep f32 as f32: they use Python floats (which never promote) and `x*x*x`
rather than `x**3` (whose denormal path is slow in numpy).

One algorithm per op: a row's in-place forms (`fresh`, `overwrite`, used by the array
backend on large tensors and in a linear layer's epilogue) do the same operations in the
same order as its `array` form, so an op gives the same bits at every size and on every
path (tests/test_one_algorithm.py), and its `wgsl` form is the same formula.
WGSL forms use `x` (and `p0`, `p1` for scalar parameters) or `a`, `b`; helper functions
such as `erf_f`, `tanh_f` (clamped: some drivers return NaN for large |x|), `pow_f`
(numpy's meaning for negative bases), `idiv` (flooring) and `nan_t` (a NaN test on
the bits, false for integers) live in shaders/prelude.wgsl or the kernel header.
"""

import math

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


class UnaryOp:
    __slots__ = ("name", "array", "wgsl", "kinds", "nparams", "fresh", "overwrite")

    def __init__(self, name, array, wgsl, kinds="f", nparams=0, fresh=None, overwrite=None):
        self.name = name
        self.array = array  # array(xp, x, *params) -> same dtype as x
        self.wgsl = wgsl  # expression in x, p0, p1
        self.kinds = kinds  # dtype kinds accepted: "f", "fi" (signed), "fiu" (any)
        self.nparams = nparams
        # fresh(xp, x) -> a new array, every step after the first in place (on large
        # tensors each fresh array is fresh pages, whose faults cost more than the
        # arithmetic); x is never written (it may be a read-only mmap).
        self.fresh = fresh
        # overwrite(xp, y, scratch): the contiguous 1-D block y (the caller's own) becomes
        # op(y) in place; scratch is two arrays of y's size and dtype.
        self.overwrite = overwrite


class BinaryOp:
    __slots__ = ("name", "array", "wgsl", "kinds")

    def __init__(self, name, array, wgsl, kinds="fiu"):
        self.name = name
        self.array = array  # array(xp, a, b)
        self.wgsl = wgsl  # expression in a, b
        self.kinds = kinds


def _erfc_tail(xp, ax):
    # Chebyshev-fitted erfc for |x| (fractional error < 1.2e-7), from the classic
    # Numerical Recipes form; every constant is a Python float so f32 stays f32.
    t = 1.0 / (1.0 + 0.5 * ax)
    poly = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t
                    * (
                        0.27886807
                        + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                    )
                )
            )
        )
    )
    return t * xp.exp(poly - ax * ax)


def erf_array(xp, x):
    """Vectorized erf, accurate to f32: Taylor series near 0 (relative accuracy), erfc beyond."""
    ax = xp.abs(x)
    far = xp.sign(x) * (1.0 - _erfc_tail(xp, xp.minimum(ax, 10.0)))
    x2 = x * x
    near = (
        TWO_OVER_SQRT_PI
        * x
        * (
            1.0
            + x2
            * (-1.0 / 3 + x2 * (0.1 + x2 * (-1.0 / 42 + x2 * (1.0 / 216 + x2 * (-1.0 / 1320)))))
        )
    )
    return xp.where(ax < 0.5, near, far)


# Exact GELU as x * (1 + tanh(g(x))) / 2 with g = atanh(erf(x / sqrt 2)), an odd function
# fitted here as x * G(x*x), G a degree-6 polynomial (iteratively reweighted least squares
# toward the minimax of GELU's absolute error on [0, 6]). The tanh-GELU has this shape with
# two terms (G0 = sqrt(2/pi), G1 = 0.044715 * G0); seven make it the erf GELU to f32
# precision: against math.erf over [-12, 12] in f32 arithmetic, max abs error 7.8e-7
# (at x = 5, 1.3 ulp), relative error <= 2.9e-7 for x > 0.01, abs error <= 1.8e-7 for
# x < 0. G's top coefficient is positive, so g -> +-inf with x and tanh saturates the
# right way for any |x| (no clamp).
_GELU_G = (
    0.7978842163297506,
    0.03633428279422563,
    -3.3129444096060043e-05,
    -5.524032316037462e-05,
    3.969131881283172e-06,
    -1.3344778658323786e-07,
    1.8056470763028187e-09,
)


def gelu_erf_block(xp, x, out, t, p):
    """Exact GELU of the 1-D block `x` into `out` (which may be `x` itself), with `t` and
    `p` scratch of x's size, every step in place: 18 cheap passes (one tanh), where the
    erfc form needed 21 including exp, a reciprocal and a maximum (measured 1.6x slower)."""
    xp.multiply(x, x, out=t)
    xp.multiply(t, _GELU_G[6], out=p)
    for c in _GELU_G[5:0:-1]:
        p += c
        p *= t
    p += _GELU_G[0]
    p *= x  # g(x)
    xp.tanh(p, out=p)
    p += 1.0
    xp.multiply(x, p, out=out)
    out *= 0.5


def _gelu_erf_wgsl():
    """gelu_erf_block's formula as one WGSL expression (tanh_f saturates like tanh)."""
    t = "(x * x)"
    p = f"{t} * {_GELU_G[6]!r}"
    for c in _GELU_G[5:0:-1]:
        p = f"({p} + {c!r}) * {t}"
    return f"x * (1.0 + tanh_f(({p} + {_GELU_G[0]!r}) * x)) * 0.5"


GELU_BLOCK = 65536  # elements per block: the block and its scratch stay in L2


def gelu_erf_array(xp, x):
    """Exact GELU of any array, evaluated on cache-sized blocks of a contiguous copy: a
    BERT activation (batch*tokens x 1536) otherwise streams ~25 temporaries through
    memory, which made GELU cost more than the GEMM before it. Every size takes this
    path (a block boundary changes no element's arithmetic)."""
    flat = xp.ascontiguousarray(x).reshape(-1)
    out = xp.empty_like(flat)
    n = flat.size
    scratch = [xp.empty(min(GELU_BLOCK, n), flat.dtype) for _ in range(2)]
    for s in range(0, n, GELU_BLOCK):
        e = min(s + GELU_BLOCK, n)
        gelu_erf_block(xp, flat[s:e], out[s:e], *(b[: e - s] for b in scratch))
    return out.reshape(x.shape)


def _gelu_erf_over(xp, y, scratch):
    gelu_erf_block(xp, y, y, scratch[0], scratch[1])


def gelu_tanh_array(xp, x):
    inner = SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
    return (0.5 * x) * (1.0 + xp.tanh(inner))


def _gelu_tanh_factor(xp, x, t):
    """t = 1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)), t a buffer of x's shape: the steps
    of gelu_tanh_array in its order (scaling by 0.5 is exact, so it may move)."""
    xp.multiply(x, x, out=t)
    t *= x
    t *= 0.044715
    t += x
    t *= SQRT_2_OVER_PI
    xp.tanh(t, out=t)
    t += 1.0
    return t


def _gelu_tanh_fresh(xp, x):
    t = _gelu_tanh_factor(xp, x, xp.empty_like(x))
    t *= x
    t *= 0.5
    return t


def _gelu_tanh_over(xp, y, scratch):
    y *= _gelu_tanh_factor(xp, y, scratch[0])
    y *= 0.5


def _sigmoid(xp, x):
    # tanh form: no overflow warning for large |x|, one transcendental.
    return 0.5 * xp.tanh(0.5 * x) + 0.5


def _sigmoid_into(xp, x, t):
    xp.multiply(x, 0.5, out=t)
    xp.tanh(t, out=t)
    t *= 0.5
    t += 0.5
    return t


def _sigmoid_fresh(xp, x):
    return _sigmoid_into(xp, x, xp.empty_like(x))


def _sigmoid_over(xp, y, scratch):
    xp.copyto(y, _sigmoid_into(xp, y, scratch[0]))


def _silu_fresh(xp, x):
    t = _sigmoid_fresh(xp, x)
    t *= x
    return t


def _silu_over(xp, y, scratch):
    y *= _sigmoid_into(xp, y, scratch[0])


def _relu_over(xp, y, scratch):
    xp.maximum(y, 0, out=y)


def _round_half_even(xp, x):
    return xp.round(x)


UNARY = {
    op.name: op
    for op in [
        UnaryOp("neg", lambda xp, x: -x, "-x", "fi"),
        UnaryOp("abs", lambda xp, x: xp.abs(x), "abs(x)", "fiu"),
        UnaryOp("exp", lambda xp, x: xp.exp(x), "exp(x)"),
        UnaryOp("log", lambda xp, x: xp.log(x), "log(x)"),
        UnaryOp("sqrt", lambda xp, x: xp.sqrt(x), "sqrt(x)"),
        UnaryOp("rsqrt", lambda xp, x: 1.0 / xp.sqrt(x), "inverseSqrt(x)"),
        UnaryOp("sin", lambda xp, x: xp.sin(x), "sin_f(x)"),
        UnaryOp("cos", lambda xp, x: xp.cos(x), "cos_f(x)"),
        UnaryOp("tanh", lambda xp, x: xp.tanh(x), "tanh_f(x)"),
        UnaryOp(
            "sigmoid",
            _sigmoid,
            "0.5 * tanh_f(0.5 * x) + 0.5",
            fresh=_sigmoid_fresh,
            overwrite=_sigmoid_over,
        ),
        UnaryOp(
            "relu",
            lambda xp, x: xp.maximum(x, 0),
            "select(x, T(0), x < T(0) && !nan_t(x))",
            "fiu",
            overwrite=_relu_over,
        ),
        UnaryOp(
            "gelu", gelu_erf_array, _gelu_erf_wgsl(), fresh=gelu_erf_array, overwrite=_gelu_erf_over
        ),
        UnaryOp(
            "gelu_tanh",
            gelu_tanh_array,
            "gelu_tanh(x)",
            fresh=_gelu_tanh_fresh,
            overwrite=_gelu_tanh_over,
        ),
        UnaryOp(
            "quick_gelu",
            lambda xp, x: x * _sigmoid(xp, 1.702 * x),
            "x * (0.5 * tanh_f(0.851 * x) + 0.5)",
        ),
        UnaryOp(
            "silu",
            lambda xp, x: x * _sigmoid(xp, x),
            "x * (0.5 * tanh_f(0.5 * x) + 0.5)",
            fresh=_silu_fresh,
            overwrite=_silu_over,
        ),
        UnaryOp("sign", lambda xp, x: xp.sign(x), "sign(x)", "fi"),
        UnaryOp("floor", lambda xp, x: xp.floor(x), "floor(x)"),
        UnaryOp("ceil", lambda xp, x: xp.ceil(x), "ceil(x)"),
        UnaryOp("round", _round_half_even, "round(x)"),
        UnaryOp("square", lambda xp, x: x * x, "x * x", "fiu"),
        UnaryOp("reciprocal", lambda xp, x: 1.0 / x, "T(1) / x"),
        UnaryOp("erf", erf_array, "erf_f(x)"),
        # NaN in x or a bound comes out as NaN, as numpy's clip gives (WGSL's clamp drops it).
        UnaryOp(
            "clamp",
            lambda xp, x, lo, hi: xp.clip(x, lo, hi),
            "select(clamp(x, p0, p1), x + p0 + p1, nan_t(x) || nan_t(p0) || nan_t(p1))",
            "fiu",
            2,
        ),
        UnaryOp("pow_scalar", lambda xp, x, p: xp.power(x, p), "pow_f(x, p0)", "f", 1),
        UnaryOp("affine", lambda xp, x, mul, add: x * mul + add, "x * p0 + p1", "fiu", 2),
    ]
}


def _int_div(xp, a, b):
    return xp.floor_divide(a, b)


BINARY = {
    op.name: op
    for op in [
        BinaryOp("add", lambda xp, a, b: a + b, "a + b"),
        BinaryOp("sub", lambda xp, a, b: a - b, "a - b"),
        BinaryOp("mul", lambda xp, a, b: a * b, "a * b"),
        # Integer division floors, like Python's // (ember never promotes ints to floats).
        BinaryOp("div", lambda xp, a, b: a / b, "a / b"),
        # NaN propagates as in numpy (WGSL's max/min may return the other operand).
        BinaryOp(
            "maximum",
            lambda xp, a, b: xp.maximum(a, b),
            "select(max(a, b), a + b, nan_t(a) || nan_t(b))",
        ),
        BinaryOp(
            "minimum",
            lambda xp, a, b: xp.minimum(a, b),
            "select(min(a, b), a + b, nan_t(a) || nan_t(b))",
        ),
        BinaryOp("pow", lambda xp, a, b: xp.power(a, b), "pow_f(a, b)", "f"),
    ]
}
INT_DIV = BinaryOp("div", _int_div, "idiv(a, b)")

COMPARE = {
    op.name: op
    for op in [
        BinaryOp("eq", lambda xp, a, b: a == b, "a == b"),
        BinaryOp("ne", lambda xp, a, b: a != b, "a != b"),
        BinaryOp("lt", lambda xp, a, b: a < b, "a < b"),
        BinaryOp("le", lambda xp, a, b: a <= b, "a <= b"),
        BinaryOp("gt", lambda xp, a, b: a > b, "a > b"),
        BinaryOp("ge", lambda xp, a, b: a >= b, "a >= b"),
    ]
}

KIND_NAMES = {"f": "float", "fi": "float or signed int", "fiu": "any"}
