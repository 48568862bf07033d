"""Softmax and norms of rows too long for the fused row kernels' loop budget.

The fused kernels (softmax.wgsl, norm.wgsl) make three passes over a row with at most
256 invocations sharing it, so a row of more than ~5M elements would loop past
lavapipe's cap (loopcap.py) in each invocation and come back partly computed. Such rows
run here instead as a chain of the backend's own kernels, each of which bounds its loops:
reductions fold chunks into partials in two passes (reduce.py), elementwise kernels
handle 8 elements an invocation. Everything runs in f32, as the fused kernels compute,
and is rounded to the dtype once at the end. Temporaries are as large as the input:
this path is for rare, long rows, not for speed.
"""

from ... import dtype as dt
from ...layout import Layout
from ...shape import contiguous_strides

_F32 = dt.f32


def _in_f32(be, storage, layout, dtype):
    """(storage, layout) of the operand as f32: itself when already f32, else a cast copy."""
    if dtype is _F32:
        return storage, layout
    return be.cast(storage, layout, dtype, _F32), Layout(layout.shape)


def _per_row(shape, dim):
    """A reduction's output (kept dims, row-major) broadcast back along `dim`."""
    kept = list(shape)
    kept[dim] = 1
    strides = list(contiguous_strides(kept))
    strides[dim] = 0
    return Layout(shape, strides)


def _to_dtype(be, storage, shape, dtype):
    if dtype is _F32:
        return storage
    return be.cast(storage, Layout(shape), _F32, dtype)


def softmax(be, storage, layout, dim, dtype, log=False):
    shape = layout.shape
    full, rows = Layout(shape), _per_row(shape, dim)
    x, lx = _in_f32(be, storage, layout, dtype)
    m = be.reduce("max", x, lx, [dim], _F32)
    d = be.binary("sub", x, lx, m, rows, _F32)  # x - max: exp cannot overflow
    e = be.unary("exp", d, full, _F32)
    s = be.reduce("sum", e, full, [dim], _F32)
    if log:
        n_rows = full.numel // shape[dim]
        y = be.binary("sub", d, full, be.unary("log", s, Layout((n_rows,)), _F32), rows, _F32)
    else:
        y = be.binary("div", e, full, s, rows, _F32)
    return _to_dtype(be, y, shape, dtype)


def layer_norm(be, storage, layout, w, lw, b, lb, eps, dtype, rms=False):
    """Over the last dim, as norm.wgsl: the variance of the centred values (layer_norm)
    or the mean square (rms_norm), then the optional weight and bias."""
    shape = layout.shape
    dim = len(shape) - 1
    full, rows = Layout(shape), _per_row(shape, dim)
    n_rows = full.numel // shape[dim]
    x, lx = _in_f32(be, storage, layout, dtype)
    if rms:
        d, ld = x, lx
    else:
        mean = be.reduce("mean", x, lx, [dim], _F32)
        d, ld = be.binary("sub", x, lx, mean, rows, _F32), full
    var = be.reduce("mean", be.unary("square", d, ld, _F32), full, [dim], _F32)
    one = Layout((n_rows,))
    inv = be.unary("rsqrt", be.unary("affine", var, one, _F32, (1.0, eps)), one, _F32)
    y = be.binary("mul", d, ld, inv, rows, _F32)
    for op, s, ls in (("mul", w, lw), ("add", b, lb)):
        if s is None:
            continue
        v, lv = _in_f32(be, s, ls, dtype)
        along = Layout(shape, [0] * dim + [lv.strides[0] if lv.ndim else 0], lv.offset)
        y = be.binary(op, y, full, v, along, _F32)
    return _to_dtype(be, y, shape, dtype)
