"""array_qkernels' fused dot products over the cores through numba's own threads.

A decode step's weight matrices take 0.05-0.4 ms each on one core (SmolLM2-135M Q4_1).
Handing half of one to row_parallel's Python pool costs more than that half: a sleeping
thread's wake-up, then the GIL passing between the threads. Sharing every one measured
60 ms a step against 46 on one thread (Intel KVM guest, 2 vCPUs). So run_rows kept them on
one core, and the other idled through two thirds of the step.

numba's parallel loops hand out their iterations in native threads that never take the
GIL. On its OpenMP layer the threads also spin a while between loops, so none has to be
woken. There the same kernels split in two in half the time, from 0.05 ms up: 3072 x 576
went from 0.276 to 0.143 ms, and 576 x 576 from 0.053 to 0.028 ms.

Each wrapper below splits its weight rows into `chunks` spans of an even number of rows and
runs its type's kernel on each span. The kernels take rows in pairs from the span's start,
so every row keeps its pair, and a result's bits do not depend on the chunk count.
`usable()` says whether numba's threading layer is safe to launch from several Python
threads (OpenMP or TBB). numba's fallback, workqueue, aborts the process on concurrent
launches, so array_qmatmul keeps row_parallel there.
"""

import threading

import numba
import numpy as np

from . import array_qkernels as k

_PAR = {"parallel": True, "nogil": True, "cache": True}

# The ten wrappers are written out, not made by a factory or given the kernel as an
# argument: numba's cache files are named by a function's qualified name, which functions
# made by one factory share; and a kernel passed as a first-class function gave other bits
# than the same kernel called directly (Q4_1, 3072 x 576), which the tests forbid.


@numba.njit(inline="always", nogil=True, cache=True)
def _span(c, chunks, rows):
    step = ((rows + chunks - 1) // chunks + 1) // 2 * 2  # even: row pairs stay whole
    a = c * step
    return a, min(a + step, rows)


@numba.njit(**_PAR)
def dot_q4_0(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q4_0(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q4_1(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q4_1(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q5_0(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q5_0(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q5_1(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q5_1(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q8_0(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q8_0(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q2_k(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q2_k(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q3_k(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q3_k(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q4_k(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q4_k(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q5_k(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q5_k(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def dot_q6_k(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            k.dot_q6_k(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def _probe(out):
    for i in numba.prange(out.shape[0]):
        out[i] = i


SAFE_LAYERS = ("omp", "tbb")
_layer = {"ok": None}
_lock = threading.Lock()


def usable():
    """Whether numba's threading layer (chosen at its first parallel launch, made here
    under a lock) is one that several Python threads may launch on at once."""
    if _layer["ok"] is None:
        with _lock:
            if _layer["ok"] is None:
                try:
                    _probe(np.zeros(4, np.int64))
                    _layer["ok"] = numba.threading_layer() in SAFE_LAYERS
                except Exception:  # no threading layer loads: the Python pool serves
                    _layer["ok"] = False
    return _layer["ok"]


def run(kernel, raw, x, xs, out, f16, threads):
    """kernel (one of the wrappers above) over all of raw's rows on `threads` threads."""
    threads = min(threads, numba.config.NUMBA_NUM_THREADS)
    if numba.get_num_threads() != threads:
        numba.set_num_threads(threads)  # this Python thread's setting (numba's is per thread)
    kernel(raw, x, xs, out, raw.shape[0], f16, threads)
