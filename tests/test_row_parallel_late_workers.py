"""row_parallel.run_rows with a worker that starts late or not at all: the caller takes the
ranges no worker has taken instead of waiting for them (a decode step's small kernels on a
busy machine) and waits only for ranges a worker is running; a call site where sharing
measured slower than one thread runs on one thread, and one where it measured faster is
shared; every row still runs exactly once."""
import threading
import time

import pytest

from ember.backends import row_parallel
from test_qmatmul_f16 import jit  # noqa: F401  (the fixture)


@pytest.fixture
def two_workers(monkeypatch):
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    monkeypatch.setattr(row_parallel, "_choices", row_parallel._Choices())
    yield
    pool = row_parallel._state["pool"]
    if pool is not None:
        pool.shutdown()


def _recording():
    seen, threads, lock = [], set(), threading.Lock()

    def fn(start, stop):
        with lock:
            seen.extend(range(start, stop))
            threads.add(threading.get_ident())

    return fn, seen, threads


def test_ranges_no_worker_started_are_run_by_the_caller(two_workers):
    busy, release = threading.Event(), threading.Event()
    pool = row_parallel._pool()
    blocker = pool.submit(lambda: busy.set() or release.wait(30))  # the only worker, held
    assert busy.wait(30)
    fn, seen, threads = _recording()
    try:
        row_parallel.run_rows(fn, 300, 1 << 16)  # returns with the worker still held
    finally:
        release.set()
    blocker.result(30)
    assert sorted(seen) == list(range(300))
    assert threads == {threading.get_ident()}


def test_a_started_range_is_waited_for_and_its_failure_raised(two_workers):
    caller = threading.get_ident()

    def fn(start, stop):
        if threading.get_ident() == caller:
            time.sleep(0.02)  # the worker starts while the caller is busy
        else:
            time.sleep(0.05)  # and is still running when the caller is done
            raise RuntimeError(f"range from {start} failed in a worker")

    with pytest.raises(RuntimeError, match="failed in a worker"):
        row_parallel.run_rows(fn, 300, 1 << 16)


def _decisions(monkeypatch):
    """The list of run_rows' share-or-not decisions, appended to as they are made."""
    made, real = [], row_parallel._choices.share
    monkeypatch.setattr(row_parallel._choices, "share", lambda e: made.append(real(e)) or made[-1])
    return made


def test_a_site_where_sharing_measured_slower_runs_on_the_caller(two_workers, monkeypatch):
    made = _decisions(monkeypatch)
    caller, seen = threading.get_ident(), []

    def fn(start, stop):  # a worker's range costs 5 ms, the caller's nothing
        if threading.get_ident() != caller:
            time.sleep(0.005)
        seen.extend(range(start, stop))

    # whether a shared run lasts long enough to be presumed faster depends on whether the
    # worker took a range in time: not the subject here (see the test after the next)
    monkeypatch.setattr(row_parallel, "PRESUMED_SHARED_SECONDS", 1.0)
    every = row_parallel.EXPLORE_EVERY
    for _ in range(every + 1):
        row_parallel.run_rows(fn, 300, 1 << 16)
    # twice each way, alternating; then alone but for one try in EXPLORE_EVERY
    assert made[:4] == [True, False, True, False]
    assert made[4:] == [(i + 1) % every == 0 for i in range(4, every + 1)]
    assert sorted(seen) == sorted(list(range(300)) * (every + 1))


def _timed(choices, site, timings):
    """The decisions for a site whose shared and single-thread runs take the given seconds."""
    made = []
    for _ in range(len(timings) if isinstance(timings, list) else timings[2]):
        shared = choices.share(site)
        made.append(shared)
        t = timings[len(made) - 1] if isinstance(timings, list) else timings[shared]
        choices.record(site, shared, t)
    return made


def test_a_long_shared_run_stays_shared_but_for_a_try_alone_now_and_then():
    choices = row_parallel._Choices()
    site = choices.site(lambda s, e: None, 1 << 20)
    every = row_parallel.EXPLORE_EVERY
    made = _timed(choices, site, (0.1, 2 * row_parallel.LONG_RUN_SECONDS, 2 * every))
    assert made == [(i + 1) % every != 0 for i in range(2 * every)]


