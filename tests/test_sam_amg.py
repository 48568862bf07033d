"""Automatic mask generation (ember.vision.sam_amg) against transformers' mask-generation
pipeline on one model: a tiny random SamModel with a bump added around each prompt point
(sam_torch_adapter), so masks are compact and the IoU, stability, crop-edge and NMS
filters all have masks to drop. The point grid, crop boxes, mask boxes and stability
scores against transformers' own helpers."""

import numpy as np
import pytest

import ember.vision.sam_amg as amg
from ember.errors import InvalidArgument
from ember.vision.sam_masks import mask_to_box, stability_counts, stability_score
from helpers import require
from sam_torch_adapter import (
    EmberBumps,
    TorchSam,
    add_point_bumps,
    cache_embeddings,
    run_mask_generation,
    tiny_sam,
)


def test_point_grid_and_crop_boxes_as_transformers():
    require("transformers")
    from transformers.models.sam import image_processing_pil_sam as ref

    for n in (1, 2, 3, 7, 32):
        np.testing.assert_array_equal(np.array(amg.point_grid(n)), ref._build_point_grid(n))
    for size in ((60, 80), (1080, 810), (7, 3)):
        for layers in (0, 1, 2):
            boxes, layer_of = ref._generate_per_layer_crops(layers, 512 / 1500, size)
            mine = amg.crop_boxes(*size, layers, 512 / 1500)
            assert [list(b) for _, b in mine] == boxes
            assert [layer for layer, _ in mine] == layer_of


def test_mask_boxes_and_stability_as_transformers():
    torch = require("torch")
    require("transformers")
    from transformers.models.sam import image_processing_pil_sam as ref

    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((6, 23, 31)) * 2).astype(np.float32)
    logits[4] = -5  # an empty mask: box (0, 0, 0, 0), stability 0/0
    logits[5, 7, 9] = 5  # one pixel
    want_boxes = ref._batched_mask_to_box(torch.from_numpy(logits > 0)).tolist()
    want_stab = ref._compute_stability_score(torch.from_numpy(logits), 0.0, 1.0).tolist()
    for m, box, stab in zip(logits, want_boxes, want_stab, strict=True):
        assert list(mask_to_box(m > 0)) == box
        got = stability_score(*stability_counts(m, 0.0, 1.0))
        assert (np.isnan(got) and np.isnan(stab)) or got == stab


@pytest.fixture(scope="module")
def model():
    torch = require("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: threads only contend (several times slower on 2 cores)
    yield cache_embeddings(add_point_bumps(tiny_sam(0)))
    torch.set_num_threads(threads)


def _image():
    img = np.random.default_rng(0).integers(0, 256, (60, 80, 3)).astype(np.uint8)
    img[:30, :40] = (200, 30, 30)
    img[10:25, 50:75] = 255
    return img


def test_generated_masks_equal_the_pipelines(model, monkeypatch):
    """Two crop layers (the image and 2x2 crops), batches that do not divide the grid:
    the same masks, scores and order as transformers' pipeline; and each filter dropped
    something, so the equality says something about each."""
    seen = {"nms_in": 0, "edge_dropped": 0, "stability_dropped": 0, "upsampled": 0}
    real_nms, real_edge, real_stab = amg.greedy_nms, amg._near_crop_edge, amg.stability_score
    real_up = amg._upsampled

    def up(*args):  # only masks past the IoU filter are upsampled
        seen["upsampled"] += 1
        return real_up(*args)

    def nms(boxes, scores, iou):
        seen["nms_in"] = len(scores)
        return real_nms(boxes, scores, iou)

    def edge(*args):
        near = real_edge(*args)
        seen["edge_dropped"] += near
        return near

    def stab(*args):
        s = real_stab(*args)
        seen["stability_dropped"] += not s > 0.6
        return s

    monkeypatch.setattr(amg, "greedy_nms", nms)
    monkeypatch.setattr(amg, "_near_crop_edge", edge)
    monkeypatch.setattr(amg, "stability_score", stab)
    monkeypatch.setattr(amg, "_upsampled", up)
    settings = dict(
        points_per_crop=3,
        points_per_batch=4,
        pred_iou_thresh=0.3,
        stability_score_thresh=0.6,
        crops_n_layers=1,
        crops_nms_thresh=0.2,
    )
    image = _image()
    want = run_mask_generation(model, image, **settings)
    sam = TorchSam(model)
    got = amg.generate_masks(sam, image, **settings)
    assert len(got) == len(want["masks"]) > 3
    for g, mask in zip(got, want["masks"], strict=True):
        np.testing.assert_array_equal(g.mask, np.asarray(mask))
    # the pipeline hands the model float64 points, ember float32: scores agree to ~1e-5
    np.testing.assert_allclose([g.score for g in got], want["scores"].numpy(), rtol=1e-4)
    assert seen["nms_in"] > len(got)  # NMS suppressed some
    assert seen["edge_dropped"] > 0 and seen["stability_dropped"] > 0
    assert 0 < seen["upsampled"] < 5 * 9 * 3  # the IoU filter dropped some of 3 per point
    assert sam.calls == 5 * 3  # 5 crops, 9 points in batches of 4


def test_embers_model_generates_the_pipelines_masks(model, tmp_path):
    """ember's SamModel on the same weights (and the same bumps) through generate_masks:
    the pipeline's masks, to the pixels its 1e-4 logits may flip at the threshold."""
    require("ember.models.sam")
    from ember.models.sam import SamModel

    model.save_pretrained(tmp_path)
    ours = EmberBumps(SamModel.from_pretrained(tmp_path))
    settings = dict(
        points_per_crop=2,
        points_per_batch=3,
        pred_iou_thresh=0.3,
        stability_score_thresh=0.6,
        crops_n_layers=1,
        crops_nms_thresh=0.2,
    )
    image = _image()
    want = run_mask_generation(model, image, **settings)
    got = amg.generate_masks(ours, image, **settings)
    assert len(got) == len(want["masks"]) > 3
    for g, mask in zip(got, want["masks"], strict=True):
        assert (g.mask != np.asarray(mask)).sum() <= 2
    np.testing.assert_allclose([g.score for g in got], want["scores"].numpy(), atol=1e-4)


@pytest.mark.parametrize(
    "name, value",
    [
        ("points_per_crop", 0),
        ("points_per_batch", 0),
        ("pred_iou_thresh", 1.5),
        ("crops_nms_thresh", -0.1),
        ("crops_n_layers", 1.5),
        ("stability_score_thresh", "high"),
    ],
)
def test_bad_settings_are_refused_by_name(name, value):
    with pytest.raises(InvalidArgument, match=f"{name} .*{value!r}"):
        amg.generate_masks(None, _image(), **{name: value})
