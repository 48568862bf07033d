"""Row-parallel elementwise work for the numpy backend.

numpy runs one ufunc on one core; only its BLAS uses the others. In a transformer layer
the work around the GEMMs (bias, activation, residual, layer norm, softmax) is a third
of the time on one core. numpy releases the GIL inside ufuncs, so splitting such work by
rows over a few Python threads runs it on all cores.

That only pays when OpenBLAS's idle workers sleep soon after a GEMM: by default they
spin for ~0.1 s, on the very cores these threads need, and the split then gains nothing
(GELU on 1200x1536 after a GEMM: 3.6 ms on one thread, 3.6 ms on two; with
OPENBLAS_THREAD_TIMEOUT=18, i.e. 2^18 cycles or ~0.1 ms of spinning, 2.4 ms; GEMM speed
unchanged). `blas_threads.prepare_numpy_import` sets that default before ember imports
numpy, and `workers()` turns the split off when it could not take effect.

EMBER_CPU_THREADS=N sets the number of threads (1 turns the split off).
"""

import itertools
import os
import threading
import time
import types

from ..intmath import ceil_div

# Below this many elements a task hand-off (~20-50 us) costs more than it saves.
MIN_PARALLEL_ELEMENTS = 1 << 16
# Ranges per thread in a shared run: more even out a late worker's share, each costs fn's
# call overhead (a numba kernel's dispatch, a few microseconds).
CHUNKS_PER_THREAD = 4
# A call site's shared and single-thread runs are timed; the faster is kept, and the other
# is tried again once every EXPLORE_EVERY calls (the machine's load changes; a try of
# the slower costs that call up to a few times its time).
EXPLORE_EVERY = 100
# A shared run this long (seconds) has paid for its hand-off many times over (on the KVM
# host above, a 5 ms lm_head kernel still ran 7.4 ms shared against 6.0 alone, which
# the runs alone from FIRST_EXPLORE on find).
LONG_RUN_SECONDS = 0.01
# A shared run this long (seconds) is presumed the faster way (a hand-off, 0.1-0.3 ms on
# these VMs, is a small part of it) until the site's FIRST_EXPLORE-th call, from which it
# runs alone twice and is judged by its timings. Exploring at the second and fourth
# calls, as shorter sites do, cost Whisper base's encoder 20-45 ms of runs alone in every
# fresh process (its sites are called 6-18 times a window; one of 15-25 ms shared ran
# 29-43 ms alone, one of 5 ms 9.5-10.4 ms), which a cold start never wins back; the
# long ones (20 ms before) now never explore before their EXPLORE_EVERY-th call.
PRESUMED_SHARED_SECONDS = 0.001
FIRST_EXPLORE = 16
# A call site's way (shared or alone) is judged by the least of its last WINDOW timings:
# the way's speed with the noise left out. A running average (weight 1/4) was pulled past
# the other way by one preempted run (an alone run of a 1 ms site taking 5 ms under CI's
# load) and kept there for a hundred calls, the other way being timed once every
# EXPLORE_EVERY; load that lasts fills the whole window. yolov8n's forward, the two
# alternating in processes: ~108 ms median with the average, ~102 with the least of 3;
# SmolLM2 decode the same (20.5 and 20.4 tok/s, identical bits).
WINDOW = 3
# run_either's spinning helpers share a run for a few stores and a compare-exchange, so a
# site of theirs runs alone only where alone was clearly the faster: its least recent
# timing under this fraction of sharing's. Judged even, the two ways' noise (a decode
# step's products take 10-200 us) sent 40% of SmolLM2-135M's products to one core,
# while sharing them all decoded 1.04-1.06x faster (10 interleaved rounds); a loaded
# machine, where a helper loses its core, still makes alone the faster by far.
SPIN_MARGIN = 0.8
# The caller polls for its workers' last ranges for at most this long (seconds).
SPIN_SECONDS = 0.002
# The largest OPENBLAS_THREAD_TIMEOUT (log2 of cycles spun) under which BLAS workers sleep
# soon enough for the split to pay. The GELU above on two threads after a GEMM: 2.45 ms at
# 18, 2.76 ms at 20, 3.6 ms at 22 (no better than one thread).
MAX_SPIN_EXPONENT = 20

