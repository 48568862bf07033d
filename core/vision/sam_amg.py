"""Automatic mask generation: every object in an image, without prompts, as
transformers' mask-generation pipeline does it with a Segment Anything model.

The image (and, with crops_n_layers > 0, overlapping crops of it: layer i cuts it into
2**i x 2**i) is embedded once per crop; a grid of points_per_crop**2 points (fewer in
deeper layers by crop_n_points_downscale_factor**i) is prompted points_per_batch at a
time, one positive point each, three masks per point. A mask is kept when its predicted
IoU is above pred_iou_thresh and its stability score (the pixels above mask_threshold
+ offset over those above mask_threshold - offset, on the logits upsampled to the crop)
above stability_score_thresh, and, for a crop, when its box does not touch the crop's
edge away from the image's edge. Finally box NMS over all kept masks (IoU above
crops_nms_thresh suppresses the lower score).

Masks are upsampled one at a time and the kept ones stored packed to bits, so memory
grows with the masks kept, not with points times image size.
"""

import math
from dataclasses import dataclass
from itertools import product

import numpy as np

from ..errors import InvalidArgument
from ..tensor import tensor
from .images import as_image
from .nms import greedy_nms
from .sam_masks import mask_to_box, stability_counts, stability_score
from .sam_predict import SamMask
from .sam_processing import mask_logits_bands, preprocess

EDGE_TOLERANCE = 20.0  # pixels: a box this close to a crop's inner edge was cut by it


def point_grid(n_per_side):
    """n x n points evenly spaced in [0, 1]^2, row by row (x varies fastest), with the
    float64 steps of numpy's linspace(offset, 1 - offset, n) that the reference uses."""
    offset = 1 / (2 * n_per_side)
    start, stop = offset, 1 - offset
    if n_per_side == 1:
        side = [start]
    else:
        step = (stop - start) / (n_per_side - 1)
        side = [i * step + start for i in range(n_per_side - 1)] + [stop]
    return [(x, y) for y in side for x in side]


def crop_boxes(height, width, n_layers, overlap_ratio):
    """[(layer, (x0, y0, x1, y1)), ...]: the whole image, then per layer i its
    2**i x 2**i overlapping crops (column by column)."""
    out = [(0, (0, 0, width, height))]
    short = min(height, width)
    for layer in range(1, n_layers + 1):
        n = 2**layer
        overlap = int(overlap_ratio * short * (2 / n))
        crop_w = math.ceil((overlap * (n - 1) + width) / n)
        crop_h = math.ceil((overlap * (n - 1) + height) / n)
        xs = [int((crop_w - overlap) * i) for i in range(n)]
        ys = [int((crop_h - overlap) * i) for i in range(n)]
        for x0, y0 in product(xs, ys):
            out.append((layer, (x0, y0, min(x0 + crop_w, width), min(y0 + crop_h, height))))
    return out


def _near_crop_edge(box, crop, size):
    """Whether the box (crop pixels) lies within EDGE_TOLERANCE of an edge of the crop
    that is not also an edge of the image."""
    h, w = size
    x0, y0 = crop[0], crop[1]
    shifted = (box[0] + x0, box[1] + y0, box[2] + x0, box[3] + y0)
    image = (0, 0, w, h)
    return any(
        abs(b - c) <= EDGE_TOLERANCE and abs(b - i) > EDGE_TOLERANCE
        for b, c, i in zip(shifted, crop, image, strict=True)
    )


@dataclass(frozen=True)
class _Kept:
    bits: object  # np.packbits of the mask in crop pixels
    crop: tuple
    score: float
    box: tuple  # x0, y0, x1, y1 in image pixels, inclusive


def _check(name, value, lo, hi, kind=float):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok or not lo <= value <= hi:
        raise InvalidArgument(
            f"generate_masks: {name} must be a {kind.__name__} in [{lo}, {hi}], got {value!r}",
            op="generate_masks",
        )
    return kind(value)


