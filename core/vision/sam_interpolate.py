"""Bilinear resizing of float32 maps as torch's `F.interpolate(mode="bilinear",
align_corners=False)` computes it on the CPU, which SamProcessor's post_process_masks
uses: source coordinates (i + 0.5) * in/out - 0.5, clamped at 0, and each output a
weighted sum of two interpolated rows, no antialiasing.

torch's CPU kernels are built with fused multiply-add: the source coordinate is one
fma(scale, i + 0.5, -0.5) and each two-tap sum one fma(a, wa, b * wb). Both are done here
in float64 and rounded once to float32, which is what an fma gives (a product of two
float32 is exact in float64), so upsampling the 256x256 mask logits to 1024x1024 gives
torch's bits; other sizes may differ in the last bit or two.
"""

import numpy as np

F32 = np.float32


def taps(in_size, out_size):
    """(i0, i1, w0, w1) per output index: the two source indices and their float32 weights."""
    scale = np.float64(F32(in_size) / F32(out_size))
    src = (scale * (np.arange(out_size) + 0.5) - 0.5).astype(F32)
    src = np.maximum(src, F32(0))
    i0 = np.minimum(np.floor(src).astype(np.intp), in_size - 1)
    w1 = np.clip(src - i0.astype(F32), F32(0), F32(1)).astype(F32)
    i1 = np.where(i0 < in_size - 1, i0 + 1, i0)
    return i0, i1, (F32(1) - w1).astype(F32), w1


def _fma_sum(a, wa, b, wb):
    """a * wa + b * wb with the first product fused into the addition."""
    return (a.astype(np.float64) * wa + (b * wb).astype(np.float64)).astype(F32)


def resize(maps, out_h, out_w, rows=None, cols=None):
    """(..., H, W) float32 -> (..., out_h, out_w) float32; `rows`/`cols` (index arrays)
    keep only those output rows/columns (each output is computed on its own, so a crop
    of the result is the result of the crop)."""
    maps = np.asarray(maps, dtype=F32)
    h, w = maps.shape[-2:]
    r0, r1, rw0, rw1 = taps(h, out_h)
    c0, c1, cw0, cw1 = taps(w, out_w)
    if rows is not None:
        r0, r1, rw0, rw1 = r0[rows], r1[rows], rw0[rows], rw1[rows]
    if cols is not None:
        c0, c1, cw0, cw1 = c0[cols], c1[cols], cw0[cols], cw1[cols]
    needed = np.unique(np.concatenate([r0, r1]))  # interpolate only the source rows read
    at = np.zeros(h, np.intp)
    at[needed] = np.arange(len(needed))
    src = maps[..., needed, :]
    horizontal = _fma_sum(src[..., c0], cw0, src[..., c1], cw1)
    return _fma_sum(
        horizontal[..., at[r0], :], rw0[:, None], horizontal[..., at[r1], :], rw1[:, None]
    )
