"""The binding-size planner of the WebGPU backend (pure shape arithmetic, no device): the
parts it plans cover every index of a launch exactly once, and each part's operands fit."""
import itertools

import numpy as np
import pytest

from ember.backends.webgpu import split
from ember.backends.webgpu.shapes import span


def _covered(shape, boxes):
    seen = np.zeros(shape, np.int32)
    for starts, sub in boxes:
        starts = list(starts) or [0] * len(shape)
        seen[tuple(slice(s, s + n) for s, n in zip(starts, sub, strict=True))] += 1
    return seen


def _fits(sub, operands, limit):
    return all((span(sub, st) + extra - 1) * size <= limit for st, extra, size in operands)


CASES = [
    # shape, operands (strides, extra, element size), limit in bytes
    ([40, 300], [([300, 1], 1, 4), ([300, 1], 1, 4)], 3836),       # rows of a copy
    ([40, 300], [([1, 40], 1, 4), ([300, 1], 1, 4)], 3836),        # a transposed source
    ([2, 5000], [([5000, 1], 1, 4), ([0, 1], 1, 4)], 3836),        # a broadcast row > limit
    ([6, 7, 9], [([63, 9, 1], 1, 2), ([1, 6, 42], 1, 4)], 512),   # permuted 3-D, f16 -> f32
    ([30], [([8], 40, 4)], 3836),                                  # rows of a row kernel
]


@pytest.mark.parametrize("shape,operands,limit", CASES)
def test_row_boxes_cover_everything_once_and_fit(shape, operands, limit):
    level, rows = split.row_plan(shape, operands, limit)
    boxes = list(split.row_boxes(shape, level, rows))
    assert (_covered(shape, boxes) == 1).all()
    for _, sub in boxes:
        assert _fits(sub, operands, limit), sub
    # Row-major boxes: each starts where the previous one ended, so a contiguous output
    # stays one range per box.
    ends = [np.ravel_multi_index(tuple(list(s) or [0] * len(shape)), shape) for s, _ in boxes]
    sizes = [int(np.prod(sub)) for _, sub in boxes]
    assert ends == list(itertools.accumulate([0] + sizes[:-1]))


@pytest.mark.parametrize("shape,operands,limit", CASES)
def test_tiles_cover_everything_once_and_fit(shape, operands, limit):
    tile = split.tile_plan(shape, operands, limit)
    boxes = list(split.tile_boxes(shape, tile))
    assert (_covered(shape, boxes) == 1).all()
    for _, sub in boxes:
        assert _fits(sub, operands, limit), sub


def test_a_transpose_takes_far_fewer_tiles_than_row_boxes():
    # [400, 500] read transposed and written contiguous, 20 times one binding: a tile
    # [a, b] spans about b source columns and a destination rows, so about 20^2 tiles;
    # row boxes cut each of the 400 rows into pieces.
    shape, operands, limit = [400, 500], [([1, 400], 1, 4), ([500, 1], 1, 4)], 40000
    tiles = list(split.tile_boxes(shape, split.tile_plan(shape, operands, limit)))
    rows = list(split.row_boxes(shape, *split.row_plan(shape, operands, limit)))
    assert len(tiles) <= 2 * 20 ** 2 and 10 * len(tiles) < len(rows)


def test_nothing_fits_when_one_index_is_too_large():
    assert split.row_plan([4, 4], [([4, 1], 2000, 4)], 3836) is None
    assert split.tile_plan([4, 4], [([4, 1], 2000, 4)], 3836) is None
