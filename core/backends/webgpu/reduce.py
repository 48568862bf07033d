"""Reductions on WebGPU: sum, mean, prod, max, min, argmax, argmin over any set of dims.

One dispatch folds chunks of up to 65,536 reduced elements per output; longer reductions
add a pass over the chunks' partials (argmax/argmin: per-chunk extremes, the first chunk
holding the overall one, and that chunk's index), so no invocation loops past lavapipe's
cap of 65,535 iterations: a chunk of 2,048 or more is shared by 256 lanes (256 iterations
each), a shorter one by up to 64 or, on CPU adapters, folded by one invocation (at most
2,048 iterations, times the reduced dims that locating an element loops over: 22,528 for
10 dims, within loopcap.BUDGET).

A source that spans more than the adapter's maximum storage binding is split along its
dim of largest stride, recursively until every part fits:
- a kept dim: ranges of outputs, each binding only the part of the source it reads (a
  reduction over the last dim: ranges of rows);
- a reduced dim: pieces that reduce into partials (f32 for float types: no rounding in
  between), then one more reduction over the pieces. argmax/argmin pieces report global
  indices with their extremes; the first piece holding the overall extreme gives the
  index, so ties keep the lowest index as in numpy.
"""

import struct
from collections import namedtuple

from ... import dtype as dt
from ...errors import UnsupportedOp
from ...intmath import ceil_div
from ...layout import Layout
from ...shape import contiguous_strides
from . import overflow
from . import rows as row_kernels
from .index import gather
from .shapes import collapse, span

CHUNK = 1 << 16  # reduced elements per workgroup before a second pass

_COMBINE = {
    "sum": "*acc = *acc + v;",
    "mean": "*acc = *acc + v;",
    "prod": "*acc = *acc * v;",
    "max": "if (better_max(v, vi, *acc, *ai)) { *acc = v; *ai = vi; }",
    "min": "if (better_min(v, vi, *acc, *ai)) { *acc = v; *ai = vi; }",
    "argmax": "if (better_max(v, vi, *acc, *ai)) { *acc = v; *ai = vi; }",
    "argmin": "if (better_min(v, vi, *acc, *ai)) { *acc = v; *ai = vi; }",
}
_EXTREME = {"argmax": "max", "argmin": "min"}

# What one reduction computes: the fold, the device types it reads, folds in and writes,
# the element count a mean divides by, and whether the result is rounded to the dtype.
_Job = namedtuple("_Job", "op tin tcomp tout mean_count round_out")


def _prod(values):
    n = 1
    for v in values:
        n *= v
    return n


def reduce(be, op, storage, layout, dims, dtype):
    if op not in _COMBINE:
        raise UnsupportedOp(f"reduce: unknown op {op!r}", op=op)
    t = be.runtime.type_of(dtype, op)
    dims = sorted(dims)
    is_arg = op in _EXTREME
    out_dtype = dt.i64 if is_arg else dtype
    n_out = _prod(n for d, n in enumerate(layout.shape) if d not in dims)
    k_total = _prod(layout.shape[d] for d in dims)
    out = be.runtime.alloc(n_out, out_dtype, op)
    if n_out == 0:
        return out
    if is_arg:
        out.known_range = (0, max(k_total - 1, 0))  # no range check needed downstream
    job = _Job(op, t, t, be.runtime.type_of(out_dtype, op), k_total, True)
    _into(be, job, storage, layout, dims, out, 0, 0)
    return out


def _partial_type(be, t):
    return be.runtime.types["f32"] if t.compute == "f32" else t


