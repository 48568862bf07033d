"""The numpy backend's attention without causal hiding (Whisper's encoder, a ViT's, SAM's
decoder's, and a language model's prompt under its additive mask): scaled q, the
products, the mask and then the grid bias added (row bias first), and an unshifted
softmax with softmax_last_dim's safeguard, in tiles of about
FUSED_TILE_ELEMENTS scores, each tile taken start to end (its scores, their
exponentials, the product with v) by one thread with BLAS on one thread, the tiles
shared out over row_parallel's threads. Results agree with the composite's to a few
units in the last place: each row's sum divides the row's output instead of its weights.
A mask broadcast over heads is read tile by tile (MaskTiles), never widened whole: a
SmolLM2 prompt's attention (9 heads x 128 x 128 under one causal mask) took 0.56 ms here
against 0.66 through the composite. Where llvm_math's kernels are built, a tile's
exponentials and row sums are one compiled pass (0.56 against 1.49 ns a score for
numpy's exp and sum on an AVX2 host); they round otherwise than numpy's, within 1e-7.
Attention of many queries without a grid bias (Whisper's encoder; a language model's
prompt, under its mask) goes to array_attention_rows' compiled kernel instead where it
is built (its note says why).

Why tiles a thread runs start to end: a tile's scores are still in that core's cache
when its exponentials and its second product read them. The earlier form ran each step
on every core over tiles of 4M scores (16 MiB, composites.CPU_ATTENTION_TILE_ELEMENTS),
so the scores went to memory and back several times. Measured in one process, 2 cores,
a layer's attention, earlier form -> this one: Whisper tiny's encoder (6 heads x 1500 x
1500) 38-53 -> 24-26 ms, base's (8 heads) 47-49 -> 36 ms, a SAM ViT-B windowed layer
(25 windows x 12 heads x 196 x 196, grid bias) 50 -> 36 ms, a global one (12 x 4096 x
4096) 800-920 -> 540-610 ms. Small matrices go several to a tile, as a stack, so the
calls per tile stay few.

Each call pins BLAS to one thread for its whole duration (one_thread_throughout): on a
busy machine a two-thread BLAS call waits for both of its threads to get a core (a SAM
ViT-B global layer took 28-30 s at load ~7 that way).
"""

import itertools
import math

from ..intmath import ceil_div
from . import array_attention_rows, llvm_math
from .array_rows import SHIFT_FLOOR, softmax_rows
from .blas_threads import one_thread_throughout
from .row_parallel import run_rows, workers

# Scores per tile (2 MiB of f32, in a core's share of the cache; 2^17-2^20 measured
# within 10% of each other on Whisper's and SAM's shapes).
FUSED_TILE_ELEMENTS = 1 << 19
# Multiply-adds of a call from which its matrices are spread over the threads
SPREAD_MACS = 1 << 20


