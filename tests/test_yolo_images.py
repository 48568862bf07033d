"""Odd and bad images for `ember detect` (the CLI, the tiny random model of
test_yolo_cli): a 1x1 image, grey, RGBA and 16-bit PNGs and a grey JPEG give the
detections of their 8-bit RGB form; a truncated JPEG, and an Ultralytics checkpoint of
another task given to `ember convert`, exit 1 naming the file, never a traceback. A
JPEG's EXIF orientation is applied (as OpenCV's imread, Ultralytics' reader, applies
it); a JPEG over LARGE_PIXELS is decoded at reduced scale, its letterbox as the full
decode's, and a PNG over it is resized as it is inflated, to the very same letterbox."""

import json
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from ember.errors import FormatError
from ember.models.yolo import load
from ember.vision import images
from ember.vision.detect import detect
from ember.vision.letterbox import letterbox, resize_bilinear, resize_bilinear_rows
from helpers import require
from png_encode import encode
from test_yolo_cli import YAML, files  # noqa: F401  (the tiny model and a PNG: a fixture)

RNG = np.random.default_rng(7)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True, timeout=600
    )


def _scene(h, w):
    """Smooth gradients and a few blocks: JPEG keeps it close, detections are stable."""
    y, x = np.mgrid[0:h, 0:w]
    wave = 128 + 100 * np.sin(x / 50) * np.cos(y / 40)
    img = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), wave], -1)
    img[h // 4 : h // 2, w // 3 : w // 2] = (250, 30, 60)
    return img.astype(np.uint8)


def test_odd_images_give_the_detections_of_their_rgb_form(files, tmp_path):  # noqa: F811
    Image = require("PIL.Image")
    _, model_dir, _, _ = files
    rgb = RNG.integers(0, 256, (48, 64, 3))
    grey = RNG.integers(0, 256, (48, 64, 1))
    deep = RNG.integers(0, 65536, (48, 64, 3))
    cases = {  # file name -> (bytes, the 8-bit RGB image it stands for)
        "one.png": (encode([[[200, 10, 90]]], 2), np.array([[[200, 10, 90]]])),
        "grey.png": (encode(grey, 0), np.repeat(grey, 3, 2)),
        "rgba.png": (encode(np.concatenate([rgb, grey], 2), 6), rgb),
        "deep.png": (encode(deep, 2, depth=16), deep >> 8),
    }
    paths = []
    for name, (data, _) in cases.items():
        paths.append(str(tmp_path / name))
        (tmp_path / name).write_bytes(data)
    jpeg = tmp_path / "grey.jpg"
    Image.fromarray(_scene(48, 64)[..., 0], "L").save(jpeg, quality=90)
    with Image.open(jpeg) as im:
        cases["grey.jpg"] = (None, np.repeat(np.asarray(im)[..., None], 3, 2))
    paths.append(str(jpeg))
    args = "--json", "--conf", "0.3", "--iou", "0.5", "--imgsz", "96"
    r = _cli("detect", *paths, "--model", model_dir, *args)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    model = load(model_dir)
    found_any = False
    for out, (name, (_, want_image)) in zip(got, cases.items(), strict=True):
        want_image = want_image.astype(np.uint8)
        assert (out["height"], out["width"]) == want_image.shape[:2], name
        (want,) = detect(model, [want_image], conf=0.3, iou=0.5, size=96)
        assert out["detections"] == [d.to_json() for d in want], name
        found_any = found_any or bool(want)
    assert found_any  # the comparison says something


def test_a_truncated_jpeg_exits_1_naming_the_file(files, tmp_path):  # noqa: F811
    Image = require("PIL.Image")
    _, model_dir, _, _ = files
    whole = tmp_path / "whole.jpg"
    Image.fromarray(_scene(64, 80)).save(whole, quality=90)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    r = _cli("detect", str(cut), "--model", model_dir)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(cut) in r.stderr and "truncated" in r.stderr


class SegmentationModel:  # pickled under Ultralytics' class name; never imported back
    def __init__(self):
        self._modules, self.yaml, self.names = {}, {**YAML, "nc": 1}, {0: "thing"}


def test_ember_convert_refuses_a_checkpoint_of_another_task(tmp_path):
    pt = tmp_path / "seg.pt"
    with zipfile.ZipFile(pt, "w") as zf:
        zf.writestr("seg/data.pkl", pickle.dumps({"model": SegmentationModel()}, protocol=2))
    out = tmp_path / "out"
    r = _cli("convert", "--from-ultralytics", "--inert", str(pt), str(out))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert str(pt) in r.stderr and "segment" in r.stderr
    assert not out.exists()


@pytest.mark.parametrize("orientation, turn", [(3, 2), (6, -1), (8, 1)])
def test_exif_orientation_is_applied(tmp_path, orientation, turn):
    Image = require("PIL.Image")
    path = tmp_path / "turned.jpg"
    exif = Image.Exif()
    exif[images.EXIF_ORIENTATION] = orientation
    Image.fromarray(_scene(30, 40)).save(path, quality=95, exif=exif)
    with Image.open(path) as im:
        stored = np.asarray(im.convert("RGB"))
    upright = np.rot90(stored, turn)  # 3: half a turn, 6: a quarter clockwise, 8: anticlockwise
    np.testing.assert_array_equal(images.read_image(path), upright)
    pixels, shape = images.read_for_size(path, 640)
    assert shape == upright.shape[:2] and np.array_equal(pixels, upright)


@pytest.mark.parametrize(
    "w, h, size, scale",  # by hand: the least of 2, 4, 8 under the pixel limit, sides kept
    [
        (10_000, 10_000, 640, 4),  # /2: 25 MP is over 24; /4: 6.25 MP, 2500 >= 640
        (8_000, 6_000, 640, 2),  # 48 MP; /2: 12 MP
        (4_000, 3_000, 640, 1),  # 12 MP: decoded whole, as Ultralytics decodes it
        (20_000, 1_200, 640, 1),  # 24 MP exactly: whole
        (12_000, 10_000, 2048, 4),  # /2: 30 MP; /4: 7.5 MP, 3000 >= 2048
        (12_000, 10_000, 4096, 2),  # /4 would leave 3000 < 4096 columns: /2, over 24 MP
    ],
)
def test_the_reduction_a_jpeg_is_decoded_at(w, h, size, scale):
    assert images._reduction(w, h, size) == scale


def test_a_large_jpeg_is_decoded_reduced_and_letterboxes_as_the_whole(tmp_path, monkeypatch):
    Image = require("PIL.Image")
    path = tmp_path / "large.jpg"
    full = _scene(900, 1200)
    Image.fromarray(full).save(path, quality=95)
    whole = images.read_image(path)
    monkeypatch.setattr(images, "LARGE_PIXELS", 100_000)  # 1200x900 counts as large now
    pixels, shape = images.read_for_size(path, 160)
    assert shape == (900, 1200) and pixels.shape == (225, 300, 3)  # 1/4: 67,500 pixels
    reduced, lb = letterbox(pixels, 160, 32, auto=True, orig_shape=shape)
    direct, lb_whole = letterbox(whole, 160, 32, auto=True)
    assert lb == lb_whole and reduced.shape == direct.shape == (128, 160, 3)
    diff = np.abs(reduced.astype(int) - direct.astype(int))
    assert diff.mean() < 2 and np.percentile(diff, 99) < 16


@pytest.mark.parametrize("hw, out", [((37, 53), (9, 12)), ((5, 7), (11, 3)), ((1, 4), (6, 6))])
def test_resizing_row_by_row_gives_the_bits_of_resizing_whole(hw, out):
    image = RNG.integers(0, 256, (*hw, 3), dtype=np.uint8)
    got = resize_bilinear_rows(iter(image), *hw, *out)
    np.testing.assert_array_equal(got, resize_bilinear(image, *out))


def test_a_large_png_is_resized_as_it_is_inflated_to_the_same_letterbox(tmp_path, monkeypatch):
    full = _scene(300, 420)
    path = tmp_path / "large.png"
    path.write_bytes(encode(full, 2))  # every row filter in turn
    monkeypatch.setattr(images, "LARGE_PIXELS", 10_000)
    pixels, shape = images.read_for_size(path, 96)
    assert shape == (300, 420) and pixels.shape == (69, 96, 3)  # 300 * 96 / 420 = 68.6
    boxed, lb = letterbox(pixels, 96, 32, auto=False, orig_shape=shape)
    want, want_lb = letterbox(full, 96, 32, auto=False)
    assert lb == want_lb
    np.testing.assert_array_equal(boxed, want)
    np.testing.assert_array_equal(images.read_image(path), full)  # read whole, still


def test_a_truncated_large_png_is_refused_as_a_whole_one(tmp_path, monkeypatch):
    import zlib

    from png_encode import SIG, chunk

    raw = np.concatenate([np.zeros((300, 1), np.uint8), _scene(300, 420).reshape(300, -1)], 1)
    ihdr = (420).to_bytes(4, "big") + (300).to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    short = zlib.compress(raw[:200].tobytes())  # a whole zlib stream of 200 of 300 rows
    path = tmp_path / "short.png"
    path.write_bytes(SIG + chunk(b"IHDR", ihdr) + chunk(b"IDAT", short) + chunk(b"IEND", b""))
    monkeypatch.setattr(images, "LARGE_PIXELS", 10_000)
    for read in (images.read_image, lambda p: images.read_for_size(p, 96)):
        with pytest.raises(FormatError, match="truncated") as info:
            read(path)
        assert str(path) in str(info.value)
