"""Segment Anything pre- and post-processing (ember.vision.sam_processing) against
transformers' SamProcessor with its Pillow image processor: the same pixel values, the
same prompt coordinates, the same masks; predict (embed once, prompt many times) against
SamProcessor + SamModel + post_process_masks on one tiny random model; bad prompts
refused naming the argument and the value."""

import numpy as np
import pytest

from ember.errors import InvalidArgument
from ember.vision.sam_predict import ImageEmbedding, embed_image, predict
from ember.vision.sam_processing import SamFrame, mask_logits_bands, post_process_masks, preprocess
from ember.vision.sam_resample import resize_like_pillow
from helpers import require
from sam_torch_adapter import TorchSam, tiny_sam

# upscaled, both sides shrunk (and taller than a resampling band), one side kept, square,
# tiny, long and thin
SIZES = [(50, 70), (1500, 1100), (333, 1200), (1024, 1024), (7, 3), (40, 900)]


def _image(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3)).astype(np.uint8)


@pytest.fixture(scope="module")
def processor():
    transformers = require("transformers")
    return transformers.SamProcessor(transformers.SamImageProcessorPil())


@pytest.mark.parametrize("h, w", SIZES)
def test_resize_equals_pillow_bilinear(h, w):
    pil = require("PIL.Image")
    image = _image(h, w, 1)
    rh, rw = SamFrame.of(h, w).reshaped_size
    want = np.asarray(pil.fromarray(image).resize((rw, rh), pil.BILINEAR))
    np.testing.assert_array_equal(resize_like_pillow(image, rh, rw), want)


@pytest.mark.parametrize("h, w", SIZES)
def test_pixel_values_and_prompts_as_sam_processor(processor, h, w):
    image = _image(h, w)
    points = [[1.5, 2.25], [w - 1, h - 1]]
    box = [0.5, 1.0, w - 2.0, float(h)]
    want = processor(
        images=image, input_points=[[points]], input_boxes=[[box]], return_tensors="pt"
    )
    pixel_values, frame = preprocess(image)
    assert pixel_values.shape == (1, 3, 1024, 1024) and pixel_values.dtype == np.float32
    np.testing.assert_allclose(pixel_values, want["pixel_values"].numpy(), rtol=0, atol=1e-4)
    assert list(frame.reshaped_size) == want["reshaped_input_sizes"][0].tolist()
    np.testing.assert_allclose(
        [frame.point_to_input(*p) for p in points], want["input_points"][0, 0].numpy(), rtol=1e-12
    )
    np.testing.assert_allclose(
        frame.box_to_input(box), want["input_boxes"][0, 0].numpy(), rtol=1e-7
    )


@pytest.mark.parametrize("h, w", [(50, 70), (1500, 1100), (333, 1200), (7, 3)])
def test_post_process_masks_as_sam_processor(processor, h, w):
    torch = require("torch")
    low = (np.random.default_rng(h).standard_normal((1, 3, 256, 256)) * 3).astype(np.float32)
    frame = SamFrame.of(h, w)
    sizes, reshaped = torch.tensor([[h, w]]), torch.tensor([frame.reshaped_size])
    want = processor.post_process_masks([torch.from_numpy(low)], sizes, reshaped)[0].numpy()
    np.testing.assert_array_equal(post_process_masks(low, frame), want)
    want_logits = processor.post_process_masks(
        [torch.from_numpy(low)], sizes, reshaped, binarize=False
    )[0].numpy()
    logits = post_process_masks(low, frame, binarize=False)
    np.testing.assert_allclose(logits, want_logits, rtol=1e-5, atol=1e-5)
    # a band at a time gives the same rows as the whole
    bands = np.concatenate([b for _, b in mask_logits_bands(low, frame, band_rows=7)], axis=-2)
    np.testing.assert_array_equal(bands, logits)