# spin_bound: workers() chose 1 only because OpenBLAS's idle workers spin long
# blas_free: workers(blas_free=True)'s count where spin_bound
_state = {"pool": None, "workers": None, "spin_bound": False, "blas_free": None}
_lock = threading.Lock()
_in_worker = threading.local()


def _cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _blas_workers_sleep_soon():
    value = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "")
    try:
        return int(value) <= MAX_SPIN_EXPONENT
    except ValueError:
        return False


def workers(blas_free=False):
    """How many threads share row-parallel work (1: the caller alone).

    blas_free: for work whose GEMMs run on one BLAS thread (the numpy conv): OpenBLAS's
    pool then never wakes, so its spinning cannot take the cores, and the split is on even
    where OPENBLAS_THREAD_TIMEOUT was not set in time (numpy imported before ember, as most
    scripts do: yolov8n's forward ran on one core, 290 ms against 157 for torch)."""
    n = _state["workers"]
    if n is None:
        wanted = os.environ.get("EMBER_CPU_THREADS", "").strip()
        if wanted:
            try:
                n = max(1, int(wanted))
            except ValueError:
                raise ValueError(
                    f"EMBER_CPU_THREADS must be a whole number, got {wanted!r}"
                ) from None
        else:
            n = min(_cpu_count(), 8) if _blas_workers_sleep_soon() else 1
            _state["spin_bound"] = n == 1 and _cpu_count() > 1
        _state["workers"] = n
    if blas_free and _state["spin_bound"]:
        # the count found once (a sched_getaffinity call at every decode-step product was
        # 2.5% of SmolLM2-135M's step)
        if _state["blas_free"] is None:
            _state["blas_free"] = min(_cpu_count(), 8)
        return _state["blas_free"]
    return n


def set_workers(n):
    """From code, what EMBER_CPU_THREADS=n does (a Ray actor granted n CPUs); a setting in
    the environment wins. A pool of another size already started is replaced."""
    if os.environ.get("EMBER_CPU_THREADS", "").strip():
        return
    with _lock:
        n = max(1, int(n))
        if _state["pool"] is not None and n != _state["workers"]:
            _state["pool"].shutdown()
            _state["pool"] = None
        _state["workers"], _state["spin_bound"] = n, False


def _pool():
    with _lock:
        if _state["pool"] is None:
            from concurrent.futures import ThreadPoolExecutor

            size = max(workers(), workers(blas_free=True)) - 1
            pool = ThreadPoolExecutor(size, thread_name_prefix="ember-rows")
            # its threads started now, not inside the first shared run, whose time
            # run_rows' choice between sharing and one thread would then count
            # (each waits at the barrier, so that every one is a thread of its own)
            everyone = threading.Barrier(size + 1)
            for _ in range(size):
                pool.submit(everyone.wait, 30)
            everyone.wait(30)
            _state["pool"] = pool
        return _state["pool"]


