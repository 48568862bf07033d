"""Images in, detections out, the way Ultralytics' predictor runs a detection model:
letterbox (minimal stride padding when every image of the batch has one shape, full
`size` x `size` otherwise), RGB scaled to [0, 1], the model, then confidence filter,
class-wise NMS and boxes (and a pose model's keypoints) mapped back onto each
original image."""

import os

import numpy as np

from ..tensor import tensor
from .images import as_image, read_for_size
from .letterbox import letterbox, to_input
from .nms import Detection, select


def _pixels(image, size, name):
    """(pixels, (H, W) of the image): a path read for a `size` letterbox (a huge JPEG at
    reduced scale), a read_for_size pair as it is, an array or tensor as it is."""
    if isinstance(image, (str, os.PathLike)):
        return read_for_size(image, size)
    if isinstance(image, tuple) and len(image) == 2:
        pixels, shape = image
        return as_image(pixels, name), tuple(shape)
    pixels = as_image(image, name)
    return pixels, pixels.shape[:2]


def detect(model, images, conf=0.25, iou=0.7, size=640, max_det=300, agnostic=False):
    """A list of Detection lists, one per image: a path, an (H, W, 3) uint8 RGB array
    (or grey, or RGBA), an ember tensor of one, or a (pixels, (H, W)) pair from
    ember.vision.images.read_for_size."""
    decoded = [_pixels(im, size, f"detect: image {i}") for i, im in enumerate(images)]
    if not decoded:
        return []
    same = len({shape for _, shape in decoded}) == 1
    boxed = [
        letterbox(im, size, model.stride, auto=same, orig_shape=shape) for im, shape in decoded
    ]
    x = tensor(to_input([b[0] for b in boxed]), device=model.device)
    pred = model(x).numpy()
    nc, kpt = model.config.nc, model.config.kpt_shape
    out = []
    for p, (_, lb) in zip(pred, boxed, strict=True):
        boxes, scores, classes, extra = select(p, conf, iou, max_det, agnostic, nc)
        kps = [None] * len(scores)
        if kpt is not None:
            k = extra.reshape(len(scores), kpt[0], kpt[1]).astype(np.float64)
            k[..., :2] = lb.points_to_original(k[..., :2])
            kps = [tuple(tuple(float(v) for v in row) for row in one) for one in k]
        out.append(
            [
                Detection(
                    tuple(float(v) for v in b),
                    float(s),
                    int(c),
                    model.names.get(int(c), str(c)),
                    kp,
                )
                for b, s, c, kp in zip(lb.to_original(boxes), scores, classes, kps, strict=True)
            ]
        )
    return out
