"""array_attention's unmasked attention of many queries through llvm_attention_rows'
compiled kernel: each matrix's query rows in runs of whole query blocks, the runs shared
over row_parallel's threads, each run one call.

Whisper base's encoder layer (8 heads x 1,500 x 1,500, head dim 64), 2 threads on an
Intel Xeon (AVX-512): the BLAS tiles' 300 query rows in 1.49 ms against 1.27 here, one
thread each, interleaved. Runs are whole query blocks, so a row's bits never depend on
how the rows were shared; a run the kernel leaves rows of (a maximum score that is not
finite) goes through the BLAS tile instead, whose checks treat such rows.
"""

import threading

from ..intmath import ceil_div
from . import llvm_attention_rows
from .blas_threads import one_thread_throughout
from .row_parallel import run_rows, workers

# Fewer queries than a block's worth leave most of its lanes idle (a decode step's
# cross-attention, 1 query a head): those keep the BLAS tiles
MIN_QUERIES = 16
# Runs a thread, at least: a late or slowed thread then leaves a short run to the rest
RUNS_PER_THREAD = 8

_local = threading.local()  # each thread's scratch, kept between calls (~0.2 MB)


def attend(xp, q, k, v, out, scale, redo):
    """out = softmax(q * scale @ k^T) @ v for the f32 arrays q [..., tq, d], k [..., tk,
    d], v [..., tk, dv], out [..., tq, dv] of equal batch dims (numpy, rows contiguous),
    through the compiled kernel, each matrix as its own stack [m, ., .]; True, or False
    (nothing written, nothing copied) where it is not built or does not take these.
    `redo(q, k, v, out)` computes the stacks' slices [1, rows, .] of a run the kernel
    left rows of another way."""
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
    block = kernels.block
    spread = workers(blas_free=True)
    runs = max(1, ceil_div(RUNS_PER_THREAD * spread, m))
    rows = ceil_div(ceil_div(tq, runs), block) * block
    pieces = [(i, r0, min(tq, r0 + rows)) for i in range(m) for r0 in range(0, tq, rows)]
    need = kernels.scratch_floats(tk, d, dv)

    def run(start, stop):
        scratch = _scratch(xp, need)
        for i, r0, r1 in pieces[start:stop]:
            if kernels.attend(q[i, r0:r1], k[i], v[i], out[i, r0:r1], scale, scratch):
                redo(q[i : i + 1, r0:r1], k[i : i + 1], v[i : i + 1], out[i : i + 1, r0:r1])

    per_piece = rows * tk * (4 + (d + dv) // 16)  # row_parallel's elementwise steps
    with one_thread_throughout():  # a redone run's BLAS calls
        run_rows(run, len(pieces), per_piece, blas_free=True)
    return True


def _packed(xp, a):
    """a [m, rows, cols] with its rows contiguous and one after another (a itself where
    they are)."""
    return a if a.strides[1] == 4 * a.shape[2] else xp.ascontiguousarray(a)


def _scratch(xp, floats):
    buf = getattr(_local, "scratch", None)
    if buf is None or buf.size < floats:
        buf = _local.scratch = xp.empty(floats, xp.float32)
    return buf
