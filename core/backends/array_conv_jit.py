"""numba epilogue for the numpy convolution: bias and activation in one pass from a band's
GEMM product into the output.

Imported only when numba is installed (the `ember[jit]` extra) and EMBER_JIT is not 0;
array_conv falls back to numpy's ufuncs otherwise. The reason is SiLU, which follows
every convolution of YOLOv8: numpy's float32 exp and tanh run at 2.4-3.8 ns an element
on an AVX2 host (AMD EPYC here, numpy 2.4; no AVX-512), so bias + SiLU through ufuncs
cost 3.1 ms for one 32 x 25,600 layer output, 70-80 ms of a 340 ms yolov8n forward at
640. This loop is 0.66 ms for the same block: LLVM vectorizes it 8 lanes wide.

exp(-v) comes from array_exp_jit.exp_neg (vectorized, clamped to stay finite). SiLU(v) =
v / (1 + exp(-v)): against float64, within 1e-6 relative for |v| <= 16, as close as numpy's
tanh form (which it replaces only here), and within 4e-6 in the far tails, where f32's
rounding of t = -v / ln 2 is what is left (there the tanh form cancels to 0). Below
v = -88 SiLU gives v * 2^-127, under 1e-33 for any |v| < 1e5, where the true value
underflows to 0; NaN stays NaN.
"""

import numba
import numpy as np

from .array_exp_jit import JIT as _JIT
from .array_exp_jit import exp_neg

_f32 = np.float32

NONE, SILU, RELU, SIGMOID = 0, 1, 2, 3
CODES = {None: NONE, "silu": SILU, "relu": RELU, "sigmoid": SIGMOID}


@numba.njit(**_JIT)
def bias_activation(y, bias, dst, code):
    """dst[c, j] = act(y[c, j] + bias[c]) for a (channels, pixels) GEMM product y and a
    destination of the same shape (rows of the output, any strides)."""
    channels, m = y.shape
    e = np.empty(m, np.float32)
    k = np.empty(m, np.int32)
    for c in range(channels):
        b = bias[c]
        src, out = y[c], dst[c]
        if code in (SILU, SIGMOID):
            exp_neg(src, b, e, k)
            if code == SILU:
                for j in range(m):
                    out[j] = (src[j] + b) / (_f32(1.0) + e[j])
            else:
                for j in range(m):
                    out[j] = _f32(1.0) / (_f32(1.0) + e[j])
        elif code == RELU:
            for j in range(m):
                v = src[j] + b
                out[j] = v if not v < _f32(0.0) else _f32(0.0)  # NaN passes, as numpy's
        else:
            for j in range(m):
                out[j] = src[j] + b
