"""From a detection head's output to boxes in the detection page, without numpy: the
steps of ember.vision.nms.select (Ultralytics' non_max_suppression for a detection
model) in plain Python, with numpy's number types reproduced where they decide a result:

- the head's values are float32; the confidence threshold is compared in float32 (NumPy
  2 casts a Python float to the array's type), and x1 y1 x2 y2 = centre -/+ half the
  size are float32 operations (computed in float64, then rounded to float32: exact for
  one addition);
- the class offsets (7680 per class, so boxes of different classes never overlap) and
  the IoUs are float64, in select's order of operations;
- ties in score keep the anchors' order (a stable sort), and the class is the first of
  equal maxima (argmax).

So on the same head output the page keeps exactly the boxes `ember detect` keeps.
"""

from array import array

from ember.errors import InvalidArgument

MAX_NMS = 30000  # candidates sorted into NMS at most (ember.vision.nms.MAX_NMS)
CLASS_OFFSET = 7680.0


def _f32(values):
    return array("f", values).tolist()


def check_threshold(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidArgument(f"{name} must be a number in [0, 1], got {value!r}", op="nms")
    return float(value)


def _iou(a, b):
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(x2 - x1, 0.0) * max(y2 - y1, 0.0)
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    return inter / max(area_a + area_b - inter, 1e-12)


def select(pred, anchors, nc, conf=0.25, iou=0.7, max_det=300, agnostic=False):
    """One image's head output, `pred` a flat sequence of float32 values laid out
    (4 + nc, anchors) -> [(x1 y1 x2 y2 box in input pixels, score, class)], best first."""
    conf = _f32([check_threshold("conf", conf)])[0]
    iou = check_threshold("iou", iou)
    rows = [pred[r * anchors : (r + 1) * anchors] for r in range(4 + nc)]
    found = []  # (anchor, score, class)
    for a in range(anchors):
        best, score = 0, rows[4][a]
        for c in range(1, nc):
            if rows[4 + c][a] > score:
                best, score = c, rows[4 + c][a]
        if score > conf:
            found.append((a, score, best))
    if len(found) > MAX_NMS:
        found = sorted(found, key=lambda f: -f[1])[:MAX_NMS]
    corners = []
    for a, _, _ in found:
        cx, cy, w, h = (rows[r][a] for r in range(4))
        corners += [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
    corners = _f32(corners)
    boxes = [tuple(corners[4 * i : 4 * i + 4]) for i in range(len(found))]
    offset = 0.0 if agnostic else CLASS_OFFSET
    shifted = [
        tuple(v + cls * offset for v in b) for b, (_, _, cls) in zip(boxes, found, strict=True)
    ]
    order = sorted(range(len(found)), key=lambda i: -found[i][1])
    keep = []
    while order and len(keep) < max_det:
        i, order = order[0], order[1:]
        keep.append(i)
        order = [j for j in order if _iou(shifted[i], shifted[j]) <= iou]
    return [(boxes[i], found[i][1], found[i][2]) for i in keep]