@pytest.fixture(scope="module")
def sam():
    torch = require("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops: threads only contend
    yield tiny_sam(1)
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "points, labels, box, multimask",
    [
        ([(30.0, 20.0)], [1], None, True),
        ([(30.0, 20.0), (60.5, 40.0)], [1, 0], None, False),
        (None, None, (10.0, 5.0, 70.0, 50.0), True),
        ([(30.0, 20.0)], [1], (10.0, 5.0, 70.0, 50.0), False),
    ],
)
def test_predict_equals_processor_model_post_process(
    processor, sam, points, labels, box, multimask
):
    """Points, a negative point, a box, both; one mask or three: ember's predict (the
    embedding computed once) equals SamProcessor -> SamModel -> post_process_masks."""
    torch = require("torch")
    image = _image(60, 80, 2)
    kwargs = {}
    if points is not None:
        kwargs.update(input_points=[[points]], input_labels=[[labels]])
    if box is not None:
        kwargs["input_boxes"] = [[list(box)]]
    inputs = processor(images=image, return_tensors="pt", **kwargs)
    with torch.no_grad():
        out = sam(
            pixel_values=inputs["pixel_values"],
            input_points=inputs.get("input_points"),
            input_labels=inputs.get("input_labels"),
            input_boxes=inputs.get("input_boxes"),
            multimask_output=multimask,
        )
    want = processor.post_process_masks(
        out.pred_masks, inputs["original_sizes"], inputs["reshaped_input_sizes"]
    )[0][0].numpy()
    want_scores = out.iou_scores[0, 0].numpy()
    model = TorchSam(sam)
    embedding = embed_image(model, image)
    got = predict(model, embedding, points, labels, box, multimask_output=multimask, image=image)
    assert len(got) == (3 if multimask else 1)
    order = np.argsort(-want_scores, kind="stable")
    np.testing.assert_allclose([m.score for m in got], want_scores[order], rtol=1e-4, atol=1e-5)
    for m, i in zip(got, order, strict=True):
        assert m.mask.shape == (60, 80)
        # float32 vs float64 prompt coordinates: a pixel on the threshold may flip
        assert (m.mask != want[i]).mean() < 1e-3
        assert m.to_json()["area"] == int(m.mask.sum())


def test_an_image_too_thin_to_resize_is_refused():
    with pytest.raises(InvalidArgument, match=r"image: 5000x1 is too thin .* 0 pixels"):
        preprocess(np.zeros((1, 5000, 3), np.uint8))


class _NoModel:
    """Fails the test if a refused prompt ever reaches the model."""

    def predict_masks(self, *args, **kwargs):
        raise AssertionError("the model was called for a prompt that should be refused")


EMBEDDED = ImageEmbedding(embeddings=None, frame=SamFrame.of(60, 80))


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(points=[(80, 10)]), ["points[0]", "(80, 10)", "outside the 80x60 image"]),
        (dict(points=[(5, -1)]), ["points[0]", "(5, -1)", "outside"]),
        (dict(points=[]), ["points", "empty point list"]),
        (dict(), ["points", "empty point list"]),
        (dict(box=(50, 5, 20, 30)), ["box", "(50, 5, 20, 30)", "x1 20 not greater than x0 50"]),
        (dict(box=(5, 30, 20, 30)), ["box", "y1 30 not greater than y0 30"]),
        (dict(box=(5, 5, 81, 30)), ["box", "(5, 5, 81, 30)", "outside the 80x60 image"]),
        (dict(box=(5, 5, 20)), ["box", "(5, 5, 20)"]),
        (dict(points=[(float("nan"), 3)]), ["points[0] x", "nan"]),
        (dict(points=[(1, 2)], labels=[2]), ["labels", "label 0", "2"]),
        (dict(points=[(1, 2)], labels=[1, 0]), ["labels", "2 labels for 1 points"]),
        (dict(points=[(1, 2)], image=np.zeros((61, 80, 3), np.uint8)), ["image", "80x61", "80x60"]),
    ],
)
def test_bad_prompts_are_refused_naming_argument_and_value(kwargs, words):
    with pytest.raises(InvalidArgument) as err:
        predict(_NoModel(), EMBEDDED, **kwargs)
    for w in words:
        assert w in str(err.value)
