"""Row kernels on WebGPU: softmax / log_softmax and layer / rms norm over one dim.

Row kernels give each short row one invocation on CPU adapters, where barriers are
expensive, and a workgroup tree elsewhere: the gpu kernel set gives a row of more than 32
elements a workgroup of its own (64 or 256 invocations), and packs shorter rows several to
a workgroup. The tree runs through workgroup memory, not subgroup operations: WGSL says
neither how invocations map onto subgroups nor their size, so a subgroup sum combined
across subgroups would need atomics, and its order, hence its bits, would vary from run
to run; the tree is correct for every subgroup size and gives the same bits every time.

Rows are split into boxes that fit one storage binding (split.py); a row that does not
fit as laid out (a softmax down the columns) runs on a copy with the dim last; rows too
long for the loop budget run as chains of simpler kernels (longrows.py). The norms add a
residual laid out as x as they read it.
"""

import struct

from ...errors import UnsupportedOp, fmt_shape
from ...layout import Layout
from ...shape import contiguous_strides, numel
from . import longrows, loopcap, split
from .shapes import collapse, span


def row_split(rt, rows, length, passes):
    """(workgroup size, invocations per row) for row kernels. CPU adapters give each of
    many short rows one invocation (no barriers; sequential f32 sums stay accurate up to a
    few thousand terms, and `passes` loops over the row stay within the loop budget,
    loopcap.py); GPUs, and few or long rows, share a row among a workgroup tree (rows too
    long even for that are row_too_long)."""
    if (
        rt.kernel_set == "cpu-adapter"
        and rows >= 64
        and length <= 2048
        and passes * length <= min(16384, loopcap.BUDGET)
    ):
        return 64, 1
    lanes = min(256 if length >= 2048 else 64, 1 << max(0, length - 1).bit_length())
    return max(64, lanes), lanes  # short rows: several per workgroup


def row_too_long(rt, n, passes):
    """Whether a row kernel's `passes` over rows of n elements would loop past the budget
    (loopcap.py) in some invocation. Long rows share a workgroup tree (the one-invocation
    rows of CPU adapters are short by construction), so the lanes are those of one row."""
    _, lanes = row_split(rt, 1, n, passes)
    return not loopcap.fits(loopcap.strided_loops(n, lanes, passes))


def kept_dims(layout, dim):
    """Kept dims (all but `dim`) of layout, and the output's contiguous strides."""
    ostr = contiguous_strides(layout.shape)
    kept = [d for d in range(layout.ndim) if d != dim]
    kshape = [layout.shape[d] for d in kept]
    kx = [layout.strides[d] for d in kept]
    ko = [ostr[d] for d in kept]
    if not kshape:
        kshape, kx, ko = [1], [0], [0]
    kshape, (kx, ko) = collapse(kshape, [kx, ko])
    return kshape, kx, ko, ostr[dim]


def softmax(be, storage, layout, dim, dtype, log=False):
    rt = be.runtime
    op = "log_softmax" if log else "softmax"
    t = rt.type_of(dtype, op)
    n = layout.shape[dim]
    if layout.numel and row_too_long(rt, n, 3) and n * t.size <= rt.split_limit:
        return longrows.softmax(be, storage, layout, dim, dtype, log)
    out = rt.alloc(layout.numel, dtype, op)
    if layout.numel == 0:
        return out
    kshape, kx, ko, os_ = kept_dims(layout, dim)
    xs = layout.strides[dim]
    plan = split.row_plan(
        kshape, [(kx, (n - 1) * xs + 1, t.size), (ko, (n - 1) * os_ + 1, t.size)], rt.split_limit
    )
    if plan is None:
        return _rows_apart(
            be,
            op,
            storage,
            layout,
            dim,
            dtype,
            out,
            lambda st, lay: softmax(be, st, lay, lay.ndim - 1, dtype, log),
        )
    for rows, sub, pipe, (rng, rel), (orng, orel), grid in _row_launches(
        rt, "softmax", t, op, storage, layout.offset, out, kshape, kx, ko, plan, n, xs, os_, 3
    ):
        params = {
            "rows": rows,
            "n": n,
            "x_off": rel,
            "log": int(log),
            "x_stride": xs,
            "out_stride": os_,
            "out_off": orel,
            "kept_shape": sub,
            "kept_x_strides": kx,
            "kept_out_strides": ko,
        }
        rt.launch(pipe, params, [rng, orng], grid)
    return out


