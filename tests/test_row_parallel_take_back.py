"""row_parallel.run_rows(take_back=True): a range no worker has started when the caller is
done with its own is run by the caller, not waited for (a decode step's small kernels on a
busy machine); every row still runs exactly once."""
import threading

import pytest

from ember.backends import row_parallel


@pytest.fixture
def two_workers(monkeypatch):
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    yield
    pool = row_parallel._state["pool"]
    if pool is not None:
        pool.shutdown()


def test_a_range_no_worker_started_is_run_by_the_caller(two_workers):
    busy, release = threading.Event(), threading.Event()
    pool = row_parallel._pool()
    blocker = pool.submit(lambda: busy.set() or release.wait(30))  # the only worker, held
    assert busy.wait(30)
    seen, threads = [], set()

    def fn(start, stop):
        seen.extend(range(start, stop))
        threads.add(threading.get_ident())

    try:
        row_parallel.run_rows(fn, 300, 1 << 16, take_back=True)  # returns with the worker held
    finally:
        release.set()
    blocker.result(30)
    assert sorted(seen) == list(range(300))
    assert threads == {threading.get_ident()}


def test_a_started_range_is_waited_for_and_its_failure_raised(two_workers):
    def fn(start, stop):
        if start > 0:
            raise RuntimeError(f"range from {start} failed")

    with pytest.raises(RuntimeError, match="range from"):
        row_parallel.run_rows(fn, 300, 1 << 16, take_back=True)
