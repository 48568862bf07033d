"""Facts about binary masks that Segment Anything's outputs are judged by, as
transformers' SamImageProcessor computes them: the bounding box (first and last pixel
column and row of the mask, inclusive; (0, 0, 0, 0) for an empty mask) and the
stability score (how much of the mask survives moving the logit cutoff by +-offset)."""

import numpy as np


def mask_to_box(mask):
    """(H, W) bool -> (x0, y0, x1, y1) ints, inclusive pixel indices."""
    cols = np.flatnonzero(mask.any(0))
    rows = np.flatnonzero(mask.any(1))
    if not len(cols):
        return (0, 0, 0, 0)
    return (int(cols[0]), int(rows[0]), int(cols[-1]), int(rows[-1]))


def stability_counts(logits, mask_threshold, offset):
    """(pixels above threshold + offset, pixels above threshold - offset) of a logit map
    (or a band of one): the intersection and union the stability score divides."""
    return (
        int(np.count_nonzero(logits > mask_threshold + offset)),
        int(np.count_nonzero(logits > mask_threshold - offset)),
    )


def stability_score(intersection, union):
    """float32 intersection / union as the reference divides (an empty union: nan)."""
    if union == 0:
        return float("nan")
    return float(np.float32(intersection) / np.float32(union))
