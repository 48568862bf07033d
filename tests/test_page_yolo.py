"""The detection page's Python (ember.web.page_yolo*), run natively, since it needs no
browser for these parts: its letterbox (ember ops on the device) gives native ember's
letterboxed pixels exactly, on every device; its NMS in plain Python keeps native
ember's boxes exactly on the same head output; its numpy-free YOLOv8 gives native
ember's head output on the real YOLOv8s; it imports without numpy; bad models and
arguments are refused by name."""

import json
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember.errors import FormatError, InvalidArgument
from ember.models import yolo_format
from ember.models.yolo import load
from ember.vision.letterbox import letterbox, to_input
from ember.vision.nms import select
from ember.web import page_yolo, page_yolo_letterbox, page_yolo_model, page_yolo_nms
from packaged_fixtures import bus_jpg, yolov8s_pt  # noqa: F401  (session fixtures)
from test_no_numpy import BLOCKER

# (height, width, size, auto): shrunk portrait and landscape, enlarged, one side kept,
# a single pixel, thin, and full padding (auto=False)
LETTERBOX_CASES = [
    (108, 81, 64, True),
    (45, 80, 64, True),
    (13, 21, 64, True),
    (64, 30, 64, True),
    (1, 1, 32, True),
    (3, 97, 64, True),
    (50, 70, 96, False),
]


@pytest.mark.parametrize("h, w, size, auto", LETTERBOX_CASES)
def test_letterbox_on_the_device_equals_native(device, h, w, size, auto):
    image = np.random.default_rng(h * w + size).integers(0, 256, (h, w, 3), dtype=np.uint8)
    want, lb = letterbox(image, size, 32, auto=auto)
    x = ember.tensor(image.astype(np.float32), device=device)
    got, ((nh, nw), (top, bottom, left, right)) = page_yolo_letterbox.letterbox(x, size, 32, auto)
    assert ((nh, nw), top, left) == (lb.resized, lb.top, lb.left)
    assert (nh + top + bottom, nw + left + right) == lb.shape
    np.testing.assert_array_equal(got.numpy(), want.transpose(2, 0, 1).astype(np.float32))


def test_letterbox_refuses_a_size_off_the_stride():
    with pytest.raises(InvalidArgument, match="multiple of the stride 32, got 100"):
        page_yolo_letterbox.geometry(10, 10, 100, 32)


def test_boxes_map_back_as_native():
    _, lb = letterbox(np.zeros((1080, 810, 3), np.uint8), 320, 32)
    boxes = [[-3.0, 10.5, 100.25, 400.0], [17.0, 0.0, 256.0, 319.5]]
    want = lb.to_original(boxes)
    got = [
        page_yolo_letterbox.to_original(b, 1080, 810, lb.resized, (lb.top, 0, lb.left, 0))
        for b in boxes
    ]
    np.testing.assert_array_equal(np.asarray(got), want)


def _head(rng, nc, anchors, ties):
    """A head output with overlapping boxes (a few centres, jittered) and scores that
    straddle the thresholds; `ties` repeats scores so the order of equal ones counts."""
    centres = rng.uniform(20, 300, (5, 2))
    pick = rng.integers(0, 5, anchors)
    xy = centres[pick] + rng.normal(0, 6, (anchors, 2))
    wh = rng.uniform(10, 80, (anchors, 2))
    scores = rng.uniform(0, 0.6, (anchors, nc))
    if ties:
        scores = np.round(scores * 20) / 20
    return np.concatenate([xy, wh, scores], 1).T.astype(np.float32)


@pytest.mark.parametrize("nc, ties, conf, iou, agnostic", [
    (1, False, 0.25, 0.7, False), (3, False, 0.3, 0.45, False), (3, True, 0.25, 0.5, False),
    (2, True, 0.1, 0.3, True), (4, False, 0.0, 1.0, False)])
def test_nms_keeps_natives_boxes(nc, ties, conf, iou, agnostic):
    pred = _head(np.random.default_rng(nc * 7 + ties), nc, 400, ties)
    boxes, scores, classes, _ = select(pred, conf, iou, 300, agnostic, nc)
    got = page_yolo_nms.select(pred.ravel().tolist(), 400, nc, conf, iou, 300, agnostic)
    assert len(got) == len(scores) > 3
    np.testing.assert_array_equal(np.asarray([g[0] for g in got]), boxes)
    assert [g[1] for g in got] == scores.tolist()
    assert [g[2] for g in got] == classes.tolist()
    few = page_yolo_nms.select(pred.ravel().tolist(), 400, nc, conf, iou, 2, agnostic)
    assert few == got[:2]


