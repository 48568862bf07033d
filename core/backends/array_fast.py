"""The array backend's in-place elementwise forms, looked up from the ops.py rows that
carry them (`UnaryOp.fresh`, `UnaryOp.overwrite`): one algorithm per op, so these give
the bits the rows' `array` forms give (tests/test_array_fast.py, test_one_algorithm.py).

The exception is exact GELU and SiLU on numpy float32 where llvm_math's kernels are
built: every numpy path of those ops (a unary op, a linear layer's or a gated
activation's epilogue) takes the kernel instead (one pass: GELU 3.2 ms against 14.8 for
3M elements on one core of an AVX2 host), so the backend keeps one algorithm per op,
the kernel's.
"""

from ..ops import UNARY
from . import llvm_math

# Elements per piece of a compiled op that row_parallel may hand to another thread
_PIECE = 1 << 16
COMPILED = llvm_math.ELEMENTWISE  # ops llvm_math computes for numpy float32


def _compiled(xp, op, x):
    """llvm_math's kernels where they compute `op` on x (numpy float32), else None."""
    return llvm_math.for_array(xp, x) if op in COMPILED else None


def _fresh(op):
    numpy_form = UNARY[op].fresh

    def fresh(xp, x):
        kernels = _compiled(xp, op, x)
        if kernels is None:
            return numpy_form(xp, x)
        out = xp.empty(x.shape, x.dtype)
        try:
            if x.size <= _PIECE:  # one call (a decode step's rows): no pieces to share
                kernels.apply(op, x, out)
            else:
                _pieces(kernels, op, x, out)
        except ValueError:  # rows that do not merge (a view llvm_math cannot walk)
            _pieces(kernels, op, xp.ascontiguousarray(x), out)
        return out

    return fresh


def _pieces(kernels, op, x, out):
    """out = op(x), cut into pieces of about _PIECE elements (whole rows, or one row's
    columns) shared over row_parallel's threads."""
    from .row_parallel import run_rows

    if x.ndim < 2:
        x, out = x.reshape(1, -1), out.reshape(1, -1)
    cols = x.shape[-1]
    rows, out2 = x.reshape(-1, cols), out.reshape(-1, cols)  # a copy only where rows do not merge
    if x.size <= _PIECE:
        kernels.apply(op, rows, out2)
        return
    if cols >= _PIECE:  # pieces of one row's columns
        per_row = -(-cols // _PIECE)

        def run(start, stop):
            for p in range(start, stop):
                r, c = divmod(p, per_row)
                a, z = c * _PIECE, min(cols, (c + 1) * _PIECE)
                kernels.apply(op, rows[r : r + 1, a:z], out2[r : r + 1, a:z])

        run_rows(run, rows.shape[0] * per_row, _PIECE, blas_free=True)
        return
    _row_blocks(lambda r, o: kernels.apply(op, r, o), rows, out2, cols)


def _row_blocks(call, rows, out, cols):
    """call(rows[a:b], out[a:b]) over blocks of whole rows of about _PIECE elements
    (`cols` a row), shared over row_parallel's threads; one call where one block holds
    them all."""
    step = max(1, _PIECE // max(cols, 1))
    if rows.shape[0] <= step:
        call(rows, out)
        return
    from .row_parallel import run_rows

    def run(start, stop):
        call(rows[start * step : stop * step], out[start * step : stop * step])

    run_rows(run, -(-rows.shape[0] // step), step * cols, blas_free=True)


def gated(xp, op, x):
    """op(gate) * up for x [..., 2n] = [gate | up] as a fresh array [..., n] through
    llvm_math's gated kernel (the op's kernel, then the product: the bits of the two
    steps), its rows shared over row_parallel's threads; None where the kernels do not
    take op or x (the caller's steps then run)."""
    kernels = _compiled(xp, op, x)
    if kernels is None or x.ndim < 1 or x.shape[-1] % 2:
        return None
    n = x.shape[-1] // 2
    out = xp.empty(x.shape[:-1] + (n,), x.dtype)
    rows, out2 = x.reshape(-1, 2 * n), out.reshape(-1, n)  # a copy where rows do not merge
    if n and rows.strides[-1] != rows.itemsize:  # a strided last dim: the kernel's rows
        rows = xp.ascontiguousarray(rows)  # must be contiguous
    _row_blocks(lambda r, o: kernels.gated(op, r, o), rows, out2, n)
    return out


# Ops with a form that writes a fresh array in place step by step (x never written).
UNARY_INPLACE = {name: row.fresh for name, row in UNARY.items() if row.fresh is not None}
UNARY_INPLACE.update({op: _fresh(op) for op in COMPILED})


def apply_over(xp, op, y, scratch):
    """Unary `op` applied to the contiguous 1-D block y in place (a fresh GEMM output, in
    a linear layer's epilogue); scratch is two arrays of y's size and dtype."""
    kernels = _compiled(xp, op, y)
    if kernels is not None:
        kernels.apply(op, y, y)
        return
    row = UNARY[op]
    if row.overwrite is not None:
        row.overwrite(xp, y, scratch)
    else:
        xp.copyto(y, row.array(xp, y))
