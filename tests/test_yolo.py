"""ember's YOLOv8 (ember.models.yolo) against a PyTorch reference of the tests' own
(yolo_reference.py) with re-initialised random weights, on cpu and wgpu; and converting
an Ultralytics-style pickled model through torch_checkpoint's inert mode into ember's
model directory (yolo_format), which is what ember loads."""

import os
import pickle

import numpy as np
import pytest

import ember
from ember.errors import FormatError
from ember.io.torch_checkpoint import InertObject, TorchCheckpoint, UnsafeCheckpoint
from ember.models import yolo_config
from ember.models.yolo import YoloDetector, load
from ember.models.yolo_convert import convert, from_inert_checkpoint
from helpers import require

# yolov8.yaml's rows at a tiny scale: widths 8..64 channels, depth 1/3
TINY_YAML = {
    "nc": 3,
    "scales": {"t": [0.33, 0.0625, 1024]},
    "backbone": [
        [-1, 1, "Conv", [64, 3, 2]],
        [-1, 1, "Conv", [128, 3, 2]],
        [-1, 3, "C2f", [128, True]],
        [-1, 1, "Conv", [256, 3, 2]],
        [-1, 6, "C2f", [256, True]],
        [-1, 1, "Conv", [512, 3, 2]],
        [-1, 6, "C2f", [512, True]],
        [-1, 1, "Conv", [1024, 3, 2]],
        [-1, 3, "C2f", [1024, True]],
        [-1, 1, "SPPF", [1024, 5]],
    ],
    "head": [
        [-1, 1, "nn.Upsample", ["None", 2, "nearest"]],
        [[-1, 6], 1, "Concat", [1]],
        [-1, 3, "C2f", [512]],
        [-1, 1, "nn.Upsample", ["None", 2, "nearest"]],
        [[-1, 4], 1, "Concat", [1]],
        [-1, 3, "C2f", [256]],
        [-1, 1, "Conv", [256, 3, 2]],
        [[-1, 12], 1, "Concat", [1]],
        [-1, 3, "C2f", [512]],
        [-1, 1, "Conv", [512, 3, 2]],
        [[-1, 9], 1, "Concat", [1]],
        [-1, 3, "C2f", [1024]],
        [[15, 18, 21], 1, "Detect", ["nc"]],
    ],
}
NAMES = {0: "a", 1: "b", 2: "c"}


@pytest.fixture(scope="module")
def tiny():
    torch = require("torch")
    import yolo_reference

    config = yolo_config.parse(TINY_YAML)
    ref = yolo_reference.reinit(yolo_reference.DetectionModel(TINY_YAML, config, NAMES), seed=0)
    arrays = {k: v.numpy() for k, v in ref.state_dict().items()}
    x = np.random.default_rng(1).random((2, 3, 64, 96), dtype=np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    return config, ref, arrays, x, want


def test_tiny_config_channels():
    config = yolo_config.parse(TINY_YAML)
    # width 1/16 of 64..1024, rounded up to multiples of 8; repeats 3 -> 1, 6 -> 2
    assert [ly.c_out for ly in config.layers[:10]] == [8, 8, 8, 16, 16, 32, 32, 64, 64, 64]
    assert [ly.args.get("n") for ly in config.layers if ly.kind == "C2f"] == [
        1,
        2,
        2,
        1,
        1,
        1,
        1,
        1,
    ]
    assert config.strides == (8, 16, 32) and config.layers[-1].c_in == (16, 32, 64)


def test_tiny_head_matches_torch(tiny, device):
    config, _, arrays, x, want = tiny
    model = YoloDetector(config, arrays, NAMES, device=device)
    got = model(ember.tensor(x, device=device)).numpy()
    assert got.shape == want.shape == (2, 4 + 3, 8 * 12 + 4 * 6 + 2 * 3)
    # the reference must say something: some class probabilities above 0.25, some below
    assert 0.05 < (want[:, 4:] > 0.25).mean() < 0.95
    tol = 1e-4 if device.kind == "cpu" else 1e-3
    boxes_scale = np.abs(want[:, :4]).max()
    np.testing.assert_allclose(got[:, :4], want[:, :4], rtol=0, atol=tol * boxes_scale)
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], rtol=0, atol=tol)


