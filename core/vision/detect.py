"""Images in, detections out, the way Ultralytics' predictor runs a detection model:
letterbox (minimal stride padding when every image of the batch has one shape, full
`size` x `size` otherwise), RGB scaled to [0, 1], the model, then confidence filter,
class-wise NMS and boxes mapped back onto each original image."""

from ..tensor import tensor
from .images import as_image
from .letterbox import letterbox, to_input
from .nms import Detection, select


def detect(model, images, conf=0.25, iou=0.7, size=640, max_det=300, agnostic=False):
    """A list of Detection lists, one per image: a path, an (H, W, 3) uint8 RGB array
    (or grey, or RGBA) or an ember tensor of one."""
    images = [as_image(im, f"detect: image {i}") for i, im in enumerate(images)]
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
