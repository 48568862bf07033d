"""SamModel.prepare_image: the mask decoder's image-only work (the image rows with the
no-mask embedding, the first two-way block's projections of them) done once per image
embedding gives the plain path's outputs to 1e-5, and transformers', for every prompt;
a mask prompt, or weights changed after the preparation, are not served stale state;
the predictor prepares each embedding once."""

import numpy as np
import pytest

import ember
from ember.models.sam import SamModel
from ember.vision import sam_predict
from ember.vision.sam_processing import SamFrame
from test_sam_model import _prompts, _saved, _torch_outputs
from helpers import require


@pytest.fixture(scope="module")
def grid4(tmp_path_factory):
    return _saved(tmp_path_factory, "grid4-win2")


@pytest.mark.parametrize("multimask", [True, False], ids=["multimask", "single"])
@pytest.mark.parametrize("kind", ["points", "boxes", "both"])
def test_prepared_image_gives_the_plain_bits_and_transformers(grid4, kind, multimask):
    torch = require("torch")
    model = SamModel.from_pretrained(grid4["path"])
    emb = ember.tensor(grid4["embeddings"].numpy())  # two images, two prompt sets each
    prepared = model.prepare_image(emb)
    prompts = _prompts(grid4["size"], kind)
    plain = model.predict_masks(emb, multimask_output=multimask, **prompts)
    first = model.predict_masks(prepared, multimask_output=multimask, **prompts)
    again = model.predict_masks(prepared, multimask_output=multimask, **prompts)
    want_masks, want_iou = _torch_outputs(torch, grid4, prompts, multimask)
    np.testing.assert_array_equal(again[0].numpy(), first[0].numpy())
    for masks, iou in (first, again):
        # the plain path attends to the first block's image without projecting it
        # (TwoWayBlock), the prepared one with its projections, made once
        np.testing.assert_allclose(masks.numpy(), plain[0].numpy(), atol=1e-5, rtol=0)
        np.testing.assert_allclose(iou.numpy(), plain[1].numpy(), atol=1e-5, rtol=0)
        np.testing.assert_allclose(masks.numpy(), want_masks, atol=1e-4, rtol=0)
        np.testing.assert_allclose(iou.numpy(), want_iou, atol=1e-4, rtol=0)


def test_one_prompt_set_on_one_image_matches_transformers(grid4):
    """The predictor's case: one image, one prompt set (no row copies to expand)."""
    torch = require("torch")
    model = SamModel.from_pretrained(grid4["path"])
    one = grid4["embeddings"][:1]
    prompts = {k: [v[0][:1]] for k, v in _prompts(grid4["size"], "both").items()}
    prepared = model.prepare_image(ember.tensor(one.numpy()))
    masks, iou = model.predict_masks(prepared, **prompts)
    with torch.no_grad():
        out = grid4["model"](
            image_embeddings=one, **{k: torch.tensor(v) for k, v in prompts.items()}
        )
    assert masks.shape == out.pred_masks.shape and masks.shape[:2] == (1, 1)
    np.testing.assert_allclose(masks.numpy(), out.pred_masks.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(iou.numpy(), out.iou_scores.numpy(), atol=1e-4, rtol=0)


def test_a_prepared_image_follows_reloaded_weights(grid4):
    from ember.nn import VarBuilder
    from ember.nn.sources import DictSource

    emb = ember.tensor(grid4["embeddings"].numpy())
    prompts = _prompts(grid4["size"], "both")
    used = SamModel.from_pretrained(grid4["path"])
    prepared = used.prepare_image(emb)
    before = used.predict_masks(prepared, **prompts)[0].numpy()  # the state made
    rng = np.random.default_rng(5)
    weights = {}
    for k, v in used.state_dict().items():  # every weight moved, no_mask_embed too
        v = v.numpy()
        weights[k] = v + np.float32(0.1) * rng.standard_normal(v.shape, dtype=np.float32)
    fresh = SamModel.from_pretrained(grid4["path"])
    for model in (used, fresh):
        model.load(VarBuilder(DictSource({k: ember.tensor(v) for k, v in weights.items()})))
    after = used.predict_masks(prepared, **prompts)[0].numpy()
    assert np.abs(after - before).max() > 1e-2
    want = fresh.predict_masks(fresh.prepare_image(emb), **prompts)[0].numpy()
    np.testing.assert_array_equal(after, want)


class _PreparingModel:
    """Records what the predictor hands the model."""

    def __init__(self):
        self.embedding = ember.zeros(1, 4, 2, 2)
        self.prepared_from, self.given = [], []

    def image_embeddings(self, pixel_values):
        return self.embedding

    def prepare_image(self, embeddings):
        self.prepared_from.append(embeddings)
        return "prepared"

    def predict_masks(self, image_embeddings, **kwargs):
        self.given.append(image_embeddings)
        p = kwargs["input_points"].shape[1]
        return ember.zeros(1, p, 3, 256, 256), ember.tensor([[[0.5, 0.7, 0.6]]])

    device = ember.zeros(1).device


def test_the_predictor_prepares_each_embedding_once(monkeypatch):
    model = _PreparingModel()
    frame = SamFrame.of(60, 80)
    monkeypatch.setattr(sam_predict, "preprocess", lambda image: (np.zeros((1, 3, 4, 4)), frame))
    embedding = sam_predict.embed_image(model, np.zeros((60, 80, 3), np.uint8))
    for point in ((10, 20), (30, 40)):
        masks = sam_predict.predict(model, embedding, points=[point])
        assert [m.score for m in masks] == pytest.approx([0.7, 0.6, 0.5])
    assert model.prepared_from == [model.embedding]
    assert model.given == ["prepared", "prepared"]
