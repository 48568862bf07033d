"""Letterboxing for the detection page (web/static/detect.html) without numpy: the
arithmetic of ember.vision.letterbox (Ultralytics' predictor) in plain Python, and its
bilinear resize done with ember ops on the image's device.

ember.vision.letterbox resizes in float32 (rows first, then columns: `top + (bottom -
top) * fy`, the same for columns, then floor(v + 0.5) clipped to 0..255). Here the tap
indices and weights come from the same float64 arithmetic, rounded to float32 as numpy
rounds them, and the device does the same float32 operations one op at a time (each
rounded, no fused multiply-add), so the letterboxed pixels equal native ember's: the
page's detections start from the same input as `ember detect`.
"""

import math
from array import array

from ember import dtype as dt
from ember import functional as F
from ember.errors import InvalidArgument
from ember.layout import Layout
from ember.tensor import Tensor, tensor

PAD_VALUE = 114


def geometry(height, width, size, stride, auto=True):
    """(resized (h, w), (top, bottom, left, right) padding) of an image letterboxed into
    `size`, as ember.vision.letterbox computes them; `auto` pads only to the next
    multiple of `stride` (one image at a time, as `ember detect` runs)."""
    if height < 1 or width < 1:
        raise InvalidArgument(f"letterbox: a {width}x{height} image has no pixels", op="letterbox")
    if isinstance(size, bool) or not isinstance(size, int) or size < stride or size % stride:
        raise InvalidArgument(
            f"letterbox: size must be a multiple of the stride {stride}, got {size!r}",
            op="letterbox",
            argument="imgsz",
        )
    r = min(size / height, size / width)
    nh, nw = max(round(height * r), 1), max(round(width * r), 1)
    dh, dw = size - nh, size - nw
    if auto:
        dh, dw = dh % stride, dw % stride
    top, left = round(dh / 2 - 0.1), round(dw / 2 - 0.1)
    bottom, right = round(dh / 2 + 0.1), round(dw / 2 + 0.1)
    return (nh, nw), (top, bottom, left, right)


def taps(n_in, n_out):
    """Source indices (i0, i1) and the weight of i1 (float64, rounded to float32 when
    uploaded) of each output pixel: half-pixel centres, edges clamped."""
    scale = n_in / n_out
    i0s, i1s, fracs = [], [], []
    for i in range(n_out):
        x = (i + 0.5) * scale - 0.5
        i0 = math.floor(x)
        frac = 0.0 if i0 < 0 else x - i0
        i0 = min(max(i0, 0), n_in - 1)
        if i0 >= n_in - 1:
            frac = 0.0
        i0s.append(i0)
        i1s.append(min(i0 + 1, n_in - 1))
        fracs.append(frac)
    return i0s, i1s, fracs


def _f32(values, shape, device):
    storage = device.backend.from_host(array("f", values).tobytes(), dt.f32, shape)
    return Tensor(storage, Layout(shape), dt.f32, device)


def _lerp(x, dim, n_out, shape):
    """x resampled along `dim` to n_out: x[i0] + (x[i1] - x[i0]) * frac, in float32."""
    i0, i1, frac = taps(x.shape[dim], n_out)
    lo = x.index_select(dim, tensor(i0, dtype=dt.i64, device=x.device))
    hi = x.index_select(dim, tensor(i1, dtype=dt.i64, device=x.device))
    return lo + (hi - lo) * _f32(frac, shape, x.device)


def resize_bilinear(image, height, width):
    """(H, W, C) float32 tensor of 0..255 integers -> (height, width, C), the values of
    ember.vision.letterbox.resize_bilinear (as float32 integers)."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    rows = _lerp(image, 0, height, (height, 1, 1))
    out = _lerp(rows, 1, width, (1, width, 1))
    return (out + 0.5).floor().clamp(0.0, 255.0)


def letterbox(image, size, stride, auto=True):
    """(H, W, 3) float32 RGB tensor (0..255) -> ((3, h, w) float32 letterboxed pixels,
    0..255, gray 114 around; (resized (h, w), (top, bottom, left, right)))."""
    height, width = image.shape[:2]
    (nh, nw), (top, bottom, left, right) = geometry(height, width, size, stride, auto)
    chw = resize_bilinear(image, nh, nw).permute(2, 0, 1)
    return F.pad(chw, (left, right, top, bottom), value=float(PAD_VALUE)), (
        (nh, nw),
        (top, bottom, left, right),
    )


def to_original(box, height, width, resized, padding):
    """An x1 y1 x2 y2 box in letterboxed pixels -> the original image's, clipped, as
    ember.vision.letterbox.Letterbox.to_original maps it (float64)."""
    (nh, nw), (top, _, left, _) = resized, padding
    x1, y1, x2, y2 = box
    sx, sy = width / nw, height / nh
    return [
        min(max((x1 - left) * sx, 0.0), width),
        min(max((y1 - top) * sy, 0.0), height),
        min(max((x2 - left) * sx, 0.0), width),
        min(max((y2 - top) * sy, 0.0), height),
    ]
