"""Images in, detections out, the way Ultralytics' predictor runs a detection model:
letterbox (minimal stride padding when every image of the batch has one shape, full
`size` x `size` otherwise), RGB scaled to [0, 1], the model, then confidence filter,
class-wise NMS and boxes mapped back onto each original image."""

import numpy as np

from ..errors import InvalidArgument
from ..tensor import tensor
from .letterbox import letterbox, to_input
from .nms import Detection, select


def _as_rgb(image, index):
    a = np.asarray(image)
    if a.ndim != 3 or a.shape[2] != 3 or a.dtype != np.uint8:
        raise InvalidArgument(
            f"detect: image {index} must be an (H, W, 3) uint8 RGB array, got {a.dtype} {a.shape}",
            op="detect",
        )
    return a


def detect(model, images, conf=0.25, iou=0.7, size=640, max_det=300, agnostic=False):
    """A list of Detection lists, one per (H, W, 3) uint8 RGB image."""
    images = [_as_rgb(im, i) for i, im in enumerate(images)]
    if not images:
        return []
    same = len({im.shape for im in images}) == 1
    boxed = [letterbox(im, size, model.stride, auto=same) for im in images]
    x = tensor(to_input([b[0] for b in boxed]), device=model.device)
    pred = model(x).numpy()
    out = []
    for p, (_, lb) in zip(pred, boxed, strict=True):
        boxes, scores, classes = select(p, conf, iou, max_det, agnostic)
        out.append(
            [
                Detection(
                    tuple(float(v) for v in b), float(s), int(c), model.names.get(int(c), str(c))
                )
                for b, s, c in zip(lb.to_original(boxes), scores, classes, strict=True)
            ]
        )
    return out
