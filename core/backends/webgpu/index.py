"""Index ops on WebGPU: index_select, gather, scatter_add, and the id check before them.

index_select and gather split operands larger than the adapter's maximum storage binding:
the output, with the ids and the source rows it reads, into row-major boxes (split.py);
a source too large to bind whole (an LLM's embedding table: 128k x 4096 f32 is 2 GiB)
into ranges along the indexed dim, each dispatch writing only the outputs whose id falls
in its range. Ranges outside the ids' known (min, max) are skipped. scatter_add binds its
operands whole; each output element scans the ids along dim, so long ids run in pieces
along dim, each adding into the previous piece's result, keeping every invocation's loop
under lavapipe's cap (loopcap.py).
"""

import struct

from ... import dtype as dt
from ...errors import DimOutOfRange, UnsupportedOp, fmt_shape
from ...intmath import ceil_div
from ...layout import Layout
from ...shape import contiguous_strides
from . import loopcap, split
from .shapes import span

_WG = 256
_MAX_RANGES = 4096  # source ranges per output box before the split is not worth it


def storage_dtype_of(storage):
    return getattr(storage, "dtype_name", None)


def _unpack_one(data, dtype):
    code = {"i64": "<q", "i32": "<i", "u32": "<I", "u8": "<B"}[dtype.name]
    return struct.unpack(code, data[: struct.calcsize(code)])[0]


def check_ids(be, ids, lids, size, op, dim):
    """Reject out-of-range ids before a gather reads with them; returns their (min, max)
    (None when there are none). Ids uploaded from the host carry their range; others are
    reduced to (min, max) on the device and only those two numbers are read back."""
    if lids.numel == 0:
        return None
    lo_hi = ids.known_range
    if lo_hi is None or lo_hi[0] < 0 or lo_hi[1] >= size:
        id_dtype = dt.from_name(storage_dtype_of(ids) or "i64")
        dims = list(range(lids.ndim))
        one = Layout(())
        lo_hi = tuple(
            _unpack_one(
                be.to_bytes(be.reduce(r, ids, lids, dims, id_dtype), one, id_dtype), id_dtype
            )
            for r in ("min", "max")
        )
        if lids.offset == 0 and lids.numel == ids.numel and lids.is_contiguous():
            ids.known_range = lo_hi
    if lo_hi[0] < 0 or lo_hi[1] >= size:
        bad = lo_hi[0] if lo_hi[0] < 0 else lo_hi[1]
        raise DimOutOfRange(
            f"{op}: index {bad} out of range for dim {dim} of size {size}",
            op=op,
            index=bad,
            size=size,
        )
    return lo_hi


def _ids_type(be, ids):
    name = storage_dtype_of(ids)
    return be.runtime.types[name] if name else be.runtime.types["i64"]


def index_select(be, storage, layout, ids, lids, dim, dtype):
    op = "index_select"
    t = be.runtime.type_of(dtype, op)
    lo_hi = check_ids(be, ids, lids, layout.shape[dim], op, dim)
    shape = list(layout.shape)
    shape[dim] = lids.numel
    n = 1
    for d in shape:
        n *= d
    out = be.runtime.alloc(n, dtype, op)
    if n == 0:
        return out
    istride = lids.strides[0] if lids.ndim else 0
    istrides = [istride if d == dim else 0 for d in range(len(shape))]
    _launch(
        be,
        "index_select",
        op,
        t,
        shape,
        dim,
        storage,
        layout,
        ids,
        lids.offset,
        istrides,
        out,
        0,
        lo_hi,
    )
    return out


def gather(be, storage, layout, ids, lids, dim, dtype, dest=None, dest_off=0):
    """torch.gather into a new tensor, or into dest[dest_off:] (argmax's last step)."""
    op = "gather"
    t = be.runtime.type_of(dtype, op)
    lo_hi = check_ids(be, ids, lids, layout.shape[dim], op, dim)
    n = lids.numel
    out = be.runtime.alloc(n, dtype, op) if dest is None else dest
    if n == 0:
        return out
    _launch(
        be,
        "gather",
        op,
        t,
        list(lids.shape),
        dim,
        storage,
        layout,
        ids,
        lids.offset,
        list(lids.strides),
        out,
        dest_off,
        lo_hi,
    )
    return out


