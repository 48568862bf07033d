"""Ultralytics-style .pt -> ember's YOLO model directory (model.safetensors + yolo.json)
through the inert reader and `ember convert --from-ultralytics --inert`; the directory's
checks (yolo_format); checkpoints of other tasks refused naming the task."""

import json
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import ember
from ember.errors import FormatError
from ember.models import yolo_config, yolo_format
from ember.models.yolo import load
from ember.models.yolo_convert import (
    ConverterMissing,
    convert,
    from_inert_checkpoint,
    from_ultralytics,
)
from helpers import require

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
POSE_YAML = {
    **YAML,
    "nc": 1,
    "kpt_shape": [4, 3],
    "head": [[[1, 2, 3], 1, "Pose", ["nc", "kpt_shape"]]],
}


def _reference():
    require("torch")
    import yolo_reference

    return yolo_reference


def _pose_model_class():
    ref = _reference()

    class PoseModel(ref.DetectionModel):  # pickled under Ultralytics' pose class name
        pass

    PoseModel.__qualname__ = "PoseModel"
    globals()["PoseModel"] = PoseModel
    return PoseModel


@pytest.fixture(scope="module")
def pts(tmp_path_factory):
    torch = require("torch")
    ref = _reference()
    tmp = tmp_path_factory.mktemp("convert")
    det = ref.reinit(ref.DetectionModel(YAML, yolo_config.parse(YAML), {0: "cat", 1: "dog"}), 1)
    pose = ref.reinit(_pose_model_class()(POSE_YAML, yolo_config.parse(POSE_YAML), {0: "p"}), 2)
    paths = {}
    for name, model in (("det", det), ("pose", pose)):
        paths[name] = tmp / f"{name}.pt"
        torch.save({"model": None, "ema": model, "train_args": {"imgsz": 96}}, paths[name])
    return tmp, paths, det, pose


def _forward(torch_model, x):
    import torch

    with torch.no_grad():
        return torch_model(torch.from_numpy(x)).numpy()


@pytest.mark.parametrize("which", ["det", "pose"])
def test_converted_directory_runs_like_the_torch_model(pts, which, device):
    tmp, paths, det, pose = pts
    out = tmp / f"out-{which}-{device.kind}"
    meta_path, weights_path = convert(paths[which], out, inert=True)
    meta = json.loads(open(meta_path).read())
    assert meta["task"] == ("pose" if which == "pose" else "detect")
    # the levels sit after two and three stride-2 convs; SPPF keeps its input's stride
    assert meta["strides"] == [4, 8, 8]
    assert meta["imgsz"] == 96 and meta["bn_eps"] == 1e-3
    model = load(out, device=device)
    x = np.random.default_rng(3).random((1, 3, 64, 96), dtype=np.float32)
    want = _forward(pose if which == "pose" else det, x)
    got = model(ember.tensor(x, device=device)).numpy()
    assert got.shape == want.shape
    tol = 1e-4 if device.kind == "cpu" else 1e-3
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


