"""cumsum on WebGPU: a scan of 4,096 elements per invocation (within the loop budget,
loopcap.py), then the scan of each row's chunk totals added to the chunks after them."""

from ...intmath import ceil_div
from ...layout import Layout
from ...shape import contiguous_strides
from . import overflow
from .rows import kept_dims
from .shapes import span

CHUNK = 4096  # prefix-sum elements per invocation before carries


def cumsum(be, storage, layout, dim, dtype):
    rt = be.runtime
    t = rt.type_of(dtype, "cumsum")
    out = rt.alloc(layout.numel, dtype, "cumsum")
    if layout.numel == 0:
        return out
    length = layout.shape[dim]
    kshape, kx, ko, os_ = kept_dims(layout, dim)
    rows = layout.numel // length
    chunks = ceil_div(length, CHUNK)
    checked = overflow.checked("cumsum", dtype)
    spec = {
        "S": t.storage,
        "ROUND": t.round,
        "NK": len(kshape),
        "WG": 64,
        "ADD": overflow.EXPR["cumsum"] if checked else "a + b",
        **overflow.spec("cumsum", "cumsum", dtype),
    }
    pipe = rt.kernel("cumsum", t, spec, "cumsum")
    rng, rel = rt.bind(
        storage, layout.offset, layout.offset + span(layout.shape, layout.strides), t.size, "cumsum"
    )
    orng, _ = rt.bind(out, 0, layout.numel, t.size, "cumsum")
    params = {
        "slots": rows * chunks,
        "n": length,
        "x_off": rel,
        "mode": 0,
        "x_stride": layout.strides[dim],
        "out_stride": os_,
        "chunk": CHUNK,
        "chunks": chunks,
        "kept_shape": kshape,
        "kept_x_strides": kx,
        "kept_out_strides": ko,
    }
    checks = [rt.overflow_binding()] if checked else []
    rt.launch(pipe, params, [rng, rng, orng] + checks, rt.grid(rows * chunks, 64))
    if chunks > 1:
        # Carries: the scan of each row's chunk totals (the last element of every chunk
        # but the final one), then added to the chunks after them.
        ostr = contiguous_strides(layout.shape)
        kept = [d for d in range(layout.ndim) if d != dim]
        totals = Layout(
            [layout.shape[d] for d in kept] + [chunks - 1],
            [ostr[d] for d in kept] + [CHUNK * os_],
            (CHUNK - 1) * os_,
        )
        carries = cumsum(be, out, totals, len(kept), dtype)
        crng, _ = rt.bind(carries, 0, rows * (chunks - 1), t.size, "cumsum")
        rt.launch(
            pipe, dict(params, mode=1), [crng, crng, orng] + checks, rt.grid(rows * chunks, 64)
        )
    return out