def share_count(rows, elements_per_row, align=1, blas_free=False):
    """How many threads may share work of `rows` rows of `elements_per_row` elements (ranges
    aligned to `align`): up to workers(blas_free), one per MIN_PARALLEL_ELEMENTS, and 1
    inside a pool thread (no nested sharing)."""
    n = workers(blas_free)
    if n <= 1 or getattr(_in_worker, "active", False):
        return 1
    return max(1, min(n, rows * elements_per_row // MIN_PARALLEL_ELEMENTS, ceil_div(rows, align)))


def run_rows(fn, rows, elements_per_row, align=1, blas_free=False, pieces=None, key=None):
    """Call fn(start, stop) over [0, rows) in contiguous ranges, shared by the caller and up
    to `workers() - 1` pool threads when the work is large enough. Range ends are
    multiples of `align`; every row runs exactly once; the first failure (in row order)
    is raised in the caller once every range has run. `blas_free`: fn's GEMMs run on one
    BLAS thread (see workers).

    Shared, the rows go in `pieces` ranges (CHUNKS_PER_THREAD per thread by default), each
    taken by whichever thread is free next, and the caller returns as soon as every range
    is done: a worker that gets its core late takes fewer ranges, or none, instead of the
    caller waiting for a fixed share.

    Whether to share at all is measured, per call site and size (see _Choices): a hand-off
    costs a sleeping thread's wake-up and, for every range, the GIL passing between the
    threads; on some hosts (a VM whose idle vCPUs halt) each wake-up takes 0.1-0.3 ms, and a
    decode step's sub-millisecond kernels then ran slower on two threads than on one
    (SmolLM2-135M Q4_1: 107 ms a step against 73). `key` (hashable) tells apart calls of
    one site and size that share differently (a model's layers of one kind: see
    _Choices.site)."""
    n = share_count(rows, elements_per_row, align, blas_free)
    if n <= 1:
        fn(0, rows)
        return
    site = _choices.site(fn, rows * elements_per_row, key)
    shared = _choices.share(site)
    pool = _pool() if shared else None  # made (once) before the clock starts
    began = time.perf_counter()
    if pool is None:
        fn(0, rows)
    else:
        job = _Shared(fn, _ranges(rows, align, pieces or n * CHUNKS_PER_THREAD))
        for _ in range(n - 1):
            pool.submit(job.drain, True)
        job.drain(False)
        job.finish()
    _choices.record(site, shared, time.perf_counter() - began)


def run_either(key, elements, shared, alone, operand=None):
    """shared() or alone(), whichever has been the faster for `key` (a code object),
    this size and `operand` (what tells one work of the site from another of about its
    size: a product's weight), as run_rows chooses (_Choices), alone only where clearly
    the faster (SPIN_MARGIN): for work shared some other way than the
    pool's (llvm_spin's spinning helpers), which a loaded machine can still slow (a
    helper that lost its core keeps its caller waiting).

    shared() returns False where no one shared the run (the helpers slept, and the caller
    ran their parts and woke them): its time is not recorded, and the site's next call
    runs shared again. Recorded as shared, such runs set a trap: a site that ran alone for
    a while left the helpers asleep, so each of its tries of sharing, every EXPLORE_EVERY
    calls, ran alone plus a wake-up, and it kept to one core for good (SmolLM2-135M
    Q4_1: decode steps of 33 ms where sharing every product takes 25)."""
    site = _choices.site(key, elements, operand)
    way = _choices.share(site, SPIN_MARGIN)
    began = time.perf_counter()
    helped = (shared if way else alone)()
    if way and helped is False:
        site.retry = True
        return
    _choices.record(site, way, time.perf_counter() - began)


def _ranges(rows, align, parts):
    """[0, rows) as at most `parts` contiguous ranges whose ends are multiples of align."""
    step = ceil_div(ceil_div(rows, parts), align) * align
    return [(s, min(s + step, rows)) for s in range(0, rows, step)]


class _Site:
    """One call site and size's timings: the last WINDOW seconds of runs alone and shared,
    runs each way, and calls."""

    __slots__ = ("recent", "runs", "calls", "retry")

    def __init__(self):
        self.recent = ([], [])
        self.runs = [0, 0]
        self.calls = 0
        self.retry = False  # run shared at the next call (run_either)

    @property
    def seconds(self):
        """[alone, shared]: the least of each way's recent timings, None before its first."""
        return [min(times) if times else None for times in self.recent]


class _Choices:
    """Per call site (fn's code) and size (elements, to a power of two): the recent
    seconds of shared and single-thread runs, and which way to take next.

    A site starts shared. A shared run of LONG_RUN_SECONDS or more has paid for its
    hand-off many times over: such a site stays shared, but for one run alone every
    EXPLORE_EVERY calls (a decode step's kernels are far shorter; a Whisper encoder's
    attention, 40-70 ms a call, was 28 ms slower alone). One of PRESUMED_SHARED_SECONDS or
    more keeps the site shared until its FIRST_EXPLORE-th call. Shorter sites (and those,
    from then on) run twice each way, alternating (a way's first run pays one-time costs: a
    thread's first allocations, pages touched for the first time, which the least of its
    timings leaves out); then the way whose least recent timing is lower is taken, the other
    once every EXPLORE_EVERY calls."""

    def __init__(self):
        self.sites = {}

    def site(self, fn, elements, key=None):
        """fn's code and its work's size to a power of two, and the caller's `key`: one
        conv2d code serves every layer of a model, and layers of one size can share
        oppositely (yolov8n, 2 threads: of its 2^26-element layers the ones run alone were
        as fast alone, others 1.6x faster shared; keyed by size alone, half of its layers
        ran on one core and the forward took 1.29x less time than on one thread, against
        1.56x for the layers each at its best)."""
        # run_either's key is a code object already (which has no __code__: taken as
        # type(fn), every such site was one)
        code = fn if isinstance(fn, types.CodeType) else getattr(fn, "__code__", None) or type(fn)
        key = (code, int(elements).bit_length(), key)
        entry = self.sites.get(key)
        if entry is None:
            if len(self.sites) >= 4096:  # bounded: a long-lived process's many shapes
                self.sites.clear()
            entry = self.sites[key] = _Site()
        return entry

    def share(self, site, margin=1.0):
        """Whether the site's next run goes shared: alone only where alone's least recent
        timing is under `margin` times sharing's (1: the faster)."""
        site.calls += 1
        if site.retry:
            site.retry = False
            return True
        alone, shared = site.seconds
        explore = site.calls % EXPLORE_EVERY == 0
        if shared is None:
            return True
        if shared >= LONG_RUN_SECONDS:
            best = alone is None or shared * margin < alone
        elif shared >= PRESUMED_SHARED_SECONDS and site.calls < FIRST_EXPLORE:
            return True
        elif min(site.runs) < 2:
            return site.runs[1] <= site.runs[0]
        else:
            best = shared * margin < alone
        return (not best) if explore else best

    def record(self, site, shared, seconds):
        i = 1 if shared else 0
        site.runs[i] += 1
        times = site.recent[i]
        times.append(seconds)
        if len(times) > WINDOW:
            del times[0]


_choices = _Choices()


class _Shared:
    """One shared run_rows call's ranges, each taken by the next free thread."""

    def __init__(self, fn, ranges):
        self.fn, self.ranges = fn, ranges
        self.next = itertools.count()  # next() on a count is atomic under the GIL
        self.left = len(ranges)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.failures = {}

    def run(self, i):
        try:
            self.fn(*self.ranges[i])
        except BaseException as exc:  # re-raised in the caller by finish()
            self.failures[i] = exc
        with self.lock:
            self.left -= 1
            if self.left == 0:
                self.done.set()

    def drain(self, in_worker):
        if in_worker:
            _in_worker.active = True
        try:
            for i in self.next:
                if i >= len(self.ranges):
                    return
                self.run(i)
        finally:
            if in_worker:
                _in_worker.active = False

    def finish(self):
        """Wait for the ranges workers still run (none a late worker never took), then
        raise the first failure. For up to SPIN_SECONDS the wait polls, giving up the GIL,
        instead of sleeping: a sleeping thread can be slow to wake, and a worker's last
        range is short."""
        deadline = time.perf_counter() + SPIN_SECONDS
        while not self.done.is_set() and time.perf_counter() < deadline:
            time.sleep(0)
        self.done.wait()
        if self.failures:
            raise self.failures[min(self.failures)]


def map_tasks(fn, items):
    """[fn(item) for item in items], on up to `workers()` threads at once (the caller's
    among them), each call single-threaded inside: BLAS pinned to one thread, run_rows
    inline. For independent pieces of work whose own ops are too small to split well:
    two MiniLM micro-batches of 256 short sentences side by side beat one at a time on
    two threads (on 2 quiet cores, 2 Ray actors of one thread each embedded a 100,000-row
    corpus at 212 rows/s, one process at 154). Results keep the items' order; the first
    failure (in item order) is raised once every started call has ended."""
    items = list(items)
    n = min(workers(), len(items))
    if n <= 1 or getattr(_in_worker, "active", False):
        return [fn(item) for item in items]
    from .blas_threads import one_thread_throughout

    results = [None] * len(items)
    failures = {}
    taken = iter(range(len(items)))
    lock = threading.Lock()

    def drain():
        was = getattr(_in_worker, "active", False)
        _in_worker.active = True
        try:
            while not failures:
                with lock:
                    i = next(taken, None)
                if i is None:
                    return
                try:
                    results[i] = fn(items[i])
                except BaseException as exc:  # re-raised in the caller, below
                    failures[i] = exc
        finally:
            _in_worker.active = was

    with one_thread_throughout():
        futures = [_pool().submit(drain) for _ in range(n - 1)]
        drain()
        for future in futures:
            future.result()
    if failures:
        raise failures[min(failures)]
    return results


def _after_fork():
    # A forked child has none of the parent's threads: start over.
    _state["pool"] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
