"""The array backend's in-place elementwise forms, looked up from the ops.py rows that
carry them (`UnaryOp.fresh`, `UnaryOp.overwrite`): one algorithm per op, so these give
the bits the rows' `array` forms give (tests/test_array_fast.py, test_one_algorithm.py).
"""

from ..ops import UNARY

# Ops with a form that writes a fresh array in place step by step (x never written).
UNARY_INPLACE = {name: row.fresh for name, row in UNARY.items() if row.fresh is not None}


def apply_over(xp, op, y, scratch):
    """Unary `op` applied to the contiguous 1-D block y in place (a fresh GEMM output, in
    a linear layer's epilogue); scratch is two arrays of y's size and dtype."""
    row = UNARY[op]
    if row.overwrite is not None:
        row.overwrite(xp, y, scratch)
    else:
        xp.copyto(y, row.array(xp, y))
