"""Letterboxing as Ultralytics' predictor does it: scale the image to fit `size` keeping
its aspect ratio (each side rounded, at least 1 pixel), then pad with gray 114 to `size`,
or, with `auto`, only to the next multiple of the model's stride (Ultralytics pads so
for a .pt model: bus.jpg 810x1080 becomes 480x640). The padding is split between the
two sides, the odd pixel going to the bottom/right.

The resize is bilinear with half-pixel centres and edge clamping, like OpenCV's
INTER_LINEAR (no antialiasing when shrinking); OpenCV works in 11-bit fixed point, this
in float32, so pixels can differ by one level. Rows are resampled first, so a huge
image costs its output rows times its width, not a float copy of itself.
"""

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgument

PAD_VALUE = 114


@dataclass(frozen=True)
class Letterbox:
    """Where the original image lies in the letterboxed one."""

    orig_shape: tuple  # (height, width)
    shape: tuple  # letterboxed (height, width)
    resized: tuple  # (height, width) of the scaled image inside it
    top: int
    left: int

    def to_original(self, boxes):
        """(n, 4) x1 y1 x2 y2 boxes in letterboxed pixels -> original pixels, clipped."""
        h, w = self.orig_shape
        out = np.array(boxes, dtype=np.float64).reshape(-1, 4)
        out[:, 0::2] = (out[:, 0::2] - self.left) * (w / self.resized[1])
        out[:, 1::2] = (out[:, 1::2] - self.top) * (h / self.resized[0])
        out[:, 0::2] = out[:, 0::2].clip(0, w)
        out[:, 1::2] = out[:, 1::2].clip(0, h)
        return out

    def points_to_original(self, points):
        """(..., 2) x y points in letterboxed pixels -> original pixels, clipped."""
        h, w = self.orig_shape
        out = np.array(points, dtype=np.float64)
        out[..., 0] = ((out[..., 0] - self.left) * (w / self.resized[1])).clip(0, w)
        out[..., 1] = ((out[..., 1] - self.top) * (h / self.resized[0])).clip(0, h)
        return out


def _taps(n_in, n_out):
    """Source indices (i0, i1) and the weight of i1 for each output pixel."""
    x = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    i0 = np.floor(x)
    frac = x - i0
    frac[i0 < 0] = 0.0
    i0 = i0.clip(0, n_in - 1).astype(np.intp)
    last = i0 >= n_in - 1
    frac[last] = 0.0
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, frac.astype(np.float32)


def resize_bilinear(image, height, width):
    """(H, W, C) uint8 -> (height, width, C) uint8."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image.copy()
    r0, r1, fy = _taps(h, height)
    c0, c1, fx = _taps(w, width)
    top = image[r0].astype(np.float32)
    rows = top + (image[r1].astype(np.float32) - top) * fy[:, None, None]
    left = rows[:, c0]
    out = left + (rows[:, c1] - left) * fx[None, :, None]
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


def resize_bilinear_rows(rows, h, w, height, width):
    """resize_bilinear of an h x w image given as an iterator over its (w, C) uint8 rows,
    top first, holding two of them at a time (a huge PNG as it is inflated): the same
    float32 operations per output row, so the same bits. Every row is consumed."""
    r0, r1, fy = _taps(h, height)
    c0, c1, fx = _taps(w, width)
    out, y, prev, given = None, 0, None, 0
    for i, row in enumerate(rows):
        while y < height and r1[y] == i:  # r1 is r0 or r0 + 1, and never decreases
            top = (row if r0[y] == i else prev).astype(np.float32)
            line = top + (row.astype(np.float32) - top) * fy[y]
            left = line[c0]
            pixels = left + (line[c1] - left) * fx[:, None]
            if out is None:
                out = np.empty((height, width, row.shape[-1]), np.uint8)
            out[y] = np.clip(np.floor(pixels + 0.5), 0, 255).astype(np.uint8)
            y += 1
        prev, given = row, i + 1
    if given != h:
        raise InvalidArgument(
            f"resize_bilinear_rows: {given} rows given for an image of {h}", op="letterbox"
        )
    return out


def resized_shape(h, w, size):
    """(height, width) an h x w image is scaled to inside a `size` letterbox: the aspect
    ratio kept, each side rounded, at least 1 pixel."""
    r = min(size / h, size / w)
    return max(round(h * r), 1), max(round(w * r), 1)


def letterbox(image, size=640, stride=32, auto=True, pad_value=PAD_VALUE, orig_shape=None):
    """(H, W, 3) uint8 image -> (letterboxed uint8 image, Letterbox). `orig_shape`: the
    (height, width) the image stands for when it is a reduced decode of a larger one
    (ember.vision.images.read_for_size): the geometry and the boxes mapped back are the
    larger image's, the pixels resampled from the reduced ones."""
    image = np.asarray(image)
    if image.ndim != 3 or image.dtype != np.uint8 or image.shape[0] < 1 or image.shape[1] < 1:
        raise InvalidArgument(
            f"letterbox: expects an (H, W, C) uint8 image, got {image.dtype} {image.shape}",
            op="letterbox",
        )
    if not isinstance(size, int) or size < stride or size % stride:
        raise InvalidArgument(
            f"letterbox: size must be a multiple of the stride {stride}, got {size!r}",
            op="letterbox",
        )
    h, w = image.shape[:2] if orig_shape is None else orig_shape
    nh, nw = resized_shape(h, w, size)
    dh, dw = size - nh, size - nw
    if auto:
        dh, dw = dh % stride, dw % stride
    top, left = round(dh / 2 - 0.1), round(dw / 2 - 0.1)
    bottom, right = round(dh / 2 + 0.1), round(dw / 2 + 0.1)
    out = np.full((nh + top + bottom, nw + left + right, image.shape[2]), pad_value, np.uint8)
    out[top : top + nh, left : left + nw] = resize_bilinear(image, nh, nw)
    return out, Letterbox((h, w), out.shape[:2], (nh, nw), top, left)


def to_input(images):
    """Letterboxed (H, W, 3) uint8 RGB images of one size -> (N, 3, H, W) float32 in [0, 1]."""
    batch = np.stack([np.asarray(im) for im in images])
    return np.ascontiguousarray(batch.transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255)