def _launch(be, kernel, op, t, shape, dim, src, layout, ids, ioff, istrides, out, out_off, lo_hi):
    """Dispatch index_select / gather over `shape` (the output's), split so that every
    binding fits: boxes of the output, and ranges [lo, hi) of the source's dim `dim`."""
    ti = _ids_type(be, ids)
    limit = be.runtime.split_limit
    size = layout.shape[dim]
    xs = layout.strides[dim]
    # The source's strides over the output's space: along `dim` the position is an id.
    xbox = [0 if d == dim else s for d, s in enumerate(layout.strides)]
    ostr = contiguous_strides(shape)
    fixed = [(ostr, 1, t.size), (istrides, 1, ti.size)]
    whole = (size - 1) * xs + 1
    plan = split.row_plan(shape, fixed + [(xbox, whole, t.size)], limit)
    if plan is None:
        # Boxes whose own source part takes at most half a binding; the rest of each
        # binding holds as many rows of the source as fit.
        plan = split.row_plan(shape, fixed + [(xbox, 1, t.size)], limit // 2)
    lo, hi = (0, size - 1) if lo_hi is None else lo_hi
    nd = len(shape)
    spec = {"S": t.storage, "SI": ti.storage, "ND": nd, "DIM": dim, "WG": _WG}
    pipe = be.runtime.kernel(kernel, t, spec, op)
    for starts, sub in split.row_boxes(shape, *plan):
        count = 1
        for d in sub:
            count *= d
        own = span(sub, xbox)
        rows = max(1, (limit // t.size - own) // xs + 1) if xs else size
        if ceil_div(hi - lo + 1, rows) > _MAX_RANGES:
            one = list(layout.shape)
            one[dim] = 1
            raise UnsupportedOp(
                f"{op}: the source of shape {fmt_shape(layout.shape)} has rows of "
                f"{span(one, layout.strides) * t.size} bytes along dim {dim}; under the "
                f"adapter's maximum storage binding of {be.runtime.max_binding} bytes it would be "
                f"read in more than {_MAX_RANGES} ranges",
                op=op,
            )
        irng, irel = be.runtime.bind(
            ids,
            ioff + split.offset_of(starts, istrides),
            ioff + split.offset_of(starts, istrides) + span(sub, istrides),
            ti.size,
            op,
        )
        o0 = out_off + split.offset_of(starts, ostr)
        orng, orel = be.runtime.bind(out, o0, o0 + count, t.size, op)
        base = layout.offset + split.offset_of(starts, xbox)
        for r0 in range(0 if rows >= size else lo, hi + 1 if rows < size else 1, rows):
            r1 = min(size, r0 + rows)
            x0 = base + r0 * xs
            rng, rel = be.runtime.bind(src, x0, x0 + own + (r1 - r0 - 1) * xs, t.size, op)
            params = {
                "n": count,
                "size": size,
                "ids_off": irel,
                "x_off": rel,
                "lo": r0,
                "hi": r1,
                "out_off": orel,
                "x_strides": layout.strides,
            }
            if kernel == "index_select":
                params.update(ids_stride=istrides[dim], out_shape=sub)
            else:
                params.update(ids_shape=sub, ids_strides=istrides)
            be.runtime.launch(pipe, params, [rng, irng, orng], be.runtime.grid(count))


def scatter_add(be, dst, ldst, ids, lids, src, lsrc, dim, dtype):
    op = "scatter_add"
    be.runtime.type_of(dtype, op)  # an unsupported dtype fails before the ids are checked
    check_ids(be, ids, lids, ldst.shape[dim], op, dim)
    n = ldst.numel
    if n == 0:
        return be.runtime.alloc(n, dtype, op)
    m = lids.shape[dim]
    # The kernel's loops: the ids along dim, then two over the dims (strided(), coords).
    piece = max(1, loopcap.BUDGET - 2 * ldst.ndim)
    if m <= piece:
        return _scatter_add(be, dst, ldst, ids, lids, src, lsrc, dim, dtype)
    acc, lacc = dst, ldst
    for a in range(0, m, piece):
        k = min(piece, m - a)
        acc = _scatter_add(
            be, acc, lacc, ids, lids.narrow(dim, a, k), src, lsrc.narrow(dim, a, k), dim, dtype
        )
        lacc = Layout(ldst.shape)
    return acc


def _scatter_add(be, dst, ldst, ids, lids, src, lsrc, dim, dtype):
    """One dispatch: dst plus src at ids (already checked), into a new contiguous tensor."""
    op = "scatter_add"
    t = be.runtime.type_of(dtype, op)
    n = ldst.numel
    out = be.runtime.alloc(n, dtype, op)
    ti = _ids_type(be, ids)
    nd = ldst.ndim
    spec = {"S": t.storage, "SI": ti.storage, "ROUND": t.round, "ND": nd, "DIM": dim, "WG": _WG}
    pipe = be.runtime.kernel("scatter_add", t, spec, op)
    drng, drel = be.runtime.bind(
        dst, ldst.offset, ldst.offset + span(ldst.shape, ldst.strides), t.size, op
    )
    irng, irel = be.runtime.bind(
        ids, lids.offset, lids.offset + span(lids.shape, lids.strides), ti.size, op
    )
    srng, srel = be.runtime.bind(
        src, lsrc.offset, lsrc.offset + span(lsrc.shape, lsrc.strides), t.size, op
    )
    orng, _ = be.runtime.bind(out, 0, n, t.size, op)
    if 5 + 5 * nd > 64:
        raise UnsupportedOp(f"{op}: too many dims ({nd}) for the WebGPU kernel", op=op)
    params = {
        "n": n,
        "ids_len": lids.shape[dim],
        "ids_off": irel,
        "src_off": srel,
        "dst_off": drel,
        "dst_shape": ldst.shape,
        "dst_strides": ldst.strides,
        "ids_shape": lids.shape,
        "ids_strides": lids.strides,
        "src_strides": lsrc.strides,
    }
    be.runtime.launch(pipe, params, [drng, irng, srng, orng], be.runtime.grid(n))
    return out
