"""Detections drawn onto a copy of the image: a box outline per detection in its class's
colour (labels and scores go to the text or JSON output; ember carries no font)."""

import numpy as np

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


def draw_boxes(image, detections, thickness=None):
    """A copy of (H, W, 3) uint8 `image` with each Detection's box outlined."""
    out = np.array(image, dtype=np.uint8, copy=True)
    h, w = out.shape[:2]
    t = thickness or max(1, round(min(h, w) / 300))
    for d in detections:
        x1, y1, x2, y2 = (round(float(v)) for v in d.box)
        x1, x2 = sorted((min(max(x1, 0), w - 1), min(max(x2, 0), w - 1)))
        y1, y2 = sorted((min(max(y1, 0), h - 1), min(max(y2, 0), h - 1)))
        colour = PALETTE[d.cls % len(PALETTE)]
        out[y1 : min(y1 + t, y2 + 1), x1 : x2 + 1] = colour
        out[max(y2 - t + 1, y1) : y2 + 1, x1 : x2 + 1] = colour
        out[y1 : y2 + 1, x1 : min(x1 + t, x2 + 1)] = colour
        out[y1 : y2 + 1, max(x2 - t + 1, x1) : x2 + 1] = colour
    return out
