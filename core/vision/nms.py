"""From a detection head's output to boxes, as Ultralytics' non_max_suppression does it
for a detection model: drop anchors whose best class probability is not above `conf`,
keep each anchor's best class only, take at most 30000 by score, run greedy NMS per
class (boxes of different classes never suppress each other unless `agnostic`): a box
goes when its IoU with a higher-scoring kept box exceeds `iou`, and keep `max_det`.
"""

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgument

MAX_NMS = 30000  # candidates sorted into NMS at most


@dataclass(frozen=True)
class Detection:
    box: tuple  # x1, y1, x2, y2 in the original image's pixels
    score: float
    cls: int
    label: str
    keypoints: tuple | None = None  # pose models: (x, y[, visibility]) per keypoint

    def to_json(self):
        out = {
            "box": [round(float(v), 2) for v in self.box],
            "score": round(float(self.score), 4),
            "class": int(self.cls),
            "label": self.label,
        }
        if self.keypoints is not None:
            out["keypoints"] = [[round(float(v), 2) for v in kp] for kp in self.keypoints]
        return out


def _check_threshold(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidArgument(f"{name} must be a number in [0, 1], got {value!r}", op="nms")
    return float(value)


def xywh_to_xyxy(b):
    half = b[:, 2:4] / 2
    return np.concatenate([b[:, :2] - half, b[:, :2] + half], 1)


def box_iou(box, boxes):
    """IoU of one x1y1x2y2 box with each of `boxes`."""
    x1 = np.maximum(box[0], boxes[:, 0])
    y1 = np.maximum(box[1], boxes[:, 1])
    x2 = np.minimum(box[2], boxes[:, 2])
    y2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-12)


def greedy_nms(boxes, scores, iou):
    """Indices of the boxes kept, highest score first."""
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i = order[0]
        keep.append(i)
        rest = order[1:]
        order = rest[box_iou(boxes[i], boxes[rest]) <= iou]
    return np.array(keep, dtype=np.intp)


def select(pred, conf=0.25, iou=0.7, max_det=300, agnostic=False, nc=None):
    """One image's head output (4 + nc + extra, anchors) -> (boxes xyxy (n, 4), scores,
    classes, extra (n, extra): a pose head's keypoints). nc=None: no extra rows."""
    conf, iou = _check_threshold("conf", conf), _check_threshold("iou", iou)
    pred = np.asarray(pred, dtype=np.float32).T  # (anchors, 4 + nc + extra)
    nc = pred.shape[1] - 4 if nc is None else nc
    cls_prob, extra = pred[:, 4 : 4 + nc], pred[:, 4 + nc :]
    best = cls_prob.argmax(1)
    score = cls_prob[np.arange(len(pred)), best]
    hit = score > conf
    boxes, score, best, extra = xywh_to_xyxy(pred[hit, :4]), score[hit], best[hit], extra[hit]
    if len(score) > MAX_NMS:
        top = np.argsort(-score, kind="stable")[:MAX_NMS]
        boxes, score, best, extra = boxes[top], score[top], best[top], extra[top]
    # one NMS over all classes, each class shifted to its own region (as Ultralytics does)
    offset = 0.0 if agnostic else 7680.0
    keep = greedy_nms(boxes + (best[:, None] * offset), score, iou)[:max_det]
    return boxes[keep], score[keep], best[keep], extra[keep]