def _into(be, job, src, layout, dims, dest, dest_off, base):
    """Reduce `layout` of `src` over `dims` into dest[dest_off:dest_off + outputs] (kept
    dims in row-major order); argmax/argmin indices are offset by `base`."""
    shape, strides = layout.shape, layout.strides
    kept = [d for d in range(layout.ndim) if d not in dims]
    n_out = _prod(shape[d] for d in kept)
    if n_out == 0:
        return
    limit = be.runtime.split_limit
    in_fits = span(shape, strides) * job.tin.size <= limit
    if in_fits and n_out * job.tout.size <= limit:
        _fitting(be, job, src, layout, dims, kept, dest, dest_off, base)
        return
    limit_elems = limit // job.tin.size
    if in_fits:  # only the output is too large: its outermost dim has its largest stride
        d = next(k for k in kept if shape[k] > 1)
        _split_kept(be, job, src, layout, dims, kept, d, dest, dest_off, base, limit_elems)
        return
    moving = [k for k in range(layout.ndim) if shape[k] > 1 and strides[k] > 0]
    d = max(moving, key=lambda k: strides[k])
    if d not in dims:
        _split_kept(be, job, src, layout, dims, kept, d, dest, dest_off, base, limit_elems)
        return
    one = list(shape)
    one[d] = 1
    kept_moving = [k for k in kept if k in moving]
    if span(one, strides) > limit_elems // 2 and kept_moving:
        # What one index of d reaches is over half a binding: split the kept dims first,
        # into parts that leave half a binding for d. Otherwise the partials of d's
        # pieces (one output row per piece) could be no smaller than the source.
        d = max(kept_moving, key=lambda k: strides[k])
        _split_kept(be, job, src, layout, dims, kept, d, dest, dest_off, base, limit_elems // 2)
        return
    _split_reduced(be, job, src, layout, dims, kept, d, dest, dest_off, base)


def _piece(layout, d, limit_elems):
    """How many indices of dim d one part takes so that the source fits (when the other
    dims alone do not fit, as many as d alone allows: those dims are split next)."""
    shape, strides = list(layout.shape), layout.strides
    if strides[d] == 0:
        return shape[d]
    shape[d] = 1
    rest = span(shape, strides)
    if rest <= limit_elems:
        return max(1, (limit_elems - rest) // strides[d] + 1)
    return max(1, limit_elems // strides[d])


def _progress(p, n):
    """A part smaller than the whole, so the recursion ends (a part as large as the whole
    cannot happen for views that do not overlap; still, never loop)."""
    return p if p < n else (n + 1) // 2


def _split_kept(be, job, src, layout, dims, kept, d, dest, dest_off, base, budget):
    """Ranges of kept dim d whose source parts span at most `budget` elements."""
    shape = layout.shape
    n = shape[d]
    ostride = _prod(shape[k] for k in kept if k > d)  # of d in the output
    p = _progress(
        min(_piece(layout, d, budget), max(1, be.runtime.split_limit // job.tout.size // ostride)),
        n,
    )
    # Output ranges are contiguous when no kept dim before d is longer than 1; otherwise
    # (a permuted source) each part is reduced apart and copied to its strided place.
    outer = all(shape[k] == 1 for k in kept if k < d)
    for a in range(0, n, p):
        sub = layout.narrow(d, a, min(p, n - a))
        at = dest_off + a * ostride
        if outer:
            _into(be, job, src, sub, dims, dest, at, base)
            continue
        kshape = [sub.shape[k] for k in kept]
        part = be.runtime.alloc(_prod(kshape), job.tout.dtype, job.op)
        _into(be, job, src, sub, dims, part, 0, base)
        view = Layout(kshape, contiguous_strides([shape[k] for k in kept]), at)
        be.copy_into(dest, view, part, Layout(kshape), job.tout.dtype)


def _split_reduced(be, job, src, layout, dims, kept, d, dest, dest_off, base):
    op = job.op
    n = layout.shape[d]
    p = _progress(_piece(layout, d, be.runtime.split_limit // job.tin.size), n)
    pieces = ceil_div(n, p)
    n_out = _prod(layout.shape[k] for k in kept)
    pt = _partial_type(be, job.tcomp)
    parts = [(i, a, layout.narrow(d, a, min(p, n - a))) for i, a in enumerate(range(0, n, p))]
    if op in _EXTREME:
        if d != dims[0]:
            raise UnsupportedOp(
                f"{op}: over several dims of a tensor larger than the "
                f"adapter's maximum storage binding ({be.runtime.max_binding} bytes); "
                f"reshape it to one dim first",
                op=op,
            )
        inner = _prod(layout.shape[k] for k in dims if k > d)
        values = be.runtime.alloc(n_out * pieces, pt.dtype, op)
        firsts = be.runtime.alloc(n_out * pieces, dt.i64, op)
        ti = be.runtime.type_of(dt.i64, op)
        for i, a, sub in parts:
            _into(
                be,
                job._replace(op=_EXTREME[op], tout=pt, round_out=False),
                src,
                sub,
                dims,
                values,
                i * n_out,
                0,
            )
            _into(be, job._replace(tout=ti), src, sub, dims, firsts, i * n_out, base + a * inner)
        _pick(be, op, values, firsts, Layout((n_out, pieces), (1, n_out)), pt, dest, dest_off)
        return
    partial = be.runtime.alloc(n_out * pieces, pt.dtype, op)
    first = job._replace(op={"mean": "sum"}.get(op, op), tout=pt, round_out=False)
    for i, _, sub in parts:
        _into(be, first, src, sub, dims, partial, i * n_out, 0)
    _into(be, job._replace(tin=pt), partial, Layout((pieces, n_out)), [0], dest, dest_off, 0)


def _pick(be, op, values, firsts, layout, pt, dest, dest_off):
    """argmax/argmin from parts: per output (dim 0 of `layout`), the index in `firsts` of
    the part (dim 1) whose extreme in `values` wins."""
    n_out, parts = layout.shape
    ti = be.runtime.type_of(dt.i64, op)
    best = be.runtime.alloc(n_out, dt.i64, op)
    _into(be, _Job(op, pt, pt, ti, parts, True), values, layout, [1], best, 0, 0)
    best.known_range = (0, parts - 1)
    gather(be, firsts, layout, best, Layout((n_out, 1)), 1, dt.i64, dest, dest_off)


def _fitting(be, job, src, layout, dims, kept, dest, dest_off, base):
    """A reduction whose source and output each fit one binding."""
    is_arg = job.op in _EXTREME
    kshape = [layout.shape[d] for d in kept]
    kstr = [layout.strides[d] for d in kept]
    rshape = [layout.shape[d] for d in dims]
    rstr = [layout.strides[d] for d in dims]
    n_out = _prod(kshape)
    k_total = _prod(rshape)
    kshape, (kstr,) = collapse(kshape, [kstr])
    if not is_arg:
        rshape, (rstr,) = collapse(rshape, [rstr])
    elif not rshape:
        rshape, rstr = [1], [0]
    source = (src, layout.offset, span(layout.shape, layout.strides))
    geometry = (kshape, kstr, rshape, rstr, k_total)
    if k_total <= CHUNK:
        _pass(be, job, source, geometry, 1, dest, dest_off, base)
        return
    chunks = ceil_div(k_total, CHUNK)
    pt = _partial_type(be, job.tcomp)
    if is_arg:
        # Per chunk: its extreme value and that value's first index; the first chunk
        # holding the overall extreme then gives the index (ties keep the lowest).
        values = be.runtime.alloc(n_out * chunks, pt.dtype, job.op)
        firsts = be.runtime.alloc(n_out * chunks, dt.i64, job.op)
        _pass(
            be,
            job._replace(op=_EXTREME[job.op], tout=pt, round_out=False),
            source,
            geometry,
            chunks,
            values,
            0,
            0,
        )
        _pass(
            be,
            job._replace(tout=be.runtime.type_of(dt.i64, job.op)),
            source,
            geometry,
            chunks,
            firsts,
            0,
            base,
        )
        _pick(be, job.op, values, firsts, Layout((n_out, chunks)), pt, dest, dest_off)
        return
    # Two passes: chunks of the reduced range into f32/int partials, then those.
    partial = be.runtime.alloc(n_out * chunks, pt.dtype, job.op)
    _pass(
        be,
        job._replace(op={"mean": "sum"}.get(job.op, job.op), tout=pt, round_out=False),
        source,
        geometry,
        chunks,
        partial,
        0,
        0,
    )
    _pass(
        be,
        job._replace(tin=pt),
        (partial, 0, n_out * chunks),
        ([n_out], [chunks], [chunks], [1], chunks),
        1,
        dest,
        dest_off,
        0,
    )


def _pass(be, job, source, geometry, chunks, out, out_off, base):
    """One reduce dispatch: outputs x chunks slots, each folding one chunk, written to
    out[out_off:]; argmax/argmin indices are offset by `base`."""
    op, tin, tcomp, tout = job.op, job.tin, job.tcomp, job.tout
    kshape, kstr, rshape, rstr, k_total = geometry
    n_out = _prod(kshape)
    init = {"sum": "T(0)", "mean": "T(0)", "prod": "T(1)"}.get(op, "first")
    rnd = tcomp.round if job.round_out else ""
    if op in _EXTREME:
        result = "i32(ai_final + p(P_INDEX_BASE))"
    elif op == "mean":
        result = f"{rnd}(acc_final * T(pf(P_SCALE)))"
    else:
        result = f"{rnd}(acc_final)"
    checked = overflow.checked(op, tcomp.dtype)
    chunk = ceil_div(k_total, chunks)
    wg, lanes = row_kernels.row_split(be.runtime, n_out * chunks, chunk, 1)
    spec = {
        "S": tin.storage,
        "SO": tout.storage,
        "NK": len(kshape),
        "NR": len(rshape),
        "COMBINE": overflow.EXPR[op] if checked else _COMBINE[op],
        "INIT": init,
        "RESULT": result,
        "WG": wg,
        "LANES": lanes,
        "ISNAN": "nan_f(f32(v))" if tcomp.compute == "f32" else "false",
        **overflow.spec("reduce", op, tcomp.dtype),
    }
    pipe = be.runtime.kernel("reduce", tcomp, spec, op)
    checks = [be.runtime.overflow_binding()] if checked else []
    st, off, extent = source
    rng, rel = be.runtime.bind(st, off, off + extent, tin.size, op)
    orng, orel = be.runtime.bind(out, out_off, out_off + n_out * chunks, tout.size, op)
    count = job.mean_count
    scale = struct.unpack("<I", struct.pack("<f", 1.0 / count if count else float("inf")))[0]
    params = {
        "slots": n_out * chunks,
        "k": k_total,
        "x_off": rel,
        "scale": scale,
        "chunk": chunk,
        "chunks": chunks,
        "out_off": orel,
        "index_base": base,
        "kept_shape": kshape,
        "kept_strides": kstr,
        "red_shape": rshape,
        "red_strides": rstr,
    }
    be.runtime.launch(
        pipe, params, [rng, orng] + checks, be.runtime.grid(n_out * chunks, wg // lanes)
    )