def test_nms_refuses_thresholds_out_of_range():
    with pytest.raises(InvalidArgument, match=r"iou must be a number in \[0, 1\], got 1.5"):
        page_yolo_nms.select([0.0] * 6, 1, 2, 0.25, 1.5)


@pytest.fixture(scope="module")
def real_dir(yolov8s_pt):  # noqa: F811
    from ember.models.yolo_convert import convert_once
    return convert_once(yolov8s_pt)


def _page_model(model_dir, device, drop=None, extra=None):
    config, _, arrays, meta = yolo_format.read(model_dir)
    arrays = {k: v for k, v in arrays.items() if k != drop}
    arrays.update(extra or {})
    bn = {k: v for k, v in arrays.items() if page_yolo._is_batchnorm(k)}
    tensors = {k: ember.tensor(v, device=device) for k, v in arrays.items() if k not in bn}
    weights = page_yolo_model.Weights(tensors, {k: v.tolist() for k, v in bn.items()},
                                      "model.safetensors", meta["bn_eps"])
    config = page_yolo_model.check_meta(meta, "yolo.json")
    return page_yolo_model.PageDetector(config, meta, weights, device, "model.safetensors")


def test_page_model_equals_native_on_the_real_yolov8s(real_dir, bus_jpg):  # noqa: F811
    """On bus.jpg letterboxed to 160 (160x128), on the cpu: the folded weights differ by
    one float32 rounding at most, so the head output agrees to float32 rounding."""
    from ember.vision.images import read_image

    cpu = ember.Device.cpu()
    native = load(real_dir, device=cpu)
    page = _page_model(real_dir, cpu)
    assert page.names == native.names == {0: "Normal", 1: "Fall"}
    boxed, _ = letterbox(read_image(bus_jpg), 160, 32)
    x = ember.tensor(to_input([boxed]), device=cpu)
    want = native(x).numpy()
    got = page(x).numpy()
    assert got.shape == want.shape == (1, 6, 420)
    np.testing.assert_allclose(got[:, :4], want[:, :4], rtol=0, atol=1e-3)   # pixels of 160
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], rtol=0, atol=1e-5)
    assert want[0, 4:].max() > 0.25   # people found: the comparison covers real boxes


def test_a_model_with_a_missing_or_extra_tensor_is_refused(real_dir):
    cpu = ember.Device.cpu()
    with pytest.raises(FormatError, match="tensor model.22.dfl.conv.weight is missing"):
        _page_model(real_dir, cpu, drop="model.22.dfl.conv.weight")
    with pytest.raises(FormatError, match="1 tensors the model yaml does not use, e.g. model.99.w"):
        _page_model(real_dir, cpu, extra={"model.99.w": np.zeros(3, np.float32)})


def test_check_meta_names_the_bad_field(real_dir):
    meta = json.loads(open(f"{real_dir}/yolo.json").read())
    for field, value, message in [
        ("format", "other", "format must be 'ember-yolo'"),
        ("task", "pose", "task 'pose': this page draws the boxes of detect models"),
        ("names", {"0": "a"}, "names must map '0'..'1' to class names"),
        ("imgsz", 100, "imgsz must be a multiple of 32, got 100"),
        ("bn_eps", 2, "bn_eps must be a number in"),
    ]:
        bad = dict(meta, **{field: value})
        with pytest.raises(FormatError, match=message):
            page_yolo_model.check_meta(bad, "yolo.json")


@pytest.mark.parametrize("imgsz", [100, 0, 2560, True, "320"])
def test_imgsz_must_be_a_stride_multiple(imgsz):
    with pytest.raises(InvalidArgument, match="imgsz: .* is not a multiple of 32 between 32 and 1280"):
        page_yolo.check_imgsz(imgsz, 32)


def test_the_page_modules_import_without_numpy():
    code = BLOCKER + (
        "from ember.web import page_yolo, page_yolo_letterbox, page_yolo_model, page_yolo_nms\n"
        "assert 'numpy' not in sys.modules\n"
        "print(len(page_yolo_nms.select([10.0, 10.0, 4.0, 4.0, 0.9, 0.1], 1, 2)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]
