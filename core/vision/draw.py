"""Detections drawn onto a copy of the image: per detection a box outline in its class's
colour, a label band in that colour reading "<label> <score>" (ember's own 5x7 font,
ember.vision.font), and a pose model's keypoints as squares (those with visibility
under 0.5 left out, as Ultralytics leaves them out).

Every label is drawn before any outline, so no detection's label hides another's box."""

import numpy as np

from .font import HEIGHT, text_mask

# well-separated colours, one per class index (cycled)
PALETTE = np.array(
    [
        [255, 56, 56],
        [56, 56, 255],
        [56, 200, 56],
        [255, 157, 51],
        [200, 56, 255],
        [0, 194, 255],
        [255, 55, 199],
        [132, 204, 0],
    ],
    np.uint8,
)
KEYPOINT_MIN_VISIBILITY = 0.5


def colour_of(cls):
    return PALETTE[cls % len(PALETTE)]


def ink_on(colour):
    """Black or white text, whichever reads better on `colour` (by luminance)."""
    luma = 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2]
    return np.array([0, 0, 0] if luma > 150 else [255, 255, 255], np.uint8)


def label_text(d):
    return f"{d.label} {d.score:.2f}"


def _clipped_box(box, h, w):
    x1, y1, x2, y2 = (round(float(v)) for v in box)
    x1, x2 = sorted((min(max(x1, 0), w - 1), min(max(x2, 0), w - 1)))
    y1, y2 = sorted((min(max(y1, 0), h - 1), min(max(y2, 0), h - 1)))
    return x1, y1, x2, y2


def _label(out, d, scale):
    """The label band above the box (inside it where the image's top edge is too near),
    shifted left where it would run past the right edge; clipped to the image."""
    h, w = out.shape[:2]
    x1, y1, _, _ = _clipped_box(d.box, h, w)
    mask = text_mask(label_text(d), scale)
    pad = scale
    band_h, band_w = HEIGHT * scale + 2 * pad, mask.shape[1] + 2 * pad
    top = y1 - band_h if y1 >= band_h else y1
    left = max(min(x1, w - band_w), 0)
    colour = colour_of(d.cls)
    band = out[top : top + band_h, left : left + band_w]
    band[...] = colour
    text = band[pad : pad + mask.shape[0], pad : pad + mask.shape[1]]  # clipped by the image
    text[mask[: text.shape[0], : text.shape[1]]] = ink_on(colour)


def _outline(out, d, t):
    h, w = out.shape[:2]
    x1, y1, x2, y2 = _clipped_box(d.box, h, w)
    colour = colour_of(d.cls)
    out[y1 : min(y1 + t, y2 + 1), x1 : x2 + 1] = colour
    out[max(y2 - t + 1, y1) : y2 + 1, x1 : x2 + 1] = colour
    out[y1 : y2 + 1, x1 : min(x1 + t, x2 + 1)] = colour
    out[y1 : y2 + 1, max(x2 - t + 1, x1) : x2 + 1] = colour


def _keypoints(out, d, radius):
    h, w = out.shape[:2]
    colour = 255 - colour_of(d.cls)  # the complement: apart from the box's colour
    for kp in d.keypoints or ():
        if len(kp) > 2 and kp[2] < KEYPOINT_MIN_VISIBILITY:
            continue
        x, y = round(float(kp[0])), round(float(kp[1]))
        if 0 <= x < w and 0 <= y < h:
            out[max(y - radius, 0) : y + radius + 1, max(x - radius, 0) : x + radius + 1] = colour


def draw_detections(image, detections, thickness=None, labels=True):
    """A copy of (H, W, 3) uint8 `image` with each Detection drawn: outline, label and
    score (unless `labels` is false), keypoints."""
    out = np.array(image, dtype=np.uint8, copy=True)
    h, w = out.shape[:2]
    t = thickness or max(1, round(min(h, w) / 300))
    scale = max(1, round(min(h, w) / 400))  # 7 px capitals up to 600 px, 14 px at 1080
    if labels:
        for d in detections:
            _label(out, d, scale)
    for d in detections:
        _keypoints(out, d, t + 1)
    for d in detections:
        _outline(out, d, t)
    return out
