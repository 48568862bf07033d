"""Promptable masks with a Segment Anything model: the image embedding is computed once
(embed_image) and reused for every prompt on that image (predict).

A prompt is one object: positive and negative points, a box, or both, in the original
image's pixels. Each is checked against the image first, and refused with
InvalidArgument naming the argument and its value: a point outside the image, no
point and no box, a box whose x1 or y1 is not past its x0 or y0, a label that is not
0 or 1, an image of another size than the embedding's.

The model is whatever has `image_embeddings(pixel_values)` and `predict_masks(
image_embeddings, input_points, input_labels, input_boxes, multimask_output)` taking
and returning ember tensors shaped as transformers' SamModel takes them (labels
may be nested lists) (ember.models.sam.SamModel); see sam_processing for the coordinate
frames. A model that also has `prepare_image(image_embeddings)` gets it called once per
embedding, and what it returns given to predict_masks in the embeddings' place: the
decoder's work that depends on the image alone is then done once for all its prompts.
"""

import math
from dataclasses import dataclass

from ..dtype import f32
from ..errors import InvalidArgument
from ..tensor import tensor
from .images import as_image
from .sam_masks import mask_to_box
from .sam_processing import SamFrame, post_process_masks, preprocess

MAX_POINTS = 256  # points in one prompt: far past what a person clicks, bounded for the model
POSITIVE, NEGATIVE = 1, 0


def _bad(message):
    raise InvalidArgument(message, op="segment")


@dataclass(frozen=True)
class ImageEmbedding:
    """The encoder's output for one image, and where that image lies in the input."""

    embeddings: object  # ember Tensor (1, C, 64, 64)
    frame: SamFrame
    prepared: object = None  # the model's prepare_image(embeddings), where it has one

    @property
    def model_input(self):
        """What predict_masks takes for this image: the prepared embedding, else the
        embedding."""
        return self.embeddings if self.prepared is None else self.prepared

    def check_image(self, image, name="image"):
        """Refuse an image (array) of another size than the one embedded."""
        h, w = image.shape[:2]
        if (h, w) != self.frame.original_size:
            eh, ew = self.frame.original_size
            _bad(
                f"{name}: the image is {w}x{h} but the embedding was computed for a "
                f"{ew}x{eh} image; embed this image first"
            )


@dataclass(frozen=True)
class SamMask:
    mask: object  # (H, W) bool numpy array, the original image's size
    score: float  # the model's predicted IoU

    @property
    def box(self):
        return mask_to_box(self.mask)

    @property
    def area(self):
        return int(self.mask.sum())

    def to_json(self):
        return {"score": round(self.score, 4), "box": list(self.box), "area": self.area}


def embed_image(model, image):
    """ImageEmbedding of an image (a path, an (H, W, 3) uint8 array or a tensor of one)."""
    image = as_image(image, "image")
    pixel_values, frame = preprocess(image)
    embeddings = model.image_embeddings(tensor(pixel_values, device=model.device))
    prepare = getattr(model, "prepare_image", None)  # optional: see the module's docstring
    return ImageEmbedding(embeddings, frame, None if prepare is None else prepare(embeddings))


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _bad(f"{name}: expects a finite number, got {value!r}")
    return float(value)


def check_point(point, frame, name="point"):
    """(x, y) inside the image (0 <= x < width, 0 <= y < height), as floats."""
    if not isinstance(point, (tuple, list)) or len(point) != 2:
        _bad(f"{name}: expects (x, y), got {point!r}")
    x, y = _number(f"{name} x", point[0]), _number(f"{name} y", point[1])
    h, w = frame.original_size
    if not (0 <= x < w and 0 <= y < h):
        _bad(f"{name}: ({x:g}, {y:g}) is outside the {w}x{h} image (0 <= x < {w}, 0 <= y < {h})")
    return x, y


def check_points(points, labels, frame):
    """[(x, y), ...] and their labels (default: all positive) -> (points, labels) lists,
    each point inside the image."""
    points = [] if points is None else list(points)
    if len(points) > MAX_POINTS:
        _bad(f"points: {len(points)} points, more than the {MAX_POINTS} one prompt takes")
    labels = [POSITIVE] * len(points) if labels is None else list(labels)
    if len(labels) != len(points):
        _bad(f"labels: {len(labels)} labels for {len(points)} points")
    for i, lab in enumerate(labels):
        if isinstance(lab, bool) or lab not in (POSITIVE, NEGATIVE):
            _bad(f"labels: label {i} must be 1 (positive) or 0 (negative), got {lab!r}")
    out = [check_point(p, frame, f"points[{i}]") for i, p in enumerate(points)]
    return out, [int(lab) for lab in labels]


def check_box(box, frame, name="box"):
    """(x0, y0, x1, y1) inside the image with x0 < x1 and y0 < y1, as floats."""
    if not isinstance(box, (tuple, list)) or len(box) != 4:
        _bad(f"{name}: expects (x0, y0, x1, y1), got {box!r}")
    x0, y0, x1, y1 = (
        _number(f"{name} {c}", v) for c, v in zip(("x0", "y0", "x1", "y1"), box, strict=True)
    )
    h, w = frame.original_size
    text = f"({x0:g}, {y0:g}, {x1:g}, {y1:g})"
    if x1 <= x0:
        _bad(f"{name}: {text} has x1 {x1:g} not greater than x0 {x0:g}")
    if y1 <= y0:
        _bad(f"{name}: {text} has y1 {y1:g} not greater than y0 {y0:g}")
    if x0 < 0 or y0 < 0 or x1 > w or y1 > h:
        _bad(f"{name}: {text} reaches outside the {w}x{h} image")
    return x0, y0, x1, y1


def predict(
    model,
    embedding,
    points=None,
    labels=None,
    box=None,
    multimask_output=True,
    image=None,
    mask_threshold=0.0,
):
    """Masks for one prompt on the embedded image, best predicted IoU first: three with
    multimask_output (the model's answers to an ambiguous prompt), else one. `image`,
    when given, must be the image that was embedded (its size is checked)."""
    frame = embedding.frame
    if image is not None:
        embedding.check_image(as_image(image, "image"))
    points, labels = check_points(points, labels, frame)
    if box is not None:
        box = check_box(box, frame)
    if not points and box is None:
        _bad("points: an empty point list and no box; give at least one point or a box")
    device = embedding.embeddings.device
    kwargs = {}
    if points:
        pts = [[list(frame.point_to_input(x, y)) for x, y in points]]
        kwargs["input_points"] = tensor([pts], dtype=f32, device=device)
        kwargs["input_labels"] = [[labels]]  # host lists: no int64 upload for a WebGPU device
    if box is not None:
        kwargs["input_boxes"] = tensor([[list(frame.box_to_input(box))]], dtype=f32, device=device)
    low_res, iou = model.predict_masks(
        embedding.model_input, multimask_output=multimask_output, **kwargs
    )
    masks = post_process_masks(low_res.numpy()[0, 0], frame, mask_threshold)
    scores = [float(s) for s in iou.numpy()[0, 0]]
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    return [SamMask(masks[i], scores[i]) for i in order]
