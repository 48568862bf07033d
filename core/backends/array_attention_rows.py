"""array_attention's attention of many queries (under an additive mask or none) through
llvm_attention_rows' compiled kernel: each matrix's query rows in runs of whole query
blocks, the runs taken in turn by the caller and llvm_spin's helpers in compiled code
(the kernels' team function, x86-64; elsewhere over row_parallel's threads, each run one
call from Python). A mask goes in transposed, one copy for all heads where it is
broadcast over them (a causal mask), so that the kernel adds it down its query lanes.
SmolLM2-135M's 128-token prompt (9 heads x 128 x 128 under one causal mask, 3 kv heads):
the BLAS tiles 0.78 ms a layer in isolation, the kernel through row_parallel 0.87, its
team 0.47; in the prompt the attention went 40-45 -> 23 ms of 30 layers.

Whisper base's encoder layer (8 heads x 1,500 x 1,500, head dim 64), 2 threads on an
Intel Xeon (AVX-512): the BLAS tiles' 300 query rows in 1.49 ms against 1.27 here, one
thread each, interleaved. Runs are whole query blocks, so a row's bits never depend on
how the rows were shared; a run the kernel leaves rows of (a maximum score that is not
finite) goes through the BLAS tile instead, whose checks treat such rows.
"""

import threading

from ..intmath import ceil_div
from . import llvm_attention_rows, llvm_spin
from .addresses import address
from .blas_threads import one_thread_throughout
from .row_parallel import run_rows, share_count, workers

# Fewer queries than a block's worth leave most of its lanes idle (a decode step's
# cross-attention, 1 query a head): those keep the BLAS tiles
MIN_QUERIES = 16
# Runs a thread, at least: a late or slowed thread then leaves a short run to the rest
RUNS_PER_THREAD = 8

_local = threading.local()  # each thread's scratch, kept between calls (~0.2 MB)


