"""The numpy backend's attention for a few queries against a short cache (a decode step):
one call of llvm_attention's compiled kernel for every head where it is built, else
array_attention's tile arithmetic on the whole, on the calling thread.

A decode step of SmolLM2-135M attends 30 times, each 3 kv heads x 3 query rows against
~150 keys: a few thousand scores. array_attention's machinery for large attention (tiles,
BLAS pinned to one thread and restored, the stack offered to row_parallel's threads, a
softmax through the backend's load/store) cost 0.42 ms CPU per call there against
0.09 ms for the three numpy calls alone, ~10 ms of a ~90 ms step. Below SMALL_SCORES
scores there is one tile, no stack is split and OpenBLAS runs such small products on one
thread anyway. The compiled kernel then takes the dozen numpy calls of that tile (3 x 3 x
160 x 64: 64 -> 46 us a call with its Python, on an AMD EPYC host); its sums are
another order than BLAS's, so its results differ from the tile's in the last bits, and
every path of a decode step (Backend.attention_step, the Tensor steps it fuses, the
contract's composite) comes here alike. Without llvmlite (or with EMBER_JIT=0) the tile
runs, with array_attention's bits on the same views.
"""

from . import llvm_attention
from .array_attention import batch_stride, tile
from .row_parallel import run_either, share_count

# Query rows per matrix (a decode step's grouped heads: 3 for SmolLM2, up to 8 in common
# GQA models) and scores in all (batch x queries x keys) up to which attention takes this
# path: SmolLM2's 3 x 3 queries stay under it up to a 7,281-token cache, and Whisper's
# first pass of a window (8 heads x 3 prompt tokens x 1,500 keys, over the limit at 2^15:
# 35 -> 23 ms a window's first pass, base, median of 8 interleaved); SAM's decoder (8
# heads x 7 tokens x 4,096 keys) stays on array_attention, whose threads pay there.
SMALL_QUERIES = 16
SMALL_SCORES = 1 << 16
# Multiply-adds from which a call's matrices are offered to llvm_spin's helpers: Whisper
# base's cross-attention (1.5M: 410 -> 295 us a layer) is, SmolLM2-135M's step (3 x 3
# queries x ~190 keys, 220k, ~25 us) is not: its helpers, idle between its attentions,
# slept or spun against the pool's thread, and decoding lost 3% (40.7-41.8 -> 39.3-40.2
# tokens/s, interleaved processes).
SPLIT_WORK = 1 << 20


def takes_step(n_heads, kv, tk, d):
    """Whether a decode step of one sequence (n_heads queries grouped over kv heads of d,
    against tk keys) comes here as one unsplit compiled call (llvm_attention's
    attend_step then does it all): small, and too little work for the helpers."""
    g = n_heads // kv
    small = g <= SMALL_QUERIES and n_heads * tk <= SMALL_SCORES
    return small and not (kv > 1 and kv * g * tk * 2 * d >= SPLIT_WORK)


def is_small(q, k):
    """Whether attention of q [..., Tq, D] over k [..., Tk, D] is small enough here."""
    return q.shape[-2] <= SMALL_QUERIES and q[..., 0].size * k.shape[-2] <= SMALL_SCORES


def attention(xp, q, k, v, scale, mask=None):
    """softmax((q * scale) @ k^T + mask) @ v for the f32 views q [..., Tq, D], k [..., Tk,
    D], v [..., Tk, Dv] (each matrix BLAS-ready) and mask None or a view [..., Tq, Tk]: a
    contiguous array [..., Tq, Dv]."""
    out = xp.empty(q.shape[:-1] + v.shape[-1:], q.dtype)
    if not _compiled(xp, q, k, v, scale, mask, out):
        tile(xp, q * scale, xp.swapaxes(k, -1, -2), v, out, mask=mask)
    return out


def _compiled(xp, q, k, v, scale, mask, out):
    """out through llvm_attention's kernel, in one call; False where it cannot take the
    operands (not numpy float32, a last dim not contiguous, batch dims that do not merge:
    a mask broadcast over heads) or left a row undone (a maximum score not finite)."""
    kernels = llvm_attention.kernels() if xp.__name__ == "numpy" else None
    if kernels is None or q.dtype != xp.float32 or out.size == 0:
        return False
    tq, tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    batch = q.shape[:-2]
    if (
        k.shape != batch + (tk, d)
        or v.shape[:-1] != batch + (tk,)
        or out.shape != batch + (tq, v.shape[-1])
        or (mask is not None and mask.shape != batch + (tq, tk))
    ):
        return False  # the kernel reads what the shapes say: only exact stacks go in
    operands = []
    for a in (q, k, v, mask, out):
        step = None if a is None else _matrix_stride(a)
        if a is not None and step is None:
            return False
        operands.append(None if a is None else (a, step, a.strides[-2] // 4))
    m, dv = q.size // (tq * d), v.shape[-1]
    work = tq * tk * (d + dv)
    helpers = kernels.helpers(share_count(m, work)) if m > 1 and m * work >= SPLIT_WORK else None
    if helpers is None:
        scratch = xp.empty(2 * tk + d, xp.float32)
        return kernels.attend(operands, m, tq, tk, d, dv, scale, scratch) == 0
    # the matrices shared with llvm_spin's helpers while that times faster (Whisper base's
    # cross-attention, 8 heads x 1500 keys, 6 MB of keys and values a layer)
    undone = []

    def shared():
        scratch = xp.empty(m * (2 * tk + d), xp.float32)
        left, helped = kernels.attend_split(operands, m, tq, tk, d, dv, scale, scratch, helpers)
        undone.append(left)
        return helped

    def alone():
        scratch = xp.empty(2 * tk + d, xp.float32)
        undone.append(kernels.attend(operands, m, tq, tk, d, dv, scale, scratch))

    run_either(_compiled.__code__, m * work, shared, alone)
    return undone[0] == 0


def _matrix_stride(a):
    """The stride in f32 elements from one matrix of a [..., R, C] to the next, its batch
    dims as one (dims of size 1 aside), its last dim contiguous, strides not negative;
    None where they do not merge so."""
    if a.ndim < 2 or (a.shape[-1] > 1 and a.strides[-1] != 4) or min(a.strides) < 0:
        return None
    step = batch_stride(a)
    return None if step is None else step // 4
