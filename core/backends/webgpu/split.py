"""Planning launches whose operands exceed the adapter's maximum storage binding.

A launch iterates over a space (a shape); each operand reaches storage through its own
strides in that space, plus `extra` elements that every index reaches beyond its own
position (a whole row that a reduction or softmax reads, say; 1 for elementwise
operands). A sub-box of the space binds, per operand, the span of the sub-box plus that
extra, which must fit one binding. Pure shape arithmetic: no driver, no numpy.

- `row_plan` / `row_boxes`: boxes in row-major order (leading dims fixed, one dim in
  ranges, the trailing dims whole), so a contiguous output stays a contiguous range per
  box; elementwise ops, row kernels and index ops use these.
- `tile_plan` / `tile_boxes`: sub-ranges in every dim, for kernels whose output is strided
  anyway (the copy kernel): a transposed copy fits both the source and the destination
  only when cut along both dims.
"""

import itertools
import operator

from .shapes import span


def _spans(box, operands):
    """(span in elements + extra - 1, element size) per operand for sub-box `box`."""
    return [(span(box, st) + extra - 1, size) for st, extra, size in operands]


def _fit(box, operands, limit):
    return all(n * size <= limit for n, size in _spans(box, operands))


def row_plan(shape, operands, limit):
    """(level j, rows r): boxes fix dims before j, take r rows of dim j and all dims after
    it. The lowest level where one row fits, with as many rows as fit; None when not even
    one index of the space fits (its `extra` alone is too large).

    operands: (strides in the space, extra elements, element size in bytes) each;
    limit: bytes one binding may span."""
    if _fit(shape, operands, limit):  # the common case: one launch
        return 0, shape[0]
    nd = len(shape)
    for j in range(nd):
        box = [1] * (j + 1) + list(shape[j + 1 :])
        if not _fit(box, operands, limit):
            continue
        rows = shape[j]
        for (st, _, size), (n, _) in zip(operands, _spans(box, operands), strict=True):
            if st[j] > 0:
                rows = min(rows, (limit // size - n) // st[j] + 1)
        return j, max(1, rows)
    return None


def row_boxes(shape, level, rows):
    """(starts, sub shape) of every box of a row plan, in row-major order."""
    nd = len(shape)
    if level == 0 and rows >= shape[0]:
        yield (), list(shape)  # no starts: every offset_of is 0
        return
    tail = list(shape[level + 1 :])
    for lead in itertools.product(*(range(n) for n in shape[:level])):
        for r0 in range(0, shape[level], rows):
            r = min(rows, shape[level] - r0)
            yield list(lead) + [r0] + [0] * (nd - level - 1), [1] * level + [r] + tail


def tile_plan(shape, operands, limit):
    """A tile size per dim such that every operand's span over one tile fits; None when a
    single index does not. While an operand does not fit, its dim that contributes the
    most to its span shrinks: to what makes that operand fit if that alone can, else by
    half."""
    tile = list(shape)
    while True:
        bad = None
        for (st, extra, size), (n, _) in zip(operands, _spans(tile, operands), strict=True):
            if n * size > limit:
                bad = (st, extra, size)
                break
        if bad is None:
            return tile
        st, extra, size = bad
        dims = [d for d in range(len(tile)) if tile[d] > 1 and st[d] > 0]
        if not dims:
            return None
        d = max(dims, key=lambda k: (tile[k] - 1) * st[k])
        one = list(tile)
        one[d] = 1
        rest = span(one, st) + extra - 1
        if rest * size <= limit:
            tile[d] = min(tile[d] - 1, (limit // size - rest) // st[d] + 1)
        else:
            tile[d] = (tile[d] + 1) // 2


def tile_boxes(shape, tile):
    """(starts, sub shape) of every tile."""
    for starts in itertools.product(*(range(0, n, t) for n, t in zip(shape, tile, strict=True))):
        yield list(starts), [min(t, n - s) for s, t, n in zip(starts, tile, shape, strict=True)]


def offset_of(starts, strides):
    return sum(map(operator.mul, starts, strides))
