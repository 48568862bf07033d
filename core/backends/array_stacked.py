"""Stacks of small matrix products (attention's per-head q @ k^T and weights @ v) on all
cores.

numpy's matmul over a stack calls BLAS once per matrix. A product below
blas_threads.SMALL_GEMM_MACS runs on one BLAS thread (waking the others costs more than
it saves), so a stack of them, however many, ran on one core: a SAM ViT-B windowed layer's
attention is 300 products of 196 x 64 x 196. numpy releases the GIL inside matmul, so
splitting the stack's leading dim over row_parallel's threads runs them on every core;
each product is still the same one-thread BLAS call, so the bits do not change.
"""

from .row_parallel import run_rows


def stacked_matmul(xp, x, w, out=None):
    """x @ w for stacks x [..., M, K] and w [..., K, N] of equal batch dims whose every
    product is small, or while BLAS is pinned to one thread (the caller pins it): the
    leading batch dim (after any of size 1) split over the threads. Into `out` (an array
    of the product's shape) when given."""
    if out is None:
        out = xp.empty(x.shape[:-1] + (w.shape[-1],), xp.result_type(x, w))
    xs, ws, outs = x, w, out
    while xs.ndim > 3 and xs.shape[0] == 1:
        xs, ws, outs = xs[0], ws[0], outs[0]

    def products(start, stop):
        xp.matmul(xs[start:stop], ws[start:stop], out=outs[start:stop])

    # run_rows weighs work in numpy elementwise steps; a BLAS multiply-add takes ~1/16 of one
    macs_per_entry = outs[0].size * x.shape[-1]
    run_rows(products, xs.shape[0], macs_per_entry // 16)
    return out
