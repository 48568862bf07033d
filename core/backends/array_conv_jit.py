"""numba epilogue for the numpy convolution: bias and activation in one pass from a band's
GEMM product into the output. Since llvm_math's vector kernels took SiLU and GELU
(array_conv: this loop reads each output row as a strided array, which numba runs
scalar), it runs sigmoid, and SiLU only where llvm_math's build failed.

Imported only when numba is installed (the `ember[jit]` extra) and EMBER_JIT is not 0;
array_conv falls back to numpy's ufuncs otherwise. The reason is SiLU, which follows
every convolution of YOLOv8: numpy's float32 exp and tanh run at 2.4-3.8 ns an element
on an AVX2 host (AMD EPYC here, numpy 2.4; no AVX-512), so bias + SiLU through ufuncs
cost 3.1 ms for one 32 x 25,600 layer output, 70-80 ms of a 340 ms yolov8n forward at
640. This loop is 0.66 ms for the same block: LLVM vectorizes it 8 lanes wide.

exp(-v) is computed here, not called: a call to the scalar expf would keep the loop from
vectorizing (8 ns an element). 2^t is split into 2^round(t), put into the float's
exponent bits, times 2^f for |f| <= 1/2 from its Taylor polynomial of degree 6 (relative
error below 2e-7, f32's own rounding is 6e-8). SiLU(v) = v / (1 + exp(-v)): against
float64, within 1e-6 relative for |v| <= 16, as close as numpy's tanh form (which it
replaces only here), and within 4e-6 in the far tails, where f32's rounding of t = -v / ln 2
is what is left (there the tanh form cancels to 0). t is clamped to [-126, 127], so the
result stays finite and signed right for any finite v (below v = -88 SiLU gives
v * 2^-127, under 1e-33 for any |v| < 1e5, where the true value underflows to 0); NaN
stays NaN (no fast-math flag assumes its absence).
"""

import numba
import numpy as np

# every fast-math flag but nnan/ninf: NaN and infinities keep their IEEE meaning
_FAST = {"contract", "afn", "arcp", "nsz", "reassoc"}
_JIT = {"nogil": True, "cache": True, "fastmath": _FAST, "error_model": "numpy"}
_f32 = np.float32

NONE, SILU, RELU, SIGMOID = 0, 1, 2, 3
CODES = {None: NONE, "silu": SILU, "relu": RELU, "sigmoid": SIGMOID}


@numba.njit(**_JIT)
def _exp_neg(src, bias, e, k):
    """e[j] = exp(-(src[j] + bias)), through k (int32 scratch of e's size)."""
    m = src.shape[0]
    for j in range(m):
        t = (src[j] + bias) * _f32(-1.4426950408889634)  # -v / ln 2
        t = min(max(t, _f32(-126.0)), _f32(127.0))
        r = np.floor(t + _f32(0.5))
        f = (t - r) * _f32(0.6931471805599453)
        e[j] = _f32(1.0) + f * (
            _f32(1.0)
            + f
            * (
                _f32(0.5)
                + f
                * (
                    _f32(1.0 / 6.0)
                    + f * (_f32(1.0 / 24.0) + f * (_f32(1.0 / 120.0) + f * _f32(1.0 / 720.0)))
                )
            )
        )
        k[j] = np.int32(r) << 23
    bits = e.view(np.int32)
    for j in range(m):
        bits[j] += k[j]  # times 2^round(t): an add to the exponent field


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
            _exp_neg(src, b, e, k)
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