def _row_launches(
    rt, kernel, t, op, storage, offset, out, kshape, kx, ko, plan, n, xs, os_, passes, also=None
):
    """Per box of rows of a row kernel's split plan (rows of n elements, strides xs in the
    input and os_ in the output): (rows, the box's shape, the pipeline, the input's and the
    output's (range, offset) bindings, the grid); with `also` (storage, offset) of a second
    input laid out as the first, its binding too."""
    for starts, sub in split.row_boxes(kshape, *plan):
        rows = numel(sub)
        wg, lanes = row_split(rt, rows, n, passes)
        spec = {"S": t.storage, "ROUND": t.round, "NK": len(kshape), "WG": wg, "LANES": lanes}
        pipe = rt.kernel(kernel, t, spec, op)
        x0 = offset + split.offset_of(starts, kx)
        o0 = split.offset_of(starts, ko)
        bind_x = rt.bind(storage, x0, x0 + span(sub, kx) + (n - 1) * xs, t.size, op)
        bind_o = rt.bind(out, o0, o0 + span(sub, ko) + (n - 1) * os_, t.size, op)
        grid = rt.grid(rows, wg // lanes)
        if also is None:
            yield rows, sub, pipe, bind_x, bind_o, grid
            continue
        a0 = also[1] + split.offset_of(starts, kx)
        bind_a = rt.bind(also[0], a0, a0 + span(sub, kx) + (n - 1) * xs, t.size, op)
        yield rows, sub, pipe, bind_x, bind_o, grid, bind_a


def _rows_apart(be, op, storage, layout, dim, dtype, out, last_dim_op):
    """A row kernel whose single row does not fit a binding as laid out (a softmax down
    the columns, a transposed view): when the row itself fits, run it on a copy with `dim`
    last and contiguous, and copy the result back into place."""
    rt = be.runtime
    n = layout.shape[dim]
    t = rt.type_of(dtype, op)
    if n * t.size > rt.split_limit:
        raise UnsupportedOp(
            f"{op}: one row of {n} elements ({n * t.size} bytes) along dim {dim} of shape "
            f"{fmt_shape(layout.shape)} exceeds the adapter's maximum storage binding of "
            f"{rt.max_binding} bytes",
            op=op,
        )
    perm = [d for d in range(layout.ndim) if d != dim] + [dim]
    moved = layout.permute(perm)
    rows = be.copy_strided(storage, moved, dtype)
    result = last_dim_op(rows, Layout(moved.shape))
    be.copy_into(out, Layout(layout.shape).permute(perm), result, Layout(moved.shape), dtype)
    return out


def layer_norm(be, storage, layout, w, lw, b, lb, eps, dtype, rms=False, residual=None, lres=None):
    """Norm over the last dim, of x + residual where given: the norm kernel adds a
    residual laid out as x (same strides) as it reads; any other (or a row taking the
    long-row or rows-apart paths) is added first."""
    rt = be.runtime
    op = "rms_norm" if rms else "layer_norm"
    t = rt.type_of(dtype, op)
    dim = layout.ndim - 1
    n = layout.shape[dim]
    passes = 2 if rms else 3  # rms_norm skips the mean
    long_rows = layout.numel and row_too_long(rt, n, passes) and n * t.size <= rt.split_limit
    if residual is not None and (long_rows or tuple(lres.strides) != tuple(layout.strides)):
        storage = be.binary("add", storage, layout, residual, lres, dtype)
        layout, residual = Layout(layout.shape), None
    if long_rows:
        return longrows.layer_norm(be, storage, layout, w, lw, b, lb, eps, dtype, rms)
    out = rt.alloc(layout.numel, dtype, op)
    if layout.numel == 0:
        return out
    kshape, kx, ko, _ = kept_dims(layout, dim)
    xs = layout.strides[dim]
    plan = split.row_plan(kshape, [(kx, (n - 1) * xs + 1, t.size), (ko, n, t.size)], rt.split_limit)
    if plan is None and residual is not None:
        summed = be.binary("add", storage, layout, residual, lres, dtype)
        return layer_norm(be, summed, Layout(layout.shape), w, lw, b, lb, eps, dtype, rms)
    if plan is None:
        return _rows_apart(
            be,
            op,
            storage,
            layout,
            dim,
            dtype,
            out,
            lambda st, lay: layer_norm(be, st, lay, w, lw, b, lb, eps, dtype, rms),
        )
    flags = 4 if rms else 0
    extra, affine = [], []
    for bit, (s, ls) in ((1, (w, lw)), (2, (b, lb))):
        if s is None:
            extra.append((0, 0))
            affine.append(None)
            continue
        flags |= bit
        r, o = rt.bind(s, ls.offset, ls.offset + span(ls.shape, ls.strides), t.size, op)
        affine.append(r)
        extra.append((o, ls.strides[0] if ls.ndim else 0))
    eps_bits = struct.unpack("<I", struct.pack("<f", eps))[0]
    also = None
    if residual is not None:
        flags |= 8
        also = (residual, lres.offset)
    for rows, sub, pipe, (rng, rel), (orng, orel), grid, *bind_r in _row_launches(
        rt, "norm", t, op, storage, layout.offset, out, kshape, kx, ko, plan, n, xs, 1, passes, also
    ):
        # Without a residual, binding 5 repeats x (read-only, never read).
        ((rrng, rrel),) = bind_r or [(rng, 0)]
        ranges = [rng] + [r or rng for r in affine] + [orng, rrng]
        params = {
            "rows": rows,
            "n": n,
            "x_off": rel,
            "eps": eps_bits,
            "x_stride": xs,
            "flags": flags,
            "w_off": extra[0][0],
            "b_off": extra[1][0],
            "w_stride": extra[0][1],
            "b_stride": extra[1][1],
            "out_off": orel,
            "res_off": rrel,
            "kept_shape": sub,
            "kept_x_strides": kx,
        }
        rt.launch(pipe, params, ranges, grid)
    return out
