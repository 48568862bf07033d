"""Elementwise ops on WebGPU: unary, binary, compare, where, cast and strided copies,
through one launcher.

The launcher collapses dims, then binds each operand whole or, when one exceeds the
adapter's maximum storage binding, by row-major boxes planned by split.py; a permuted
input (a transposed view) whose rows alone do not fit is first copied contiguous by the
copy kernel, which cuts both its source and destination into tiles.
"""

from ... import dtype as dt
from ...errors import UnsupportedOp
from ...intmath import ceil_div
from ...layout import Layout
from ...ops import BINARY, COMPARE, INT_DIV, UNARY
from ...shape import contiguous_strides
from . import overflow, split
from .dtypes import convert_expr
from .index import storage_dtype_of
from .params import ELEMENTWISE_INPUTS
from .scalars import param_bits
from .shapes import collapse, span

WG = 256  # invocations per workgroup
EPT = 8  # elements per invocation
MAX_DIMS = 10


def launch(be, name, t, spec, op, shape, inputs, out, out_strides=None, scalars=None):
    """Launch elementwise kernel `name` over `shape`.

    inputs: list of (storage, strides, offset, device type), in the order of the kernel's
    ELEMENTWISE_INPUTS (params.py); out: (storage, offset, size) written contiguously, or
    at `out_strides` (a strided destination); scalars: the kernel's scalar parameters by
    name (unary's p0 and p1, binary's b)."""
    scalars = scalars or {}
    rt = be.runtime
    n = 1
    for d in shape:
        n *= d
    if n == 0:
        return
    strided_out = out_strides is not None
    all_strides = [s for _, s, _, _ in inputs] + ([out_strides] if strided_out else [])
    cshape, cstrides = collapse(shape, all_strides)
    if len(cshape) > MAX_DIMS:
        raise UnsupportedOp(f"{op}: more than {MAX_DIMS} dims after collapsing", op=op)
    nd = len(cshape)
    ostr = cstrides[-1] if strided_out else contiguous_strides(cshape)
    in_strides = cstrides[: len(inputs)]  # the output's, when strided, come last
    operands = [
        (st, cs, off, it.size) for (st, _, off, it), cs in zip(inputs, in_strides, strict=True)
    ]
    operands.append((out[0], ostr, out[1], out[2]))
    limit = rt.split_limit
    plans = [(cs, 1, size) for _, cs, _, size in operands]
    plan = split.row_plan(cshape, plans, limit)
    boxes = None
    if plan[0] > 0 and strided_out:
        boxes = split.tile_boxes(cshape, split.tile_plan(cshape, plans, limit))
    elif plan[0] > 0:
        done = {}  # a scalar binary op passes its one input twice: copy it once
        copied = []
        for inp, cs in zip(inputs, in_strides, strict=True):
            key = (id(inp[0]), tuple(inp[1]), inp[2])
            if key not in done:
                done[key] = _contiguous_input(be, shape, inp, cs, cshape, limit)
            copied.append(done[key])
        if any(c is not inp for c, inp in zip(copied, inputs, strict=True)):
            return launch(be, name, t, spec, op, shape, copied, out, scalars=scalars)
    if boxes is None:
        boxes = split.row_boxes(cshape, *plan)
    spec = dict(spec, ND=nd, WG=WG, EPT=EPT)
    pipe = rt.kernel(name, t, spec, op)
    inputs_of = ELEMENTWISE_INPUTS[name]
    for starts, sub in boxes:
        ranges, offs = [], []
        for st, cs, off, size in operands:
            lo = off + split.offset_of(starts, cs)
            rng, rel = rt.bind(st, lo, lo + span(sub, cs), size, op)
            ranges.append(rng)
            offs.append(rel)
        if spec.get("OVERFLOW"):
            ranges.append(rt.overflow_binding())
        count = 1
        for d in sub:
            count *= d
        values = dict(scalars, n=count, out_off=offs[-1], shape=sub)
        for x, o, (_, cs, _, _) in zip(inputs_of, offs, operands, strict=False):
            values[f"{x}_off"] = o
            values[f"{x}_strides"] = cs
        if strided_out:
            values["out_strides"] = operands[-1][1]
        rt.launch(pipe, values, ranges, rt.grid(ceil_div(count, EPT)))


def _contiguous_input(be, shape, inp, cstrides, cshape, limit):
    """`inp` copied contiguous when one row of it does not fit a binding and its dims are
    permuted (a transposed view), else `inp` itself."""
    st, strides, off, it = inp
    row = [1] + list(cshape[1:])
    moving = [s for d, s in zip(cshape, cstrides, strict=True) if d > 1 and s > 0]
    if span(row, cstrides) * it.size <= limit or moving == sorted(moving, reverse=True):
        return inp
    copy = be.copy_strided(st, Layout(shape, strides, off), it.dtype)
    return (copy, contiguous_strides(shape), 0, it)


def operand(storage, layout, t):
    return (storage, layout.strides, layout.offset, t)