def test_tiny_refuses_unaligned_input(tiny, cpu):
    config, _, arrays, _, _ = tiny
    model = YoloDetector(config, arrays, NAMES, device=cpu)
    with pytest.raises(ember.ShapeMismatch, match="multiples of 32"):
        model(ember.zeros(1, 3, 48, 64))


def test_wrong_or_extra_tensors_are_refused(tiny):
    config, _, arrays, _, _ = tiny
    bad = dict(arrays, **{"model.0.conv.weight": np.zeros((8, 3, 5, 5), np.float32)})
    with pytest.raises(FormatError, match=r"model\.0\.conv\.weight has shape"):
        YoloDetector(config, bad)
    extra = dict(arrays, **{"model.22.cv4.0.0.conv.weight": np.zeros((1,), np.float32)})
    with pytest.raises(FormatError, match="does not use"):
        YoloDetector(config, extra)
    missing = {k: v for k, v in arrays.items() if k != "model.9.cv2.bn.running_var"}
    with pytest.raises(FormatError, match="running_var is missing"):
        YoloDetector(config, missing)


@pytest.mark.parametrize(
    "change, match",
    [
        (
            {"head": TINY_YAML["head"][:-1] + [[[15, 18, 21], 1, "Segment", ["nc", 32, 256]]]},
            "Segment",
        ),
        ({"nc": 0}, "nc"),
        ({"activation": "nn.ReLU()"}, "activation"),
        (
            {"backbone": [[-1, 1, "Conv", [64, 3, 2]], [5, 1, "Conv", [64, 3, 2]]]},
            "not an earlier layer",
        ),
    ],
)
def test_config_refusals_name_the_field(change, match):
    with pytest.raises(FormatError, match=match):
        yolo_config.parse({**TINY_YAML, **change})


def _save_checkpoint(tmp_path, ref, name="tiny.pt"):
    torch = require("torch")
    path = tmp_path / name
    torch.save({"model": ref.half(), "ema": None, "epoch": -1, "train_args": {"imgsz": 64}}, path)
    ref.float()
    return str(path)


def test_ultralytics_style_checkpoint_loads_inert(tiny, tmp_path, cpu):
    config, ref, arrays, x, _ = tiny
    path = _save_checkpoint(tmp_path, ref)
    with pytest.raises(UnsafeCheckpoint, match="DetectionModel|yolo_reference"):
        TorchCheckpoint(path)  # the default mode admits tensors and containers only
    with TorchCheckpoint(path, inert_objects=True) as ckpt:
        assert isinstance(ckpt.root["model"], InertObject)
        assert ckpt.root["model"].qualname == "DetectionModel"
        names = {k[len("model.") :] for k in ckpt.tensors}
        assert names == set(ref.state_dict())  # torch's state-dict names, buffers included
        np.testing.assert_array_equal(
            ckpt.array("model.model.3.conv.weight"),
            ref.model[3].conv.weight.detach().half().numpy(),
        )
    model = load(convert(path, tmp_path / "converted", inert=True)[0], device=cpu)
    assert model.names == NAMES and model.imgsz == 64
    # the checkpoint holds the fp16 weights: compare with the reference run on them
    torch = require("torch")
    ref16 = type(ref)(TINY_YAML, config, NAMES)
    ref16.load_state_dict({k: v.half().float() for k, v in ref.state_dict().items()})
    with torch.no_grad():
        want = ref16.eval()(torch.from_numpy(x)).numpy()
    got = model(ember.tensor(x)).numpy()
    np.testing.assert_allclose(got[:, 4:], want[:, 4:], atol=1e-4)
    np.testing.assert_allclose(got[:, :4], want[:, :4], atol=1e-4 * np.abs(want[:, :4]).max())


class _RunsCommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_inert_mode_never_calls_what_the_pickle_names(tmp_path):
    import zipfile

    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("evil/data.pkl", pickle.dumps({"model": _RunsCommand(marker)}, protocol=2))
    with pytest.raises(UnsafeCheckpoint, match="system"):
        TorchCheckpoint(path)
    with TorchCheckpoint(path, inert_objects=True) as ckpt:
        record = ckpt.root["model"]
        assert isinstance(record, InertObject) and record.qualname == "system"
        assert record.args == (f"touch {marker}",)
    assert not marker.exists()
    with pytest.raises(FormatError, match="not an Ultralytics checkpoint|DetectionModel"):
        from_inert_checkpoint(path)


