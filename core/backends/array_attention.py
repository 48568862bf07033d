"""The numpy backend's attention without a mask or causal hiding (a ViT's, SAM's
decoder's), computed as the composite computes it (scaled q, the products, the grid bias
added row bias first, be.softmax) with no multi-threaded BLAS call and every step on all
cores; the products' bits may differ from the composite's in the last place, as BLAS on
one thread and on two may.

The composite multiplies a SAM ViT-B global tile (12 heads x 85 queries x 4096 keys) as
12 products of about 22M multiply-adds, each a two-thread BLAS call that repacks its
64 x 4096 keys: on a busy machine each call waits for both of its threads to get a core,
and one global layer's attention took 28-30 s at load ~7. Here the contract's tiles go
one by one as in the composite, but each product of a tile's stack runs on one BLAS
thread, the stack split over row_parallel's threads (array_stacked), so no call waits for
a second core, and the grid bias is added in place, a cache-sized block at a time on
every core, instead of into two fresh arrays as big as the scores on one: 5-6 s,
interleaved with the composite on the same inputs in one process at that load.
(Blocks of 256 queries of one head, each run start to end on one thread, the blocks
shared out by row_parallel.map_tasks, measured 2-3x slower than these tiles.)
"""

from ..layout import Layout
from . import composites
from .array_stacked import stacked_matmul
from .blas_threads import one_thread_throughout
from .row_parallel import run_rows

# Scores per block of the in-place grid-bias addition (256 KiB of f32, in a core's cache).
BIAS_BLOCK = 1 << 16


def attention(be, q, k, v, grid_bias, scale, dtype):
    """softmax((q * scale) @ k^T + grid bias) @ v (see Backend.scaled_dot_product_attention)
    for the f32 array views q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] of equal batch
    dims, each matrix BLAS-ready, and grid_bias None or the views (rows [..., Tq, Kh],
    cols [..., Tq, Kw]). Returns the output, a contiguous array [..., Tq, Dv]. The tiles
    are the composite's (composites.attention_tiles), the softmax be.softmax on each."""
    xp = be.xp
    batch, tq, tk = q.shape[:-2], q.shape[-2], k.shape[-2]
    out = xp.empty(batch + (tq, v.shape[-1]), q.dtype)
    if out.size == 0:
        return out
    kt = xp.swapaxes(k, -1, -2)
    with one_thread_throughout():
        for b0, nb, q0, n in composites.attention_tiles(batch, tq, tk, be.attention_tile_elements):
            lead = (slice(b0, b0 + nb),) if batch else ()
            rows = lead + (slice(None),) * max(0, len(batch) - 1) + (slice(q0, q0 + n),)
            shape = out[rows].shape[:-1] + (tk,)
            scores = xp.empty(shape, q.dtype)
            # q scaled before the product, as the composite does (n x D, not n x Tk)
            product(xp, q[rows] * scale, kt[lead], scores)
            if grid_bias is not None:
                add_grid_bias(xp, scores, grid_bias[0][rows], grid_bias[1][rows])
            weights = be.softmax(scores.reshape(-1), Layout(shape), len(shape) - 1, dtype)
            product(xp, weights.reshape(shape), v[lead], out[rows])
    return out


def product(xp, x, w, out):
    """x @ w into out with BLAS on one thread: a stack's products split over the threads,
    a lone product's rows."""
    while x.ndim > 2 and x.shape[0] == 1:
        x, w, out = x[0], w[0], out[0]
    if x.ndim > 2:
        stacked_matmul(xp, x, w, out=out)
        return

    def rows(start, stop):
        xp.matmul(x[start:stop], w, out=out[start:stop])

    # run_rows weighs work in numpy elementwise steps; a BLAS multiply-add takes ~1/16 of one
    run_rows(rows, x.shape[0], x.shape[1] * w.shape[1] // 16, take_back=True)


def add_grid_bias(xp, scores, rows, cols):
    """scores [..., n, Kh * Kw] += rows [..., n, Kh] (over each key row) + cols [..., n, Kw]
    (over each key column), in place, in that order (the composite's two additions), a
    block of query rows at a time on every core."""
    kh, kw = rows.shape[-1], cols.shape[-1]
    lead = scores.shape[:-1]
    grid = scores.reshape(-1, kh, kw)
    r = xp.broadcast_to(rows, lead + (kh,)).reshape(-1, kh, 1)  # a copy only if broadcast
    c = xp.broadcast_to(cols, lead + (kw,)).reshape(-1, 1, kw)
    step = max(1, BIAS_BLOCK // (kh * kw))

    def blocks(start, stop):
        for s in range(start, stop, step):
            e = min(s + step, stop)
            block = grid[s:e]
            block += r[s:e]
            block += c[s:e]

    run_rows(blocks, grid.shape[0], kh * kw)
