"""The array backend's in-place elementwise forms, looked up from the ops.py rows that
carry them (`UnaryOp.fresh`, `UnaryOp.overwrite`): one algorithm per op, so these give
the bits the rows' `array` forms give (tests/test_array_fast.py, test_one_algorithm.py).

The exception is exact GELU on numpy float32 where llvm_math's kernel is built: every
numpy path of "gelu" (a unary op, a linear layer's or a gated activation's epilogue)
takes the kernel instead (one pass, 3.2 ms against 14.8 for 3M elements on one core of
an AVX2 host), so the backend keeps one algorithm per op, the kernel's.
"""

from ..ops import UNARY

# Elements per piece of a compiled GELU that row_parallel may hand to another thread
_GELU_PIECE = 1 << 16


def _compiled_gelu(xp, x):
    """llvm_math's kernels where they take x (numpy float32), else None."""
    if _numpy_f32(xp, x):
        from . import llvm_math

        return llvm_math.kernels()
    return None


def _numpy_f32(xp, x):
    return getattr(xp, "__name__", "") == "numpy" and x.dtype == xp.float32


def _gelu_fresh(xp, x):
    kernels = _compiled_gelu(xp, x)
    if kernels is None:
        return UNARY["gelu"].fresh(xp, x)
    src = xp.ascontiguousarray(x)
    out = xp.empty_like(src)
    _gelu_pieces(kernels, src.reshape(-1), out.reshape(-1))
    return out


def _gelu_pieces(kernels, src, out):
    from .row_parallel import run_rows

    n = src.size
    pieces = -(-n // _GELU_PIECE)

    def run(start, stop):
        a, z = start * _GELU_PIECE, min(n, stop * _GELU_PIECE)
        kernels.gelu(src[a:z], out[a:z])

    run_rows(run, pieces, _GELU_PIECE, blas_free=True)


# Ops with a form that writes a fresh array in place step by step (x never written).
UNARY_INPLACE = {name: row.fresh for name, row in UNARY.items() if row.fresh is not None}
UNARY_INPLACE["gelu"] = _gelu_fresh


def apply_over(xp, op, y, scratch):
    """Unary `op` applied to the contiguous 1-D block y in place (a fresh GEMM output, in
    a linear layer's epilogue); scratch is two arrays of y's size and dtype."""
    if op == "gelu":
        kernels = _compiled_gelu(xp, y)
        if kernels is not None:
            kernels.gelu(y, y)
            return
    row = UNARY[op]
    if row.overwrite is not None:
        row.overwrite(xp, y, scratch)
    else:
        xp.copyto(y, row.array(xp, y))