def test_detect_batches_arrays_and_tensors(tiny, cpu):
    from ember.vision import detect

    config, _, arrays, _, _ = tiny
    model = YoloDetector(config, arrays, NAMES, device=cpu)
    rng = np.random.default_rng(5)
    a, b = (rng.integers(0, 256, (50, 70, 3), dtype=np.uint8) for _ in range(2))
    alone = [detect(model, [im], conf=0.3, size=96)[0] for im in (a, b)]
    assert sum(map(len, alone)) > 0
    batch = detect(model, [a, b], conf=0.3, size=96)
    assert [[d.to_json() for d in r] for r in batch] == [[d.to_json() for d in r] for r in alone]
    (from_tensor,) = detect(model, [ember.tensor(a)], conf=0.3, size=96)
    assert [d.to_json() for d in from_tensor] == [d.to_json() for d in alone[0]]
    # images of different sizes: each letterboxed to 96x96, boxes inside each original
    c = rng.integers(0, 256, (30, 90, 3), dtype=np.uint8)
    mixed = detect(model, [a, c], conf=0.3, size=96)
    for r, (h, w) in zip(mixed, ((50, 70), (30, 90)), strict=True):
        for d in r:
            x1, y1, x2, y2 = d.box
            assert 0 <= x1 <= x2 <= w and 0 <= y1 <= y2 <= h and d.label in NAMES.values()


POSE_YAML = {
    **TINY_YAML,
    "nc": 1,
    "kpt_shape": [5, 3],
    "head": TINY_YAML["head"][:-1] + [[[15, 18, 21], 1, "Pose", ["nc", "kpt_shape"]]],
}


@pytest.fixture(scope="module")
def tiny_pose():
    torch = require("torch")
    import yolo_reference

    config = yolo_config.parse(POSE_YAML)
    ref = yolo_reference.reinit(yolo_reference.DetectionModel(POSE_YAML, config, {0: "person"}), 4)
    arrays = {k: v.numpy() for k, v in ref.state_dict().items()}
    x = np.random.default_rng(6).random((1, 3, 64, 64), dtype=np.float32)
    with torch.no_grad():
        want = ref(torch.from_numpy(x)).numpy()
    return config, arrays, x, want


def test_tiny_pose_matches_torch(tiny_pose, device):
    config, arrays, x, want = tiny_pose
    assert config.kpt_shape == (5, 3)
    model = YoloDetector(config, arrays, {0: "person"}, device=device)
    got = model(ember.tensor(x, device=device)).numpy()
    assert got.shape == want.shape == (1, 4 + 1 + 15, 64 + 16 + 4)
    tol = 1e-4 if device.kind == "cpu" else 1e-3
    xy = np.r_[0:4, 5:20:3, 6:20:3]  # box and keypoint coordinates, in pixels
    prob = np.r_[4, 7:20:3]  # class probability and keypoint visibilities
    scale = np.abs(want[:, xy]).max()
    np.testing.assert_allclose(got[:, xy], want[:, xy], rtol=0, atol=tol * scale)
    np.testing.assert_allclose(got[:, prob], want[:, prob], rtol=0, atol=tol)


def test_pose_detections_carry_keypoints_in_the_original_image(tiny_pose, cpu):
    from ember.vision import detect

    config, arrays, _, _ = tiny_pose
    model = YoloDetector(config, arrays, {0: "person"}, device=cpu)
    image = np.random.default_rng(7).integers(0, 256, (40, 90, 3), dtype=np.uint8)
    (found,) = detect(model, [image], conf=0.2, size=64)
    assert found
    for d in found:
        assert len(d.keypoints) == 5 and all(len(k) == 3 for k in d.keypoints)
        for x, y, v in d.keypoints:
            assert 0 <= x <= 90 and 0 <= y <= 40 and 0 <= v <= 1
        assert len(d.to_json()["keypoints"]) == 5