def test_a_short_site_takes_the_faster_way_from_the_minimum_of_its_first_two_runs():
    choices = row_parallel._Choices()
    site = choices.site(lambda s, e: None, 1 << 20)
    # shared 0.3 ms then 0.1 (a first run's one-time costs), alone 0.2 twice: shared wins
    made = _timed(choices, site, [0.0003, 0.0002, 0.0001, 0.0002, 0.0001, 0.0001])
    assert made == [True, False, True, False, True, True]
    alone_wins = row_parallel._Choices()
    site = alone_wins.site(lambda s, e: None, 1 << 20)
    made = _timed(alone_wins, site, [0.0003, 0.0002, 0.00025, 0.0002, 0.0002, 0.0002])
    assert made == [True, False, True, False, False, False]


def test_a_millisecond_site_stays_shared_until_its_first_exploration():
    """A shared run of PRESUMED_SHARED_SECONDS or more: shared up to FIRST_EXPLORE, then
    alone twice, then the faster way (here alone: 2 ms against 3 shared)."""
    choices = row_parallel._Choices()
    site = choices.site(lambda s, e: None, 1 << 20)
    first = row_parallel.FIRST_EXPLORE
    assert 0.003 < row_parallel.LONG_RUN_SECONDS and 0.003 >= row_parallel.PRESUMED_SHARED_SECONDS
    made = _timed(choices, site, (0.002, 0.003, first + 4))
    assert made == [True] * (first - 1) + [False] * 5


def test_sites_are_told_apart_by_code_and_size():
    choices = row_parallel._Choices()
    f, g = (lambda s, e: None), (lambda s, e: 1)
    assert choices.site(f, 1000) is choices.site(f, 1023)  # one power of two
    assert choices.site(f, 1000) is not choices.site(f, 1024)
    assert choices.site(f, 1000) is not choices.site(g, 1000)
    # a caller's key tells apart calls of one code and size (a model's layers of one kind)
    assert choices.site(f, 1000, ("layer", 1)) is choices.site(f, 1023, ("layer", 1))
    assert choices.site(f, 1000, ("layer", 1)) is not choices.site(f, 1000, ("layer", 2))
    assert choices.site(f, 1000, ("layer", 1)) is not choices.site(f, 1000)


def test_each_convolution_layer_decides_for_itself(monkeypatch):
    """Two convolutions of one size whose bands share oppositely: keyed by the layer's
    geometry, each keeps its own way (by size alone, one's timings decided for both)."""
    import numpy as np

    from ember.backends import array_conv

    monkeypatch.setattr(array_conv, "DIRECT", False)  # the im2col path's bands (llvm_conv's
    # pieces go to llvm_spin's helpers, which do not time sites)
    monkeypatch.setattr(row_parallel, "_choices", row_parallel._Choices())
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    sites = []
    real = row_parallel._Choices.site

    def site(self, fn, elements, key=None):
        sites.append(key)
        return real(self, fn, elements, key)

    monkeypatch.setattr(row_parallel._Choices, "site", site)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 64, 64)).astype(np.float32)
    w3, w1 = rng.standard_normal((16, 16, 3, 3)), rng.standard_normal((144, 16, 1, 1))
    for w, pad in ((w3.astype(np.float32), 1), (w1.astype(np.float32), 0)):
        array_conv.conv2d(np, x, w, None, (1, 1), (pad, pad), (1, 1), 1)
    assert len(sites) == 2 and sites[0] != sites[1] and None not in sites


def test_one_slow_run_does_not_turn_a_site_but_lasting_load_does():
    choices = row_parallel._Choices()
    site = choices.site(lambda s, e: None, 1 << 20)
    # warm-up: shared 0.2 ms, alone 0.1 ms, twice each; then alone
    made = _timed(choices, site, [0.0002, 0.0001, 0.0002, 0.0001])
    assert made == [True, False, True, False]
    # one alone run preempted for 1 ms (a running average would now favour sharing)
    assert _timed(choices, site, [0.001, 0.0001, 0.0001]) == [False, False, False]
    # alone runs slow for a whole window: sharing is taken
    made = _timed(choices, site, [0.0005] * row_parallel.WINDOW + [0.0002])
    assert made == [False] * row_parallel.WINDOW + [True]


