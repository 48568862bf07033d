"""The CPU's row-parallel pool: every row once, failures reach the caller, no deadlock when
nested or after fork, and the OpenBLAS setting that makes it pay is made only when it can
take effect."""
import itertools
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from ember.backends import row_parallel


@pytest.fixture
def three_workers(monkeypatch):
    """The pool with three threads, whatever this machine has; restored afterwards."""
    monkeypatch.setitem(row_parallel._state, "workers", 3)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    yield
    pool = row_parallel._state["pool"]
    if pool is not None:
        pool.shutdown()


@pytest.fixture
def prompt_handoffs(monkeypatch):
    """No timings yet: each call site's first large enough run is shared."""
    monkeypatch.setattr(row_parallel, "_choices", row_parallel._Choices())


def _slow_in_caller(fn):
    """fn, sleeping 20 ms per range when the caller runs it and 5 ms in a pool thread: a
    pool thread has time to start and take ranges, and cannot take all of them before the
    caller takes one, whatever the machine's load."""
    caller = threading.get_ident()

    def slowed(start, stop):
        time.sleep(0.02 if threading.get_ident() == caller else 0.005)
        fn(start, stop)

    return slowed


@pytest.mark.parametrize("rows,per_row,align", [(1, 10, 1), (7, 1 << 16, 1), (1000, 300, 1),
                                                (1001, 1 << 12, 8), (5, 1 << 20, 4)])
def test_every_row_exactly_once(three_workers, prompt_handoffs, rows, per_row, align):
    ranges, threads, lock = [], set(), threading.Lock()

    def fn(start, stop):
        with lock:
            ranges.append((start, stop))
            threads.add(threading.get_ident())

    row_parallel.run_rows(_slow_in_caller(fn), rows, per_row, align)
    ranges.sort()
    # contiguous, disjoint, covering [0, rows), every start on the alignment
    assert ranges[0][0] == 0 and ranges[-1][1] == rows
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(start % align == 0 and start < stop for start, stop in ranges)
    threads_wanted = max(1, min(3, rows * per_row // row_parallel.MIN_PARALLEL_ELEMENTS,
                                -(-rows // align)))
    if threads_wanted == 1:  # too little work to share: one call, on the caller
        assert ranges == [(0, rows)] and threads == {threading.get_ident()}
    else:  # shared (no timing yet): several ranges, taken by whichever threads were free
        assert len(ranges) > 1
        assert len(ranges) <= row_parallel.CHUNKS_PER_THREAD * threads_wanted
        assert len(threads) >= 2


def test_a_failing_range_raises_in_the_caller_after_all_ranges_ran(three_workers, prompt_handoffs):
    done = []

    def fn(start, stop):
        done.append((start, stop))
        if start > 0:
            raise RuntimeError(f"range from {start} failed")

    with pytest.raises(RuntimeError, match="range from"):
        row_parallel.run_rows(fn, 300, 1 << 16)
    assert sorted(r for s, e in done for r in range(s, e)) == list(range(300))


def test_the_first_failure_in_row_order_is_raised(three_workers, prompt_handoffs):
    def fn(start, stop):
        if start > 0:
            time.sleep(0.01 if start < 150 else 0)  # the later range fails first
            raise RuntimeError(f"range from {start} failed")

    with pytest.raises(RuntimeError) as failure:
        row_parallel.run_rows(_slow_in_caller(fn), 300, 1 << 16)
    starts = [s for s, _ in row_parallel._ranges(300, 1, 3 * row_parallel.CHUNKS_PER_THREAD)]
    assert str(failure.value) == f"range from {starts[1]} failed"


def test_nested_calls_run_serially_inside_a_worker(three_workers, prompt_handoffs):
    inner, lock = [], threading.Lock()

    def fn(start, stop):
        where = threading.current_thread().name
        calls = []
        row_parallel.run_rows(lambda s, e: calls.append((s, e)), 100, 1 << 16)
        with lock:
            inner.append((where, calls))

    row_parallel.run_rows(_slow_in_caller(fn), 300, 1 << 16)
    in_workers = [calls for where, calls in inner if where.startswith("ember-rows")]
    assert in_workers and all(calls == [(0, 100)] for calls in in_workers)


def test_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setitem(row_parallel._state, "workers", None)
    monkeypatch.setenv("EMBER_CPU_THREADS", "1")
    assert row_parallel.workers() == 1
    monkeypatch.setitem(row_parallel._state, "workers", None)
    monkeypatch.setenv("EMBER_CPU_THREADS", "many")
    with pytest.raises(ValueError, match="EMBER_CPU_THREADS must be a whole number, got 'many'"):
        row_parallel.workers()
    monkeypatch.setitem(row_parallel._state, "workers", None)


PROBE = textwrap.dedent("""
    import json, os, sys
    if sys.argv[1] == "numpy-first":
        import numpy
    if sys.argv[1] == "numpy-module-first":
        import ember.corpus.job  # imports numpy at load time, after ember's __init__
        assert "numpy" in sys.modules
    import ember
    from ember.backends import row_parallel
    ember.Device.cpu()
    print(json.dumps({"timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
                      "workers": row_parallel.workers(), "cpus": row_parallel._cpu_count()}))
""")


def _probe(mode, **env):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("OPENBLAS_THREAD_TIMEOUT", "EMBER_CPU_THREADS")}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         env=dict(clean, **env), check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_ember_quiets_openblas_idle_workers_before_it_imports_numpy():
    r = _probe("ember-first")
    assert r["timeout"] == "18"
    assert r["workers"] == min(r["cpus"], 8)


def test_an_ember_module_that_loads_numpy_first_still_gets_the_setting():
    r = _probe("numpy-module-first")
    assert r["timeout"] == "18"
    assert r["workers"] == min(r["cpus"], 8)


def test_a_users_setting_wins_and_a_late_one_is_not_made():
    r = _probe("ember-first", OPENBLAS_THREAD_TIMEOUT="25")
    assert r["timeout"] == "25" and r["workers"] == 1   # workers spin too long: no split
    r = _probe("numpy-first")
    assert r["timeout"] is None and r["workers"] == 1   # numpy already loaded OpenBLAS


FORK = textwrap.dedent("""
    import os
    from ember.backends import row_parallel
    row_parallel._state["workers"] = 2
    rows = []
    row_parallel.run_rows(lambda s, e: rows.append((s, e)), 100, 1 << 16)  # starts the pool
    pid = os.fork()
    if pid == 0:
        got = []
        row_parallel.run_rows(lambda s, e: got.extend(range(s, e)), 100, 1 << 16)
        os._exit(0 if sorted(got) == list(range(100)) else 3)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform has no fork()")
def test_a_forked_child_gets_a_pool_of_its_own():
    # The timeout only guards against a hang (a child waiting on its parent's threads).
    done = subprocess.run([sys.executable, "-c", FORK], capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.strip().endswith("child 0"), done.stdout + done.stderr