def attention(be, q, k, v, grid_bias, scale, dtype, mask=None):
    """softmax((q * scale) @ k^T + mask + grid bias) @ v (see
    Backend.scaled_dot_product_attention) for the f32 array views q [..., Tq, D], k [...,
    Tk, D], v [..., Tk, Dv] of equal batch dims, each matrix BLAS-ready, mask None or a
    view [..., Tq, Tk] (broadcast dims of stride 0 are fine: each tile takes only its own
    part), and grid_bias None or the views (rows [..., Tq, Kh], cols [..., Tq, Kw]).
    Returns the output, a contiguous array [..., Tq, Dv]."""
    xp = be.xp
    batch, tq, tk, dv = q.shape[:-2], q.shape[-2], k.shape[-2], v.shape[-1]
    out = xp.empty(batch + (tq, dv), q.dtype)
    if out.size == 0:
        return out
    if grid_bias is None and _rows_kernel(xp, q, k, v, out, scale, mask):
        return out
    # every operand as a stack of matrices [m, ., .] (a copy only where a view's batch
    # dims cannot merge, or a grid bias broadcast over heads: the size of an input)
    qs = (q * scale).reshape(-1, tq, q.shape[-1])
    kt = xp.swapaxes(k.reshape(-1, tk, k.shape[-1]), -1, -2)
    vs = v.reshape(-1, tk, dv)
    out3 = out.reshape(-1, tq, dv)
    bias = None
    if grid_bias is not None:
        rows, cols = (
            xp.broadcast_to(g, batch + (tq, g.shape[-1])).reshape(-1, tq, g.shape[-1])
            for g in grid_bias
        )
        bias = (rows, cols)
    # matrices big enough to pay a hand-off go in a tile per thread at least (a decode
    # step's cross-attention: 8 heads x 1 query x 1500 keys, 6 MB of keys and values,
    # fits one tile's budget and ran on one core)
    spread = workers(blas_free=True) if qs.shape[0] * tk * (q.shape[-1] + dv) >= SPREAD_MACS else 1
    tiles = fused_tiles(qs.shape[0], tq, tk, FUSED_TILE_ELEMENTS, spread)

    masks = None if mask is None else MaskTiles(xp, mask)

    def run(start, stop):
        for m0, m1, q0, q1 in tiles[start:stop]:
            part = None if bias is None else tuple(g[m0:m1, q0:q1] for g in bias)
            added = None if masks is None else masks.part(m0, m1, q0, q1)
            tile(xp, qs[m0:m1, q0:q1], kt[m0:m1], vs[m0:m1], out3[m0:m1, q0:q1], part, added)

    # run_rows weighs work in numpy elementwise steps: a tile's are its scores' few passes
    # plus its products (a BLAS multiply-add is ~1/16 of a step)
    per_tile = min(tq * tk * qs.shape[0], FUSED_TILE_ELEMENTS) * (4 + (q.shape[-1] + dv) // 16)
    with one_thread_throughout():
        run_rows(run, len(tiles), per_tile, blas_free=True)
    return out


def _rows_kernel(xp, q, k, v, out, scale, mask=None):
    """The attention (under `mask` where given) through array_attention_rows' compiled
    kernel; False where it does not take it (nothing written). Rows it leaves go through
    a tile, whose checks take them."""

    def redo(q, k, v, out, mask):
        tile(xp, q * scale, xp.swapaxes(k, -1, -2), v, out, mask=mask)

    return array_attention_rows.attend(xp, q, k, v, out, scale, redo, mask)


def tile(xp, qs, kt, v, out, bias=None, mask=None):
    """out [m, n, Dv] = softmax(qs @ kt + mask + bias) @ v for the stacks qs [m, n, D] (q
    already scaled), kt [m, D, Tk], v [m, Tk, Dv], mask None or [m, n, Tk], on the calling
    thread. The exponentials are
    taken in place and each row's sum divides its output row, not its Tk weights (a pass
    over n x Dv values instead of n x Tk). Unshifted, as softmax_last_dim: a row whose sum
    overflows, is not finite or falls under its floor has its scores computed again and
    is softmaxed shifted by its own maximum (array_rows.softmax_rows)."""
    scores = scores_of(xp, qs, kt, bias, mask)
    flat = scores.reshape(-1, scores.shape[-1])
    kernels = llvm_math.for_array(xp, flat)
    if kernels is not None:  # the exponentials and their sums in one compiled pass
        total = xp.empty(flat.shape[0], flat.dtype)
        kernels.exp_rows(flat, total)
    else:
        with xp.errstate(over="ignore", under="ignore", invalid="ignore"):  # rows redone
            xp.exp(flat, out=flat)
            total = xp.sum(flat, axis=-1)
    redo = ~(total >= SHIFT_FLOOR) | ~xp.isfinite(total)
    if redo.any():
        rows = xp.nonzero(redo)[0]
        again = scores_of(xp, qs, kt, bias, mask).reshape(flat.shape)[rows]
        part = xp.empty_like(again)
        with xp.errstate(all="ignore"):  # as softmax_last_dim's blocks run
            softmax_rows(xp, again, part)
        flat[rows] = part
        total[rows] = 1.0
    xp.matmul(scores, v, out=out)
    out /= total.reshape(out.shape[:-1] + (1,))


def scores_of(xp, qs, kt, bias, mask=None):
    """qs @ kt [m, n, Tk], plus the mask [m, n, Tk] and then the grid bias (rows [m, n,
    Kh], cols [m, n, Kw]) where given: the composite's order."""
    scores = xp.matmul(qs, kt)
    if mask is not None:
        scores += mask
    if bias is not None:
        add_grid_bias(scores, *bias)
    return scores


class MaskTiles:
    """A mask view [..., Tq, Tk] (its batch dims broadcast, often with stride 0: one
    causal mask for every head) read as a stack [m, Tq, Tk] tile by tile: a view where
    its batch dims merge into one, else each tile's own rows gathered (a copy the size of
    the tile's scores, never the whole broadcast mask)."""

    def __init__(self, xp, mask):
        self.xp, self.mask = xp, mask
        self.batch = mask.shape[:-2]
        self.merged = _merged_batch(xp, mask)

    def part(self, m0, m1, q0, q1):
        if self.merged is not None:
            return self.merged[m0:m1, q0:q1]
        xp = self.xp
        index = xp.unravel_index(xp.arange(m0, m1), self.batch)
        return self.mask[..., q0:q1, :][index]


def _merged_batch(xp, a):
    """a [..., R, C] as a view [prod(batch), R, C], or None where its batch dims cannot
    merge without a copy."""
    step = batch_stride(a)
    if step is None:
        return None
    shape = (math.prod(a.shape[:-2]),) + a.shape[-2:]
    return xp.lib.stride_tricks.as_strided(a, shape, (step,) + a.strides[-2:])


def batch_stride(a):
    """The stride in bytes from one matrix of a [..., R, C] to the next, its batch dims
    merged into one (dims of size 1 never stand in the way; 0 without batch dims), or
    None where they cannot merge without a copy."""
    kept = [(n, st) for n, st in zip(a.shape[:-2], a.strides[:-2], strict=True) if n != 1]
    for (_, outer), (n, inner) in itertools.pairwise(kept):
        if outer != inner * n:
            return None
    return kept[-1][1] if kept else 0


def fused_tiles(m, tq, tk, budget, spread=1):
    """[(m0, m1, q0, q1)]: tiles of about `budget` scores over m matrices of tq x tk
    scores, matrices m0:m1 by query rows q0:q1: several whole matrices to a tile where
    they fit (in at least `spread` tiles where there are the matrices), else one
    matrix's rows in near-equal runs. Each matrix's products and exponentials are its
    own, so no tiling changes a bit."""
    per_matrix = tq * tk
    if per_matrix <= budget:
        step = max(1, min(budget // per_matrix, ceil_div(m, spread)))
        return [(m0, min(m0 + step, m), 0, tq) for m0 in range(0, m, step)]
    n_runs = ceil_div(per_matrix, budget)
    rows = ceil_div(tq, n_runs)
    return [(i, i + 1, q0, min(q0 + rows, tq)) for i in range(m) for q0 in range(0, tq, rows)]


def add_grid_bias(scores, rows, cols):
    """scores [m, n, Kh * Kw] += rows [m, n, Kh] (over each key row) + cols [m, n, Kw]
    (over each key column), in place, in that order (the composite's two additions)."""
    kh, kw = rows.shape[-1], cols.shape[-1]
    grid = scores.reshape(scores.shape[:-1] + (kh, kw))
    grid += rows[..., None]
    grid += cols[..., None, :]