def copy_into(be, dst, dst_layout, src, src_layout, dtype):
    t = be.runtime.type_of(dtype, "copy_into")
    if src.buf is dst.buf:
        # One buffer cannot be bound read-only and writable in a dispatch (WebGPU rejects
        # the whole batch), and overlapping views would race: copy src first, which also
        # gives numpy's semantics for overlapping assignment.
        src = be.copy_strided(src, src_layout, dtype)
        src_layout = Layout(src_layout.shape)
    spec = {"SX": t.storage, "SO": t.storage, "CONVERT": "x"}
    launch(
        be,
        "copy",
        t,
        spec,
        "copy_into",
        src_layout.shape,
        [operand(src, src_layout, t)],
        (dst, dst_layout.offset, t.size),
        out_strides=dst_layout.strides,
    )


def cast(be, storage, layout, src_dtype, dst_dtype):
    rt = be.runtime
    ts = rt.type_of(src_dtype, "cast")
    td = rt.type_of(dst_dtype, "cast")
    out = rt.alloc(layout.numel, dst_dtype, "cast")
    spec = {"SX": ts.storage, "SO": td.storage, "CONVERT": convert_expr(ts, td)}
    launch(
        be,
        "copy",
        ts,
        spec,
        "cast",
        layout.shape,
        [operand(storage, layout, ts)],
        (out, 0, td.size),
        out_strides=contiguous_strides(layout.shape),
    )
    if src_dtype is dst_dtype:
        out.known_range = storage.known_range
    return out


def unary(be, op, storage, layout, dtype, params=()):
    rt = be.runtime
    t = rt.type_of(dtype, op)
    row = UNARY[op]
    out = rt.alloc(layout.numel, dtype, op)
    bits = [param_bits(p, t, dtype, op, saturate=op == "clamp") for p in params] + [0, 0]
    expr = overflow.EXPR[op] if overflow.checked(op, dtype) else row.wgsl
    spec = {
        "S": t.storage,
        "OP": expr,
        "PARAM": t.param,
        "ROUND": t.round,
        **overflow.spec("unary", op, dtype),
    }
    launch(
        be,
        "unary",
        t,
        spec,
        op,
        layout.shape,
        [operand(storage, layout, t)],
        (out, 0, t.size),
        scalars={"p0": bits[0], "p1": bits[1]},
    )
    return out


def _binary_like(be, op, expr, result, so, a, la, b, lb, dtype, out_dtype):
    rt = be.runtime
    t = rt.type_of(dtype, op)
    out = rt.alloc(la.numel, out_dtype, op)
    ot = rt.type_of(out_dtype, op)
    if lb is None:
        load_b = f"T({t.param}(P_B))"
        scalar = param_bits(b, t, dtype, op)
        inputs = [operand(a, la, t), operand(a, la, t)]
    else:
        load_b = "T(B[strided(i, {{ND}}u, P_SHAPE, P_B_STRIDES, p(P_B_OFF))])"
        scalar = 0
        inputs = [operand(a, la, t), operand(b, lb, t)]
    spec = {
        "S": t.storage,
        "SO": so,
        "RESULT": result.replace("{{OP}}", expr),
        "LOAD_B": load_b,
        **overflow.spec("binary", op, out_dtype),
    }
    launch(be, "binary", t, spec, op, la.shape, inputs, (out, 0, ot.size), scalars={"b": scalar})
    return out


def binary(be, op, a, la, b, lb, dtype):
    t = be.runtime.type_of(dtype, op)
    expr = INT_DIV.wgsl if (op == "div" and dtype.is_int) else BINARY[op].wgsl
    if overflow.checked(op, dtype):
        expr = overflow.EXPR[op]
    return _binary_like(
        be, op, expr, f"{t.round}({{{{OP}}}})", t.storage, a, la, b, lb, dtype, dtype
    )


def compare(be, op, a, la, b, lb, dtype):
    result = "select(0u, 1u, {{OP}})"
    if dtype.is_float:
        # IEEE: every comparison with NaN is false except `!=` (tested on the bits).
        nan = "(nan_f(f32(a)) || nan_f(f32(b)))"
        result = (
            f"select(0u, 1u, ({{{{OP}}}}) || {nan})"
            if op == "ne"
            else f"select(0u, 1u, ({{{{OP}}}}) && !{nan})"
        )
    return _binary_like(be, op, COMPARE[op].wgsl, result, "u32", a, la, b, lb, dtype, dt.u8)


def where(be, cond, lc, a, la, b, lb, dtype):
    rt = be.runtime
    t = rt.type_of(dtype, "where")
    c_dtype = storage_dtype_of(cond)
    tc = rt.types.get(c_dtype) if c_dtype else rt.types["u8"]
    out = rt.alloc(la.numel, dtype, "where")
    spec = {"S": t.storage, "SC": tc.storage}
    launch(
        be,
        "where",
        t,
        spec,
        "where",
        la.shape,
        [(cond, lc.strides, lc.offset, tc), operand(a, la, t), operand(b, lb, t)],
        (out, 0, t.size),
    )
    return out
