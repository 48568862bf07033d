"""Letterboxing and NMS as Ultralytics' predictor does them (ember.vision): sizes and
padding worked out by hand from its rules, the resize against torch's bilinear
interpolation, NMS against the greedy per-class definition."""

import numpy as np
import pytest

from ember.errors import InvalidArgument
from ember.vision.letterbox import letterbox, resize_bilinear
from ember.vision.nms import select
from helpers import require

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(
    "hw, auto, shape, top, left, resized",
    [
        # bus.jpg 1080x810: r = 640/1080, 480 wide, a multiple of 32 already: no padding
        ((1080, 810), True, (640, 480), 0, 0, (640, 480)),
        ((1080, 810), False, (640, 640), 0, 80, (640, 480)),
        # zidane.jpg 720x1280: r = 0.5, 360 high, 24 rows of padding to 384: 12 above
        ((720, 1280), True, (384, 640), 12, 0, (360, 640)),
        # 37 wide x 100 high: r = 6.4, round(236.8) = 237 wide, (640-237) % 32 = 19 split 9 / 10
        ((100, 37), True, (640, 256), 0, 9, (640, 237)),
        ((1, 1), True, (640, 640), 0, 0, (640, 640)),
    ],
)
def test_letterbox_shapes_and_padding(hw, auto, shape, top, left, resized):
    image = RNG.integers(0, 256, hw + (3,), dtype=np.uint8)
    out, lb = letterbox(image, 640, 32, auto=auto)
    assert out.shape == shape + (3,) and lb.shape == shape
    assert (lb.top, lb.left, lb.resized) == (top, left, resized)
    h, w = resized
    inside = np.zeros(shape, bool)
    inside[top : top + h, left : left + w] = True
    assert (out[~inside] == 114).all()


def test_resize_matches_torch_bilinear():
    torch = require("torch")
    for (h, w), (oh, ow) in (((1080, 810), (640, 480)), ((37, 50), (123, 91)), ((5, 9), (5, 4))):
        image = RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)
        t = torch.from_numpy(image).permute(2, 0, 1)[None].float()
        want = torch.nn.functional.interpolate(t, (oh, ow), mode="bilinear", align_corners=False)
        want = want[0].permute(1, 2, 0).numpy()
        got = resize_bilinear(image, oh, ow).astype(np.float32)
        assert np.abs(got - want).max() <= 0.5 + 1e-3  # rounding to uint8 only


def test_boxes_map_back_to_the_original():
    image = np.zeros((720, 1280, 3), np.uint8)
    _, lb = letterbox(image, 640, 32)
    # a box in the original, forward by the letterbox's rule (x0.5, +12 rows), and back
    orig = np.array([[100.0, 50.0, 700.0, 600.0], [-5, -5, 1300, 800]])
    boxed = orig * 0.5 + np.array([0, 12, 0, 12])
    back = lb.to_original(boxed)
    np.testing.assert_allclose(back[0], orig[0])
    np.testing.assert_allclose(back[1], [0, 0, 1280, 720])  # clipped to the image


def _head(boxes_xyxy, probs):
    b = np.asarray(boxes_xyxy, np.float32)
    xywh = np.concatenate([(b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2]], 1)
    return np.concatenate([xywh, np.asarray(probs, np.float32)], 1).T


def test_nms_by_hand():
    boxes = [[0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10], [50, 50, 60, 60], [0, 0, 10, 10]]
    probs = [[0.9, 0.0], [0.8, 0.1], [0.1, 0.7], [0.3, 0.0], [0.25, 0.0]]
    out_boxes, scores, classes, _ = select(_head(boxes, probs), conf=0.25, iou=0.5)
    # box 1 overlaps box 0 (IoU 0.68) in class 0 and goes; box 2 is class 1 and stays;
    # box 4 scores exactly 0.25, not above the threshold
    np.testing.assert_allclose(scores, [0.9, 0.7, 0.3], rtol=1e-6)
    assert classes.tolist() == [0, 1, 0]
    np.testing.assert_allclose(out_boxes[1], [0, 0, 10, 10])
    _, scores, _, _ = select(_head(boxes, probs), conf=0.25, iou=0.5, agnostic=True)
    np.testing.assert_allclose(scores, [0.9, 0.3], rtol=1e-6)
    _, scores, _, _ = select(_head(boxes, probs), conf=0.25, iou=0.5, max_det=1)
    assert len(scores) == 1


def _greedy_reference(boxes, scores, classes, iou):
    def iou_of(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = w * h
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union

    kept = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        if all(classes[j] != classes[i] or iou_of(boxes[i], boxes[j]) <= iou for j in kept):
            kept.append(i)
    return kept


def test_nms_matches_the_greedy_definition():
    n, nc = 300, 3
    xy = RNG.random((n, 2)) * 200
    wh = RNG.random((n, 2)) * 60 + 5
    boxes = np.concatenate([xy, xy + wh], 1)
    probs = RNG.random((n, nc)) ** 3
    got_boxes, got_scores, got_cls, _ = select(_head(boxes, probs), conf=0.2, iou=0.45)
    b32 = _head(boxes, probs)  # the float32 boxes the selection sees
    xyxy = np.concatenate([b32[:2].T - b32[2:4].T / 2, b32[:2].T + b32[2:4].T / 2], 1)
    best, score = probs.argmax(1), probs.max(1).astype(np.float32)
    cand = np.flatnonzero(score > 0.2)
    kept = _greedy_reference(xyxy[cand].tolist(), score[cand].tolist(), best[cand].tolist(), 0.45)
    assert len(kept) > 10
    np.testing.assert_allclose(got_scores, score[cand][kept])
    np.testing.assert_array_equal(got_cls, best[cand][kept])
    np.testing.assert_allclose(got_boxes, xyxy[cand][kept], rtol=1e-6)


def test_thresholds_are_checked():
    with pytest.raises(InvalidArgument, match="conf"):
        select(np.zeros((6, 4), np.float32), conf=1.5)
    with pytest.raises(InvalidArgument, match="iou"):
        select(np.zeros((6, 4), np.float32), iou=-0.1)


def test_extra_rows_travel_with_their_boxes():
    boxes = [[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]]
    probs = [[0.9], [0.8], [0.6]]
    head = np.concatenate([_head(boxes, probs), [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]], 0)
    _, scores, _, extra = select(head, conf=0.25, iou=0.5, nc=1)
    np.testing.assert_allclose(scores, [0.9, 0.6], rtol=1e-6)
    np.testing.assert_array_equal(extra, [[1.0, 4.0], [3.0, 6.0]])
