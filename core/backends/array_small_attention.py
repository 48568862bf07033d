"""The numpy backend's attention for a few queries against a short cache (a decode step):
array_attention's tile arithmetic on the whole, on the calling thread.

A decode step of SmolLM2-135M attends 30 times, each 3 kv heads x 3 query rows against
~150 keys: a few thousand scores. array_attention's machinery for large attention (tiles,
BLAS pinned to one thread and restored, the stack offered to row_parallel's threads, a
softmax through the backend's load/store) cost 0.42 ms CPU per call there against
0.09 ms for the three numpy calls alone, ~10 ms of a ~90 ms step. Below SMALL_SCORES
scores there is one tile, no stack is split and OpenBLAS runs such small products on one
thread anyway, so these are the same calls on the same operands as array_attention's
one tile: the same bits.
"""

from .array_attention import tile

# Query rows per matrix (a decode step's grouped heads: 3 for SmolLM2, up to 8 in common
# GQA models) and scores in all (batch x queries x keys) up to which attention takes this
# path: SmolLM2's 3 x 3 queries stay under it up to a 3,640-token cache; SAM's decoder
# (8 heads x 7 tokens x 4,096 keys) stays on array_attention, whose threads pay there.
SMALL_QUERIES = 16
SMALL_SCORES = 1 << 15


def is_small(q, k):
    """Whether attention of q [..., Tq, D] over k [..., Tk, D] is small enough here."""
    return q.shape[-2] <= SMALL_QUERIES and q[..., 0].size * k.shape[-2] <= SMALL_SCORES


def attention(xp, q, k, v, scale, mask=None):
    """softmax((q * scale) @ k^T + mask) @ v for the f32 views q [..., Tq, D], k [..., Tk,
    D], v [..., Tk, Dv] (each matrix BLAS-ready) and mask None or a view [..., Tq, Tk]: a
    contiguous array [..., Tq, Dv]."""
    out = xp.empty(q.shape[:-1] + v.shape[-1:], q.dtype)
    tile(xp, q * scale, xp.swapaxes(k, -1, -2), v, out, mask=mask)
    return out
