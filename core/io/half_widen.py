"""f16 -> f32 for weights read from a file, exact and about 6x faster than numpy's cast.

numpy casts float16 element by element in scalar C (7 ns an element here; Whisper
tiny.en's 37.7M f16 weights took 0.2-0.5 s of a cold start). An f16 value with its sign
cleared, as bits h, and shifted left by 13 is the f32 bit pattern of that value times
2^-112 (the exponent biases differ by 127 - 15 = 112): exact for zero, subnormals and
normals, because multiplying by 2^112 in f32 is exact for all of them (f16's subnormals
are f32 normals). The sign bit then goes back on. Inf and NaN (exponent field all ones)
have no such form: a block holding one takes numpy's own cast, which keeps them (and a
NaN's payload) as they are. Blocks of BLOCK elements, so each pass reads what the last
one wrote from the core's cache; the same bits as `a.astype(np.float32)` for every input
(tests/test_whisper_half_widen.py checks all 65,536 patterns).
"""

import numpy as np

from ..backends.row_parallel import run_rows
from ..intmath import ceil_div

BLOCK = 1 << 16
_MAGNITUDE = 0x7FFF
_SIGN = 0x8000
_INF_OR_NAN = 0x7C00  # an exponent field of all ones
_SCALE = np.float32(2.0**112)


def _widen_into(h, out, sign):
    """out (f32, flat) = the float16 values whose bits are h (uint16, flat, same size),
    one BLOCK at a time; sign is scratch of at least min(BLOCK, size) uint32."""
    bits = out.view(np.uint32)
    for start in range(0, h.size, BLOCK):
        stop = min(start + BLOCK, h.size)
        src, dst, y, s = h[start:stop], bits[start:stop], out[start:stop], sign[: stop - start]
        np.bitwise_and(src, _MAGNITUDE, out=dst)
        if dst.max() >= _INF_OR_NAN:
            np.copyto(y, src.view(np.float16))
            continue
        dst <<= 13
        y *= _SCALE
        np.bitwise_and(src, _SIGN, out=s)
        s <<= 16
        dst |= s


def widen_f16(a):
    """A new C-contiguous f32 array with the values of the float16 array `a`; its blocks
    split over ember's CPU threads (numpy's ufuncs release the GIL: a 30 s Whisper load
    is mostly this and the page faults of the new memory, which both cores then share)."""
    h = np.ascontiguousarray(a).reshape(-1).view(np.uint16)
    out = np.empty(h.size, np.float32)

    def blocks(b0, b1):
        lo, hi = b0 * BLOCK, min(b1 * BLOCK, h.size)
        _widen_into(h[lo:hi], out[lo:hi], np.empty(min(BLOCK, hi - lo), np.uint32))

    run_rows(blocks, ceil_div(h.size, BLOCK), BLOCK)
    return out.reshape(np.shape(a))


def widen_f16_transposed(a):
    """For a 2-D float16 `a` [r, c]: a new C-contiguous f32 array [c, r] holding a's
    values transposed, widened a band of rows at a time into scratch and written into
    place, so the f32 form of `a` in its own order never exists (see whisper_load for
    why a weight is wanted this way round)."""
    r, c = a.shape
    out = np.empty((c, r), np.float32)
    band = max(1, BLOCK // max(c, 1))  # rows of `a` per band: one BLOCK of scratch

    def bands(b0, b1):
        scratch = np.empty((band, c), np.float32)
        sign = np.empty(min(BLOCK, band * c), np.uint32)
        for s in range(b0 * band, min(b1 * band, r), band):
            e = min(s + band, r)
            part = scratch[: e - s]
            h = np.ascontiguousarray(a[s:e]).reshape(-1).view(np.uint16)
            _widen_into(h, part.reshape(-1), sign)
            out[:, s:e] = part.T

    run_rows(bands, ceil_div(r, band), band * c)
    return out
