"""Small GEMMs on one BLAS thread.

numpy's OpenBLAS splits every GEMM above a tiny size over all cores. For a few rows
(one query, one sentence: M of 4-30) waking the worker threads costs more than the
work, and on a busy machine each wake-up waits for a time slice: an 8x384 @ 384x1536
product measured 39 ms on two threads against 1 ms on one. `single_thread_below(flops)`
pins such products to one thread; large ones keep the pool. When the BLAS library or
its thread call cannot be found, it does nothing.
"""

import contextlib
import glob
import os
import threading
import time

from .row_parallel import _choices  # the per-size timings run_rows keeps too

# Products with fewer multiply-adds than this run on one thread (about 0.3 ms of work)...
SMALL_GEMM_MACS = 1 << 23
# ... except those from this many up, which run the way measured faster for their size
# (row_parallel's choices: each way timed, the faster kept, the other tried again now
# and then). A decode step's f32 GEMVs (one row of x, 0.3-1.8 M multiply-adds) read
# their whole weight for little arithmetic: on two idle cores, two threads read it at
# twice one's bandwidth (SmolLM2-135M's 120 GEMVs and head: 38-41 -> 26 ms a step),
# while on a loaded machine a wake-up can cost more than the product (the 39 ms above).
TIMED_FROM_MACS = 1 << 18

_api = []  # [(set_fn, default_threads)] once probed; [] = not probed, [None] = unavailable


def numpy_openblas():
    """The OpenBLAS libraries numpy's wheel ships (numpy.libs, or .dylibs on macOS), each
    opened through ctypes: the copy numpy loaded, the same handle."""
    import ctypes

    import numpy

    base = os.path.dirname(numpy.__file__)
    paths = glob.glob(os.path.join(base, "..", "numpy.libs", "*openblas*")) + glob.glob(
        os.path.join(base, ".dylibs", "*openblas*")
    )
    libs = []
    for path in paths:
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def _probe():
    try:
        import ctypes

        for lib in numpy_openblas():
            for stem in ("scipy_openblas_", "openblas_"):
                for suffix in ("64_", ""):
                    setter = getattr(lib, f"{stem}set_num_threads{suffix}", None)
                    getter = getattr(lib, f"{stem}get_num_threads{suffix}", None)
                    if setter is not None and getter is not None:
                        setter.argtypes = [ctypes.c_int]
                        return setter, int(getter())
    except Exception:  # any failure leaves BLAS threading as it is
        pass
    return None


class _Single:
    __slots__ = ("setter", "threads")

    def __init__(self, setter, threads):
        self.setter = setter
        self.threads = threads

    def __enter__(self):
        self.setter(1)

    def __exit__(self, *exc):
        self.setter(self.threads)
        return False


def _timed_products():
    """The key these products' timings go under in row_parallel's choices."""


# Products (by shape, strides and dtype of both operands) whose result on all BLAS threads
# was compared with one thread's: True where the bits were the same. OpenBLAS's SkylakeX
# kernels give one thread's bits on any count; its Haswell ones (AMD hosts among them) do
# not for 16+ rows (tests/test_blas_threads.py), and a choice made by timing must never
# change a result. Bounded like row_parallel's choices.
_same_bits: dict = {}


def _bits_equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


class _Timed:
    """One product on one thread or on all, as row_parallel's choices say for its size,
    timed for them; all threads only for a product whose bits they were seen to keep."""

    __slots__ = ("setter", "threads", "macs", "key")

    def __init__(self, setter, threads, macs, key):
        self.setter, self.threads, self.macs, self.key = setter, threads, macs, key

    def run(self, compute):
        keeps = _same_bits.get(self.key)
        if keeps is False:
            return self._alone(compute)
        site = _choices.site(_timed_products, self.macs)
        shared = _choices.share(site)
        began = time.perf_counter()
        y = compute() if shared else self._alone(compute)
        _choices.record(site, shared, time.perf_counter() - began)
        if shared and keeps is None:
            alone = self._alone(compute)  # once per product: are these one thread's bits?
            if len(_same_bits) >= 4096:
                _same_bits.clear()
            _same_bits[self.key] = _bits_equal(y, alone)
            return alone
        return y

    def _alone(self, compute):
        self.setter(1)
        try:
            return compute()
        finally:
            self.setter(self.threads)


def product(compute, macs, key):
    """compute() (a BLAS product of `macs` multiply-adds that returns a new array, `key`
    naming its operands' shapes, strides and dtypes, on which OpenBLAS's order of
    additions depends): on one thread below TIMED_FROM_MACS, on all from SMALL_GEMM_MACS
    and, between, the way measured faster here for its size (row_parallel's choices),
    but all threads only once they gave this product one thread's bits. So the result
    never depends on the timings."""
    if macs >= SMALL_GEMM_MACS or _pinned[0]:
        return compute()
    if not _api:
        _api.append(_probe())
    api = _api[0]
    if api is None or api[1] <= 1:
        return compute()
    if macs >= TIMED_FROM_MACS:
        return _Timed(*api, macs, key).run(compute)
    with _Single(*api):
        return compute()


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NOTHING = _Nothing()


def single_thread_below(macs, limit=SMALL_GEMM_MACS):
    """A context manager: one BLAS thread if `macs` < limit, else nothing changes (for
    products that are not a single call returning a new array; `product` times the
    middle range)."""
    if macs >= limit or _pinned[0]:
        return _NOTHING
    if not _api:
        _api.append(_probe())
    api = _api[0]
    if api is None or api[1] <= 1:
        return _NOTHING
    return _Single(*api)


# How many one_thread_throughout blocks are open: while any is, BLAS stays at one thread
# (a small GEMM's _Single would put it back to the pool size on exit, under the feet of
# the other threads' GEMMs).
_pinned = [0]
_pin_lock = threading.Lock()


@contextlib.contextmanager
def one_thread_throughout():
    """One BLAS thread until the block ends, whatever runs inside it: for several Python
    threads each running its own GEMMs at once (row_parallel.map_tasks). Reentrant and
    shared: the first block to open sets one thread, the last to close restores it."""
    if not _api:
        _api.append(_probe())
    api = _api[0]
    with _pin_lock:
        _pinned[0] += 1
        if _pinned[0] == 1 and api is not None:
            api[0](1)
    try:
        yield
    finally:
        with _pin_lock:
            _pinned[0] -= 1
            if _pinned[0] == 0 and api is not None:
                api[0](api[1])


# log2 of the cycles OpenBLAS's idle workers spin before they sleep (its default is 28,
# ~0.1 s); see row_parallel for why ember wants them asleep after ~0.1 ms.
IDLE_SPIN_EXPONENT = "18"


def prepare_numpy_import():
    """Before ember's first `import numpy`: default OPENBLAS_THREAD_TIMEOUT (read once, when
    OpenBLAS loads) so BLAS workers stop spinning soon after each GEMM. A value the user
    set wins, and once numpy is loaded nothing is changed (it would have no effect)."""
    import sys

    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", IDLE_SPIN_EXPONENT)
