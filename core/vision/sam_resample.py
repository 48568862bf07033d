"""Resizing images as SamProcessor does (through Pillow's `Image.resize(BILINEAR)`):
Pillow's separable resampling with a triangle filter widened by the scale factor when
shrinking (so it antialiases), coefficients rounded to 22-bit fixed point, the
horizontal pass first, its result rounded to 8 bits, then the vertical pass. Done the
same way here, in integers, so every pixel equals Pillow's and the normalized input
equals SamProcessor's to float rounding (one level off would be 0.017 after
normalization). Pillow itself is not needed.

Rows are resampled a band at a time, so a large photo costs a band of integer rows,
not an integer copy of itself.
"""

import math

import numpy as np

PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit images
BAND_ROWS = 256  # source rows per horizontal band


def _triangle(x):
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def coefficients(in_size, out_size):
    """Per output pixel: the first source index, and the fixed-point weights of the
    source pixels from there (as Pillow's precompute_coeffs and normalize_coeffs_8bpc),
    as (first (out,), weights (out, taps) int32)."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale
    taps = math.ceil(support) * 2 + 1
    first = np.zeros(out_size, np.intp)
    weights = np.zeros((out_size, taps), np.int32)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)  # int() truncates, as the C cast does
        hi = min(int(center + support + 0.5), in_size)
        w = [_triangle((x + lo - center + 0.5) / filterscale) for x in range(hi - lo)]
        total = sum(w)
        for k, v in enumerate(w):
            v = v / total if total != 0.0 else v
            weights[xx, k] = int((0.5 if v >= 0 else -0.5) + v * (1 << PRECISION_BITS))
        first[xx] = lo
    return first, weights


def _resample(image, axis, first, weights):
    """Resample axis 0 or 1 of (H, W, C) uint8 `image` with the coefficients: uint8.
    int32 holds the sums, as in Pillow: 255 x (2**22 + a few) + 2**21 < 2**31."""
    n = image.shape[axis]
    shape = list(image.shape)
    shape[axis] = len(first)
    acc = np.full(shape, 1 << (PRECISION_BITS - 1), np.int32)
    along = [1, 1, 1]
    along[axis] = len(first)
    for k in range(weights.shape[1]):
        idx = np.minimum(first + k, n - 1)  # past the end the weight is 0
        acc += np.take(image, idx, axis=axis).astype(np.int32) * weights[:, k].reshape(along)
    return np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)


def resize_like_pillow(image, height, width):
    """(H, W, C) uint8 -> (height, width, C) uint8, as Pillow's BILINEAR resize."""
    h, w, c = image.shape
    if (h, w) == (height, width):
        return image.copy()
    if w != width:
        first, weights = coefficients(w, width)
        out = np.empty((h, width, c), np.uint8)
        for y in range(0, h, BAND_ROWS):
            out[y : y + BAND_ROWS] = _resample(image[y : y + BAND_ROWS], 1, first, weights)
        image = out
    if h != height:
        first, weights = coefficients(h, height)
        out = np.empty((height, width, c), np.uint8)
        for y in range(0, height, BAND_ROWS):
            band = slice(y, y + BAND_ROWS)
            out[band] = _resample(image, 0, first[band], weights[band])
        image = out
    return image
