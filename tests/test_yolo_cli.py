"""`ember detect`: JSON equal to ember.vision.detect in-process (a tiny random model
saved like an Ultralytics checkpoint and converted to ember's model directory, a PNG
written by the tests); bad input gives one line naming the file and exit status 1, never
a traceback; a .pt given to --model is refused with the command that converts it."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ember.models import yolo_config
from ember.models.yolo import load
from ember.models.yolo_convert import convert
from ember.vision.detect import detect
from helpers import require
from png_encode import encode

YAML = {
    "nc": 2,
    "scales": {"t": [0.33, 0.0625, 1024]},
    "backbone": [
        [-1, 1, "Conv", [64, 3, 2]],
        [-1, 1, "Conv", [128, 3, 2]],
        [-1, 1, "Conv", [256, 3, 2]],
        [-1, 1, "SPPF", [256, 5]],
    ],
    "head": [[[1, 2, 3], 1, "Detect", ["nc"]]],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    torch = require("torch")
    import yolo_reference

    tmp = tmp_path_factory.mktemp("detect")
    config = yolo_config.parse(YAML)
    ref = yolo_reference.reinit(
        yolo_reference.DetectionModel(YAML, config, {0: "cat", 1: "dog"}), 3
    )
    pt = tmp / "tiny.pt"
    torch.save({"model": ref, "ema": None}, pt)
    converted = tmp / "tiny"
    convert(pt, converted, inert=True)
    image = np.random.default_rng(2).integers(0, 256, (50, 70, 3))
    png = tmp / "img.png"
    png.write_bytes(encode(image, 2))
    return tmp, str(converted), str(png), image.astype(np.uint8)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "ember.cli", "detect", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_json_equals_the_library(files):
    _, pt, png, image = files
    r = _cli(png, "--model", pt, "--json", "--conf", "0.3", "--iou", "0.5")
    assert r.returncode == 0, r.stderr
    (out,) = json.loads(r.stdout)
    assert (out["image"], out["width"], out["height"]) == (png, 70, 50)
    (want,) = detect(load(pt), [image], conf=0.3, iou=0.5)
    assert len(want) > 0
    assert out["detections"] == [d.to_json() for d in want]
    text = _cli(png, "--model", pt, "--conf", "0.3", "--iou", "0.5")
    assert text.returncode == 0 and f"{len(want)} detection(s)" in text.stdout


def _write(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "make, expect",
    [
        (lambda tmp: _write(tmp / "a.txt", b"no image"), "not a PNG"),
        (lambda tmp: _write(tmp / "t.png", encode(np.zeros((9, 9, 3)), 2)[:60]), "truncated"),
        (lambda tmp: tmp / "missing.png", "cannot read"),
    ],
)
def test_bad_images_exit_1_naming_the_file(files, make, expect):
    tmp, pt, _, _ = files
    path = make(tmp)
    r = _cli(str(path), "--model", pt)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(path) in r.stderr and expect in r.stderr


def test_bad_model_and_thresholds(files):
    tmp, _, png, _ = files
    notpt = tmp / "model.pt"
    notpt.write_bytes(b"not a checkpoint")
    r = _cli(png, "--model", str(notpt))
    assert r.returncode == 1 and "Traceback" not in r.stderr and str(notpt) in r.stderr
    r = _cli(png, "--conf", "1.5")
    assert r.returncode == 2 and "between 0 and 1" in r.stderr


def test_a_checkpoint_is_refused_with_the_command_that_converts_it(files):
    tmp, _, png, _ = files
    r = _cli(png, "--model", str(tmp / "tiny.pt"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"ember convert --from-ultralytics {tmp / 'tiny.pt'} DIR" in r.stderr
    r = _cli(png, "--model", str(tmp))
    assert r.returncode == 1 and "yolo.json and model.safetensors" in r.stderr


def test_save_draws_the_boxes_into_a_png(files):
    from ember.vision import png
    from ember.vision.draw import PALETTE

    tmp, pt, img, image = files
    out = tmp / "drawn.png"
    r = _cli(img, "--model", pt, "--conf", "0.3", "--iou", "0.5", "--save", str(out), "--json")
    assert r.returncode == 0, r.stderr
    (res,) = json.loads(r.stdout)
    assert res["detections"]
    drawn = png.decode(out.read_bytes())
    assert drawn.shape == image.shape
    for d in res["detections"]:  # each box's corners carry a box colour
        x1, y1, x2, y2 = (
            min(max(round(v), 0), lim - 1)
            for v, lim in zip(d["box"], (70, 50, 70, 50), strict=True)
        )
        for x, y in ((x1, y1), (x2, y2)):
            assert any((drawn[y, x] == c).all() for c in PALETTE)
    changed = (drawn != image).any(2)
    assert changed.any() and not changed.all()
    again = _cli(img, "--model", pt, "--save", str(out))
    assert again.returncode == 1 and "exists" in again.stderr
    assert np.array_equal(png.decode(out.read_bytes()), drawn)
    two = _cli(img, img, "--model", pt, "--save", str(tmp / "two.png"))
    assert two.returncode == 1 and "one IMAGE" in two.stderr and not (tmp / "two.png").exists()
