"""In-place array forms of the hottest activations, for the array backend (numpy, cupy).

The expression forms in ops.py allocate a fresh array at every step. On large tensors
each fresh allocation is fresh pages from the OS, and the page faults cost more than the
arithmetic: gelu_tanh over 2M f32 took ~9 ms as an expression and ~3 ms when every step
after the first writes into one buffer (measured on this project's machine; see
benchmarks/ops_cpu.py). Each form here computes the same operations in the same order
as its ops.py row, so results agree to the last bit (scaling by 0.5 is exact; checked
by tests/test_array_fast.py).

`x` is never written: it may be a view of a user's array or of a read-only mmap.
"""
from ..ops import SQRT_2_OVER_PI, UNARY, gelu_erf_block


def _gelu_tanh_factor(xp, x, t):
    """t = 1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)), t a buffer of x's shape."""
    xp.multiply(x, x, out=t)
    t *= x
    t *= 0.044715
    t += x
    t *= SQRT_2_OVER_PI
    xp.tanh(t, out=t)
    t += 1.0
    return t


def gelu_tanh(xp, x):
    t = _gelu_tanh_factor(xp, x, xp.empty_like(x))
    t *= x
    t *= 0.5
    return t


def sigmoid(xp, x):
    t = x * 0.5
    xp.tanh(t, out=t)
    t *= 0.5
    t += 0.5
    return t


def silu(xp, x):
    t = sigmoid(xp, x)
    t *= x
    return t


# The exact GELU has its own blocked in-place form in ops.py (gelu_erf_array).
UNARY_INPLACE = {"gelu_tanh": gelu_tanh, "sigmoid": sigmoid, "silu": silu}


# --- forms that overwrite their input, for an epilogue on a fresh GEMM output ---------------
# y is a contiguous 1-D block the caller owns; scratch is two arrays of y's size and
# dtype. Same operations in the same order as the forms above and the ops.py rows.
def _gelu_over(xp, y, scratch):
    gelu_erf_block(xp, y, y, scratch[0], scratch[1])


def _gelu_tanh_over(xp, y, scratch):
    y *= _gelu_tanh_factor(xp, y, scratch[0])
    y *= 0.5


def _sigmoid_into(xp, y, t):
    xp.multiply(y, 0.5, out=t)
    xp.tanh(t, out=t)
    t *= 0.5
    t += 0.5


def _sigmoid_over(xp, y, scratch):
    _sigmoid_into(xp, y, scratch[0])
    xp.copyto(y, scratch[0])


def _silu_over(xp, y, scratch):
    _sigmoid_into(xp, y, scratch[0])
    y *= scratch[0]


def _relu_over(xp, y, scratch):
    xp.maximum(y, 0, out=y)


_OVERWRITE = {"gelu": _gelu_over, "gelu_tanh": _gelu_tanh_over, "sigmoid": _sigmoid_over,
              "silu": _silu_over, "relu": _relu_over}


def apply_over(xp, op, y, scratch):
    """Unary `op` applied to the block y in place."""
    form = _OVERWRITE.get(op)
    if form is not None:
        form(xp, y, scratch)
    else:
        xp.copyto(y, UNARY[op].array(xp, y))
