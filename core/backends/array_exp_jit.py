"""float32 exponentials in numba loops that LLVM vectorizes, for the numpy backend's hot
passes: the convolution epilogue's SiLU and sigmoid (array_conv_jit) and attention's
softmax (array_attention).

numpy's float32 exp runs at 2.4-3.8 ns an element on an AVX2 host (AMD EPYC, numpy 2.4;
no AVX-512): it calls a scalar routine there. A call to the scalar expf inside a numba loop
would keep the loop from vectorizing too (8 ns an element), so exp is computed here: 2^t
is split into 2^round(t), put into the float's exponent bits, times 2^f for |f| <= 1/2
from the Taylor polynomial of e^(f ln 2) of degree 6 (relative error below 2e-7; f32's own
rounding is 6e-8). These loops run 8 lanes wide, 0.2-0.3 ns an element.

Imported only when numba is installed (the `ember[jit]` extra) and EMBER_JIT is not 0.
"""

import numba
import numpy as np

# every fast-math flag but nnan/ninf: NaN and infinities keep their IEEE meaning
FAST = {"contract", "afn", "arcp", "nsz", "reassoc"}
JIT = {"nogil": True, "cache": True, "fastmath": FAST, "error_model": "numpy"}
_f32 = np.float32
LOG2E = _f32(1.4426950408889634)


@numba.njit(inline="always", **JIT)
def pow2_split(t):
    """(2^(t - r), r << 23) for r = round(t), t within [-126, 127]: the first times
    2^r is 2^t, which adding the second to its bits gives."""
    r = np.floor(t + _f32(0.5))
    f = (t - r) * _f32(0.6931471805599453)
    m = _f32(1.0) + f * (
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
    return m, np.int32(r) << 23


@numba.njit(**JIT)
def exp_neg(src, bias, e, k):
    """e[j] = exp(-(src[j] + bias)), through k (int32 scratch of e's size). The exponent
    is clamped to [-126, 127] ln 2: the result stays finite and positive for any finite
    input (the SiLU and sigmoid it serves need no more); NaN stays NaN."""
    m = src.shape[0]
    for j in range(m):
        t = (src[j] + bias) * -LOG2E
        e[j], k[j] = pow2_split(min(max(t, _f32(-126.0)), _f32(127.0)))
    bits = e.view(np.int32)
    for j in range(m):
        bits[j] += k[j]  # times 2^round(t): an add to the exponent field


@numba.njit(inline="always", **JIT)
def exp_split(x):
    """(e^(x - r ln 2), r << 23) for r = round(x / ln 2), x within [-87, 88]: the first
    times 2^r is e^x, which adding the second to its bits gives. x - r ln 2 is taken
    against ln 2 in two parts (the first exact in 9 bits, so r times it is exact), not as
    f32(x / ln 2) - r, whose rounding grows with |x| (1.8e-6 relative at x = 24); the
    Taylor polynomial has degree 7 (5e-9 relative at |f| = ln 2 / 2)."""
    r = np.floor(x * LOG2E + _f32(0.5))
    f = x - r * _f32(0.693359375) - r * _f32(-2.1219444005469057e-4)
    m = _f32(1.0) + f * (
        _f32(1.0)
        + f
        * (
            _f32(0.5)
            + f
            * (
                _f32(1.0 / 6.0)
                + f
                * (
                    _f32(1.0 / 24.0)
                    + f * (_f32(1.0 / 120.0) + f * (_f32(1.0 / 720.0) + f * _f32(1.0 / 5040.0)))
                )
            )
        )
    )
    return m, np.int32(r) << 23


@numba.njit(**JIT)
def exp_rows_sum(x, total):
    """x[i, j] = exp(x[i, j]) in place and total[i] = the sum of row i, for x a C-contiguous
    (rows, n) float32 array; within 2.5e-7 relative of float64's exp. Past [-87, 88] the
    result is IEEE-like: +inf above 88 (a little before exp itself overflows at 88.72),
    0 below -87 (no subnormals), NaN for NaN; a softmax redoes such rows shifted (see
    array_attention.tile). Each row's sum runs in one fixed order, whatever thread."""
    rows, n = x.shape
    k = np.empty(n, np.int32)
    inf = _f32(np.inf)
    for i in range(rows):
        row = x[i]
        for j in range(n):
            v = row[j]
            m, kk = exp_split(min(max(v, _f32(-87.0)), _f32(88.0)))
            # selects, not branches: the loop stays vectorized (1.8 ms for 1500 x 1500
            # against 3.1 with if/elif; numpy's exp and sum: 6.1)
            ok = (v >= _f32(-87.0)) & (v <= _f32(88.0))
            row[j] = m if ok else (inf if v > _f32(88.0) else (_f32(0.0) if v < _f32(-87.0) else v))
            k[j] = kk if ok else np.int32(0)
        bits = row.view(np.int32)
        for j in range(n):
            bits[j] += k[j]
        s = _f32(0.0)
        for j in range(n):
            s += row[j]
        total[i] = s