def attend(xp, q, k, v, out, scale, redo, mask=None):
    """out = softmax(q * scale @ k^T + mask) @ v for the f32 arrays q [..., tq, d], k [...,
    tk, d], v [..., tk, dv], out [..., tq, dv] of equal batch dims (numpy, rows
    contiguous) and the additive mask (None, or a view [..., tq, tk] of those batch dims,
    broadcast ones of stride 0), through the compiled kernel, each matrix as its own
    stack [m, ., .]; True, or False (nothing written, nothing copied) where it is not
    built or does not take these. `redo(q, k, v, out, mask)` computes the stacks' slices
    [1, rows, .] (mask's [1, rows, tk] or None) of a run the kernel left rows of another
    way."""
    kernels = llvm_attention_rows.kernels() if getattr(xp, "__name__", "") == "numpy" else None
    tq, d = q.shape[-2:]
    tk, dv = v.shape[-2:]
    if kernels is None or tq < MIN_QUERIES or tk == 0 or not kernels.takes(dv):
        return False
    if any(a.dtype != xp.float32 or a.strides[-1] != 4 for a in (q, k, v, out)):
        return False
    q, k, v = (a.reshape(-1, a.shape[-2], a.shape[-1]) for a in (q, k, v))
    out = out.reshape(-1, tq, dv)
    m = q.shape[0]
    # keys and values packed, a matrix's rows one after another: rows of a fused q/k/v
    # projection lie 6 KiB apart (Whisper base), so a span of v's rows and a block of
    # k's fell on a few L1 sets and came from L2 (the layer's attention 48 -> 56 ms
    # through the kernel, 35 from packed copies); a copy costs ~1 ms a layer
    k, v = _packed(xp, k), _packed(xp, v)
    masks, which = _transposed_masks(xp, mask, m, kernels.padded(tq))
    block = kernels.block
    spread = workers(blas_free=True)
    runs = max(1, ceil_div(RUNS_PER_THREAD * spread, m))
    rows = ceil_div(ceil_div(tq, runs), block) * block
    pieces = [(i, r0, min(tq, r0 + rows)) for i in range(m) for r0 in range(0, tq, rows)]
    need = kernels.scratch_floats(tk, d, dv)
    per_piece = rows * tk * (4 + (d + dv) // 16)  # row_parallel's elementwise steps
    threads = share_count(len(pieces), per_piece, blas_free=True)
    if _team(xp, kernels, q, k, v, out, scale, masks, which, pieces, need, threads, redo):
        return True

    def run(start, stop):
        scratch = _scratch(xp, need)
        for i, r0, r1 in pieces[start:stop]:
            mask_t = None if masks is None else masks[which(i), :, r0:]
            if kernels.attend(q[i, r0:r1], k[i], v[i], out[i, r0:r1], scale, scratch, mask_t):
                part = None if masks is None else masks[which(i), :, r0:r1].T[None]
                redo(q[i : i + 1, r0:r1], k[i : i + 1], v[i : i + 1], out[i : i + 1, r0:r1], part)

    with one_thread_throughout():  # a redone run's BLAS calls
        run_rows(run, len(pieces), per_piece, blas_free=True)
    return True


def _team(xp, kernels, q, k, v, out, scale, masks, which, pieces, need, threads, redo):
    """The pieces through the kernels' team function (x86-64: the caller and llvm_spin's
    helpers take them in turn, with no Python between them: a 128-token prompt's
    attention, 18 pieces of 64 query rows, spent more in the pool's hand-offs and the
    pieces' Python calls than in the kernel), then the rows they left redone; False
    where it is not built."""
    helpers = llvm_spin.process_helpers(threads)
    words = [0, len(pieces), need, int(xp.float32(scale).view(xp.int32))]
    step = [a.strides[0] for a in (q, k, v, out)]
    row = [q.strides[1], out.strides[1]]
    base = [address(a) for a in (q, k, v, out)]
    for i, r0, r1 in pieces:
        mask_at = 0 if masks is None else address(masks) + which(i) * masks.strides[0] + 4 * r0
        words += (
            base[0] + i * step[0] + r0 * row[0],
            base[1] + i * step[1],
            base[2] + i * step[2],
            base[3] + i * step[3] + r0 * row[1],
            mask_at,
            r1 - r0,
            0,
        )
    table = xp.array(words, xp.int64)
    team = 1 if helpers is None else helpers.count + 1
    scratch = xp.empty(team * need, xp.float32)
    strides = (q.strides[1] // 4, k.strides[1] // 4, v.strides[1] // 4, out.strides[1] // 4)
    dims = (k.shape[1], q.shape[2], v.shape[2])
    ldm = 0 if masks is None else masks.strides[1] // 4
    if not kernels.attend_pieces(table, strides, dims, scratch, ldm, helpers):
        return False
    undone = table[
        llvm_attention_rows.TEAM_HEADER
        + llvm_attention_rows.TEAM_PIECE
        - 1 :: llvm_attention_rows.TEAM_PIECE
    ]
    for (i, r0, r1), left in zip(pieces, undone, strict=True):
        if left:
            part = None if masks is None else masks[which(i), :, r0:r1].T[None]
            with one_thread_throughout():
                redo(q[i : i + 1, r0:r1], k[i : i + 1], v[i : i + 1], out[i : i + 1, r0:r1], part)
    return True


def _transposed_masks(xp, mask, m, width):
    """(masks [n, tk, width], which(i): the index of matrix i's) for the kernel: each
    distinct matrix of `mask` ([..., tq, tk], batch dims as q's) transposed once, its
    columns past tq zeros (the rows of a last block past tq read them); one for all
    where every batch dim is broadcast (a causal mask over every head). (None, None)
    without a mask."""
    if mask is None:
        return None, None
    tq, tk = mask.shape[-2:]
    shared = all(
        st == 0 or n == 1 for n, st in zip(mask.shape[:-2], mask.strides[:-2], strict=True)
    )
    mats = mask[(0,) * (mask.ndim - 2)][None] if shared else mask.reshape(m, tq, tk)
    out = xp.zeros((mats.shape[0], tk, width), xp.float32)
    out[:, :, :tq] = xp.swapaxes(mats, 1, 2)
    return out, (lambda i: 0) if shared else (lambda i: i)


def _packed(xp, a):
    """a [m, rows, cols] with its rows contiguous and one after another (a itself where
    they are)."""
    return a if a.strides[1] == 4 * a.shape[2] else xp.ascontiguousarray(a)


def _scratch(xp, floats):
    buf = getattr(_local, "scratch", None)
    if buf is None or buf.size < floats:
        buf = _local.scratch = xp.empty(floats, xp.float32)
    return buf