def test_cli_converts_and_refuses_to_overwrite(pts):
    tmp, paths, det, _ = pts
    out = tmp / "cli"
    cmd = [sys.executable, "-m", "ember.cli", "convert", "--from-ultralytics", "--inert"]
    r = subprocess.run(cmd + [str(paths["det"]), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors", "yolo.json"]
    before = (out / "model.safetensors").read_bytes()
    again = subprocess.run(cmd + [str(paths["det"]), str(out)], capture_output=True, text=True)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr and (out / "model.safetensors").read_bytes() == before
    forced = subprocess.run(
        cmd + ["--force", str(paths["det"]), str(out)], capture_output=True, text=True
    )
    assert forced.returncode == 0, forced.stderr


def test_without_ultralytics_the_error_says_how_to_install_it(pts):
    try:
        import ultralytics  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("ultralytics is installed here, so its absence cannot be shown")
    _, paths, _, _ = pts
    with pytest.raises(ConverterMissing, match=r"pip install torch ultralytics.*--inert"):
        from_ultralytics(paths["det"])


class SegmentationModel:  # pickled under Ultralytics' class names; never imported back
    def __init__(self):
        self._modules, self.yaml, self.names = {}, YAML, {0: "a", 1: "b"}


class ClassificationModel(SegmentationModel):
    pass


@pytest.mark.parametrize(
    "cls, task", [(SegmentationModel, "segment"), (ClassificationModel, "classify")]
)
def test_other_tasks_are_refused_naming_them(tmp_path, cls, task):
    path = tmp_path / f"{task}.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("m/data.pkl", pickle.dumps({"model": cls(), "ema": None}, protocol=2))
    with pytest.raises(FormatError, match=rf"{task} model \({cls.__name__}\)"):
        from_inert_checkpoint(path)
    assert not (tmp_path / "out").exists()
    with pytest.raises(FormatError, match=task):
        convert(path, tmp_path / "out", inert=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda m: m.update(task="segment"), "task"),
        (lambda m: m.update(task="pose"), "task"),
        (lambda m: m.update(format="other"), "format"),
        (lambda m: m.update(names={"0": "cat"}), "names"),
        (lambda m: m.update(strides=[8, 16]), "strides"),
        (lambda m: m.update(imgsz=100), "imgsz"),
        (lambda m: m.update(bn_eps=0), "bn_eps"),
        (lambda m: m["yaml"]["head"][0].__setitem__(2, "Segment"), "Segment"),
    ],
)
def test_a_bad_yolo_json_is_refused_naming_the_field(pts, tmp_path, edit, field):
    _, paths, _, _ = pts
    out = tmp_path / "m"
    meta_path, _ = convert(paths["det"], out, inert=True)
    meta = json.loads(open(meta_path).read())
    edit(meta)
    open(meta_path, "w").write(json.dumps(meta))
    with pytest.raises(FormatError, match=field) as info:
        load(out)
    assert "yolo.json" in str(info.value)


def test_a_half_directory_is_refused_naming_the_missing_file(pts, tmp_path):
    _, paths, _, _ = pts
    out = tmp_path / "m"
    _, weights = convert(paths["det"], out, inert=True)
    weights_bytes = open(weights, "rb").read()
    (out / "model.safetensors").unlink()
    with pytest.raises(FormatError, match="model.safetensors is missing"):
        load(out)
    (out / "model.safetensors").write_bytes(weights_bytes[:-10])
    with pytest.raises(FormatError, match="model.safetensors"):
        load(out)
    assert yolo_format.paths(out / "yolo.json") == yolo_format.paths(out)


def test_class_names_past_ten_are_accepted_and_gaps_refused():
    # names' keys are strings in JSON: '10' sorts before '2', which must not matter
    yaml = {**YAML, "nc": 12}
    names = {i: f"c{i}" for i in range(12)}
    meta = yolo_format.make_meta(yaml, "detect", names, [4, 8, 8], 96, 1e-3, "m.pt")
    assert yolo_format.check_meta(meta, "m").nc == 12
    with pytest.raises(FormatError, match="names"):
        yolo_format.make_meta(yaml, "detect", {**names, 12: "x"}, [4, 8, 8], 96, 1e-3, "m.pt")


@pytest.mark.parametrize("content", [None, "notes.txt"])
def test_convert_once_leaves_a_folder_of_that_name_it_did_not_make(tmp_path, content):
    """An `ember-yolo` folder that is not a converted model (empty, or someone's files) is
    refused by name and left as it was: a rename would replace an empty one."""
    from ember.errors import FormatError
    from ember.models.yolo_convert import CONVERTED, convert_once

    pt = tmp_path / "best.pt"
    pt.write_bytes(b"not read: the folder is checked first")
    theirs = tmp_path / CONVERTED
    theirs.mkdir()
    if content:
        (theirs / content).write_text("kept")
    with pytest.raises(FormatError, match="exists but is not a converted YOLO model"):
        convert_once(str(pt))
    assert theirs.is_dir()
    assert sorted(p.name for p in theirs.iterdir()) == ([content] if content else [])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["best.pt", CONVERTED])
