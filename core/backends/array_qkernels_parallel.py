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

Each wrapper (array_qkernels.spread_<type>, kept beside the kernels it inlines; see there)
splits its weight rows into `chunks` spans of an even number of rows and runs its type's
kernel on each span. The kernels take rows in pairs from the span's start,
so every row keeps its pair, and a result's bits do not depend on the chunk count.
`usable()` says whether numba's threading layer is safe to launch from several Python
threads (OpenMP or TBB). numba's fallback, workqueue, aborts the process on concurrent
launches, so array_qmatmul keeps row_parallel there.
"""

import os
import threading

import numba
import numpy as np

_PAR = {"parallel": True, "nogil": True, "cache": True}


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


def _after_fork_in_child():
    # GNU OpenMP ends a forked child at its first parallel launch once the parent has run
    # one ("Terminating: fork() called from a process already using GNU OpenMP, this is
    # unsafe."). A child keeps off numba's threads whatever the layer (TBB's behaviour
    # across fork was not tried here): it runs the same kernels on row_parallel's pool,
    # with the same bits (rows keep their pairs).
    _layer["ok"] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def run(kernel, raw, x, xs, out, f16, threads):
    """kernel (an array_qkernels.spread_<type>) over all of raw's rows on `threads` threads."""
    threads = min(threads, numba.config.NUMBA_NUM_THREADS)
    if numba.get_num_threads() != threads:
        numba.set_num_threads(threads)  # this Python thread's setting (numba's is per thread)
    kernel(raw, x, xs, out, raw.shape[0], f16, threads)