def test_run_either_keys_each_code_object_apart(monkeypatch):
    """run_either's key is a code object: two of one size keep their own timings."""
    choices = row_parallel._Choices()
    monkeypatch.setattr(row_parallel, "_choices", choices)
    f, g = (lambda: None), (lambda: 1)
    row_parallel.run_either(f.__code__, 1000, f, f)
    row_parallel.run_either(g.__code__, 1000, g, g)
    assert len(choices.sites) == 2
    assert choices.site(f.__code__, 1000) is not choices.site(g.__code__, 1000)


@pytest.mark.parametrize("alone, way", [(0.9, "shared"), (0.7, "alone")])
def test_run_either_keeps_sharing_unless_alone_is_clearly_faster(monkeypatch, alone, way):
    """The spinning helpers' sites run alone only where alone took under SPIN_MARGIN of
    sharing's time (100 us shared): 90 us is noise, 70 us is a core lost."""
    choices = row_parallel._Choices()
    monkeypatch.setattr(row_parallel, "_choices", choices)
    clock = [0.0]
    monkeypatch.setattr(row_parallel.time, "perf_counter", lambda: clock[0])
    ways = []

    def run(name, seconds):
        def go():
            ways.append(name)
            clock[0] += seconds
        return go

    key = (lambda: None).__code__
    for _ in range(12):
        row_parallel.run_either(key, 1 << 20, run("shared", 1e-4), run("alone", alone * 1e-4))
    assert ways[4:] == [way] * 8, ways


def test_run_either_keys_each_operand_apart(monkeypatch):
    """Two products of one size (two weights) keep their own timings: a site's choice
    compares one product's runs, not the least of several products'."""
    choices = row_parallel._Choices()
    monkeypatch.setattr(row_parallel, "_choices", choices)
    key = (lambda: None).__code__
    for weight in (0x1000, 0x2000, 0x1000):
        row_parallel.run_either(key, 1 << 20, lambda: None, lambda: None, operand=weight)
    assert len(choices.sites) == 2
    assert choices.site(key, 1 << 20, 0x1000).calls == 2


def test_a_product_site_is_its_weights(monkeypatch, jit):  # noqa: F811
    """array_qmatmul's compiled products key run_either by their weight."""
    import numpy as np

    from ember.backends import array_qmatmul
    from ember.io.quant import GGMLType
    from test_qmatmul_cpu import weight

    operands = []
    real = row_parallel.run_either

    def run_either(key, elements, shared, alone, operand=None):
        operands.append(operand)
        return real(key, elements, shared, alone, operand)

    monkeypatch.setattr(array_qmatmul, "run_either", run_either)
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    rng = np.random.default_rng(0)
    a, b = (weight(rng, GGMLType.Q8_0, 512, 8) for _ in range(2))
    x = rng.standard_normal((1, a.shape[1])).astype(np.float32)
    for w in (a, b, a):
        array_qmatmul.qmatmul_rows(x, w, np.empty((1, 512), np.float32), path="fused")
    if not operands:
        pytest.skip("no spinning helpers here: the products share through run_rows")
    assert len(set(operands)) == 2 and operands[0] == operands[2]


def test_a_run_the_helpers_slept_through_is_not_timed_and_sharing_is_tried_again(monkeypatch):
    """shared() returning False (the helpers slept: the caller ran it all and woke them)
    records nothing, and the site's next call runs shared again; had such runs counted as
    shared, a site that ran alone a while (its helpers then asleep) would find sharing
    slow at every try and stay alone for good."""
    choices = row_parallel._Choices()
    monkeypatch.setattr(row_parallel, "_choices", choices)
    key = (lambda: None).__code__
    ways, asleep = [], [True, True]

    def shared():
        ways.append("shared")
        return not (asleep and asleep.pop())

    def alone():
        ways.append("alone")

    for _ in range(4):
        row_parallel.run_either(key, 1 << 20, shared, alone)
    site = choices.site(key, 1 << 20)
    assert ways == ["shared", "shared", "shared", "alone"]
    assert site.runs == [1, 1]  # the two runs with sleeping helpers were not timed
