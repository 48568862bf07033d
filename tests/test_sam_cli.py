"""`ember segment`: bad input gives one line naming the option and the value, exit status
1 (2 for what argparse refuses), never a traceback, and is refused before any model
loads; with a tiny random SAM saved as transformers saves it, the JSON and the saved
mask match transformers' SamModel through ember's processing."""

import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import require
from png_encode import encode


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "ember.cli", "segment", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def png(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("segment")
    image = np.random.default_rng(4).integers(0, 256, (60, 80, 3))
    path = tmp / "img.png"
    path.write_bytes(encode(image, 2))
    return tmp, str(path), image.astype(np.uint8)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--point", "1,2,3"], ["--point", "'1,2,3'", "X,Y"]),
        (["--point", "a,b"], ["--point", "'a,b'"]),
        (["--point", "inf,2"], ["--point", "'inf,2'"]),
        (["--box", "1,2"], ["--box", "'1,2'", "X0,Y0,X1,Y1"]),
    ],
)
def test_malformed_numbers_are_usage_errors(png, args, words):
    _, path, _ = png
    r = _cli(path, *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--point", "80,10"], ["--point 80,10", "(80, 10)", "outside the 80x60 image"]),
        (["--point", "5,5", "--neg-point", "3,60"], ["--neg-point 3,60", "outside"]),
        ([], ["--point", "no --point, --neg-point or --box"]),
        (["--box", "50,5,20,30"], ["--box", "(50, 5, 20, 30)", "x1 20 not greater than x0 50"]),
        (["--box", "0,0,81,60"], ["--box", "(0, 0, 81, 60)", "outside the 80x60 image"]),
        (["--point", "5,5"], ["--model", "give a SAM model"]),
    ],
)
def test_bad_prompts_exit_1_before_the_model(png, args, words):
    _, path, _ = png
    r = _cli(path, *args)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("ember segment: ")
    for w in words:
        assert w in r.stderr


def test_bad_images_and_save_paths(png):
    tmp, path, _ = png
    notimg = tmp / "a.txt"
    notimg.write_bytes(b"no image")
    r = _cli(str(notimg), "--point", "1,1")
    assert r.returncode == 1 and str(notimg) in r.stderr and "not a PNG" in r.stderr
    taken = tmp / "taken.png"
    taken.write_bytes(b"someone's file")
    r = _cli(path, "--point", "1,1", "--save", str(taken))
    assert r.returncode == 1 and "exists" in r.stderr and "Traceback" not in r.stderr
    assert taken.read_bytes() == b"someone's file"
    r = _cli(path, "--point", "1,1", "--save", str(tmp / "mask.jpg"))
    assert r.returncode == 1 and "must end in .png" in r.stderr
    r = _cli(path, "--point", "1,1", "--save", str(tmp / "no" / "such" / "dir.png"))
    assert r.returncode == 1 and "does not exist" in r.stderr


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    require("ember.models.sam")
    from sam_torch_adapter import tiny_sam

    model = tiny_sam(5)
    out = tmp_path_factory.mktemp("sam") / "tiny-sam"
    model.save_pretrained(out)
    return str(out), model


def test_a_model_path_that_is_not_a_model_exits_1(png):
    require("ember.models.sam")
    tmp, path, _ = png
    for model in ("/nonexistent/sam", path):
        r = _cli(path, "--point", "5,5", "--model", model)
        assert r.returncode == 1 and "Traceback" not in r.stderr and model in r.stderr


def test_json_and_saved_mask_match_transformers(png, saved_model):
    from ember.vision import png as ember_png
    from ember.vision.sam_predict import embed_image, predict
    from sam_torch_adapter import TorchSam

    tmp, path, image = png
    model_dir, reference = saved_model
    out = tmp / "mask.png"
    args = ["--point", "30,20", "--neg-point", "60,45", "--box", "10,5,70,50"]
    r = _cli(path, *args, "--model", model_dir, "--json", "--save", str(out))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert (got["image"], got["width"], got["height"]) == (path, 80, 60)
    ref_model = TorchSam(reference)
    want = predict(
        ref_model,
        embed_image(ref_model, image),
        points=[(30, 20), (60, 45)],
        labels=[1, 0],
        box=(10, 5, 70, 50),
    )
    assert len(got["masks"]) == 3
    for g, w in zip(got["masks"], want, strict=True):
        assert g["score"] == pytest.approx(w.score, abs=1e-3)
        assert abs(g["area"] - w.area) <= 0.002 * image.shape[0] * image.shape[1]
    saved = ember_png.decode(out.read_bytes())
    assert saved.shape == (60, 80, 3) and set(np.unique(saved)) <= {0, 255}
    mask = saved[..., 0] == 255
    assert int(mask.sum()) == got["masks"][0]["area"]
    assert (mask != want[0].mask).mean() < 2e-3
    text = _cli(path, *args, "--model", model_dir, "--single-mask")
    assert text.returncode == 0 and "1 mask(s)" in text.stdout, text.stderr
    again = _cli(path, *args, "--model", model_dir, "--save", str(out))
    assert again.returncode == 1 and "exists" in again.stderr
    np.testing.assert_array_equal(ember_png.decode(out.read_bytes()), saved)
