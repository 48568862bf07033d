"""row_parallel.run_rows with a worker that starts late or not at all: the caller takes the
ranges no worker has taken instead of waiting for them (a decode step's small kernels on a
busy machine) and waits only for ranges a worker is running; a call site where sharing
measured slower than one thread runs on one thread, and one where it measured faster is
shared; every row still runs exactly once."""
import threading
import time

import pytest

from ember.backends import row_parallel


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

    def fn(start, stop):  # a worker's range costs 20 ms, the caller's nothing
        if threading.get_ident() != caller:
            time.sleep(0.02)
        seen.extend(range(start, stop))

    every = row_parallel.EXPLORE_EVERY
    for _ in range(every + 1):
        row_parallel.run_rows(fn, 300, 1 << 16)
    # first shared (no timing yet), then alone once; then alone but for one try in EXPLORE_EVERY
    assert made[:2] == [True, False]
    assert made[2:] == [(i + 1) % every == 0 for i in range(2, every + 1)]
    assert sorted(seen) == sorted(list(range(300)) * (every + 1))


def test_a_site_where_sharing_measured_faster_is_shared(two_workers, monkeypatch):
    made = _decisions(monkeypatch)

    def fn(start, stop):  # 0.1 ms a row on any thread: two threads halve it
        time.sleep(1e-4 * (stop - start))

    for _ in range(6):
        row_parallel.run_rows(fn, 300, 1 << 16)
    assert made == [True, False, True, True, True, True]
