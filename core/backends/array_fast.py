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
from ..ops import SQRT_2_OVER_PI


def gelu_tanh(xp, x):
    t = x * x
    t *= x
    t *= 0.044715
    t += x
    t *= SQRT_2_OVER_PI
    xp.tanh(t, out=t)
    t += 1.0
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