def _crop_masks(model, crop_image, crop, layer_points, size, settings):
    """The masks of one crop that pass the filters, as _Kept."""
    pred_iou, stab_thresh, mask_thr, offset, ppb = settings
    pixel_values, frame = preprocess(crop_image)
    emb = model.image_embeddings(tensor(pixel_values, device=model.device))
    ch, cw = frame.original_size
    pts = [frame.point_to_input(x * cw, y * ch) for x, y in layer_points]
    kept = []
    for start in range(0, len(pts), ppb):
        batch = pts[start : start + ppb]
        low, iou = model.predict_masks(
            emb,
            input_points=tensor([[[list(p)] for p in batch]], device=emb.device),
            input_labels=[[[1] for _ in batch]],
            multimask_output=True,
        )
        low, iou = low.numpy()[0], iou.numpy()[0].astype(np.float32)
        for p, m in np.ndindex(*iou.shape):
            score = iou[p, m]
            if pred_iou > 0 and not score > np.float32(pred_iou):
                continue
            mask, inter, union = _upsampled(low[p, m], frame, mask_thr, offset)
            if stab_thresh > 0 and not np.float32(stability_score(inter, union)) > np.float32(
                stab_thresh
            ):
                continue
            box = mask_to_box(mask)
            if _near_crop_edge(box, crop, size):
                continue
            x0, y0 = crop[0], crop[1]
            shifted = (box[0] + x0, box[1] + y0, box[2] + x0, box[3] + y0)
            kept.append(_Kept(np.packbits(mask), crop, float(score), shifted))
    return kept


def _upsampled(logits, frame, mask_threshold, offset):
    """(mask bool at the crop's size, stability intersection, union) of one 256x256 map."""
    h, w = frame.original_size
    mask = np.empty((h, w), bool)
    inter = union = 0
    for y, band in mask_logits_bands(logits, frame):
        i, u = stability_counts(band, mask_threshold, offset)
        inter, union = inter + i, union + u
        mask[y : y + band.shape[0]] = band > mask_threshold
    return mask, inter, union


def generate_masks(
    model,
    image,
    points_per_crop=32,
    points_per_batch=64,
    pred_iou_thresh=0.88,
    stability_score_thresh=0.95,
    stability_score_offset=1.0,
    mask_threshold=0.0,
    crops_nms_thresh=0.7,
    crops_n_layers=0,
    crop_overlap_ratio=512 / 1500,
    crop_n_points_downscale_factor=1,
):
    """Every mask found in `image` (a path, an (H, W, 3) uint8 array or a tensor of one)
    as SamMask (image-sized boolean mask, predicted IoU), highest score first; the
    arguments and their defaults are those of transformers' mask-generation pipeline."""
    image = as_image(image, "image")
    points_per_crop = _check("points_per_crop", points_per_crop, 1, 256, int)
    ppb = _check("points_per_batch", points_per_batch, 1, 4096, int)
    layers = _check("crops_n_layers", crops_n_layers, 0, 4, int)
    factor = _check("crop_n_points_downscale_factor", crop_n_points_downscale_factor, 1, 64, int)
    settings = (
        _check("pred_iou_thresh", pred_iou_thresh, 0, 1),
        _check("stability_score_thresh", stability_score_thresh, 0, 1),
        _check("mask_threshold", mask_threshold, -1e6, 1e6),
        _check("stability_score_offset", stability_score_offset, 0, 1e6),
        ppb,
    )
    nms_thresh = _check("crops_nms_thresh", crops_nms_thresh, 0, 1)
    overlap = _check("crop_overlap_ratio", crop_overlap_ratio, 0, 1)
    size = image.shape[:2]
    grids = [point_grid(int(points_per_crop / factor**i)) for i in range(layers + 1)]
    if any(not g for g in grids):
        raise InvalidArgument(
            f"generate_masks: points_per_crop {points_per_crop} / crop_n_points_downscale_factor "
            f"{factor}**{layers} leaves no points in the last layer",
            op="generate_masks",
        )
    kept = []
    for layer, crop in crop_boxes(*size, layers, overlap):
        x0, y0, x1, y1 = crop
        kept += _crop_masks(model, image[y0:y1, x0:x1], crop, grids[layer], size, settings)
    if not kept:
        return []
    boxes = np.array([k.box for k in kept], np.float64)
    scores = np.array([k.score for k in kept], np.float32)
    return [_full_mask(kept[i], size) for i in greedy_nms(boxes, scores, nms_thresh)]


def _full_mask(k, size):
    x0, y0, x1, y1 = k.crop
    crop_size = (y1 - y0) * (x1 - x0)
    mask = np.zeros(size, bool)
    mask[y0:y1, x0:x1] = np.unpackbits(k.bits, count=crop_size).reshape(y1 - y0, x1 - x0)
    return SamMask(mask, k.score)
