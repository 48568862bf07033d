"""The CPU's row-parallel pool: every row once, failures reach the caller, no deadlock when
nested or after fork, and the OpenBLAS setting that makes it pay is made only when it can
take effect."""
import json
import os
import subprocess
import sys
import textwrap
import threading

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


@pytest.mark.parametrize("rows,per_row,align", [(1, 10, 1), (7, 1 << 16, 1), (1000, 300, 1),
                                                (1001, 1 << 12, 8), (5, 1 << 20, 4)])
def test_every_row_exactly_once(three_workers, rows, per_row, align):
    seen, calls, threads, lock = [], [], set(), threading.Lock()

    def fn(start, stop):
        with lock:
            seen.extend(range(start, stop))
            calls.append(start)
            threads.add(threading.get_ident())
        assert start % align == 0

    row_parallel.run_rows(fn, rows, per_row, align)
    assert sorted(seen) == list(range(rows))
    parts = max(1, min(3, rows * per_row // row_parallel.MIN_PARALLEL_ELEMENTS,
                       -(-rows // align)))
    assert len(calls) == parts
    # The caller takes one range, the pool the others (one pool thread may take two).
    assert len(threads) == min(parts, 2) or len(threads) == parts
    assert (threading.get_ident() in threads)


def test_a_failing_range_raises_in_the_caller_after_all_ranges_ran(three_workers):
    done = []

    def fn(start, stop):
        done.append(start)
        if start > 0:
            raise RuntimeError(f"range from {start} failed")

    with pytest.raises(RuntimeError, match="range from"):
        row_parallel.run_rows(fn, 300, 1 << 16)
    assert len(done) == 3


def test_nested_calls_run_serially_inside_a_worker(three_workers):
    inner = []

    def fn(start, stop):
        row_parallel.run_rows(lambda s, e: inner.append((s, e)), 100, 1 << 16)

    row_parallel.run_rows(fn, 300, 1 << 16)
    # The caller's range may split again; the two workers' ranges may not.
    assert inner.count((0, 100)) >= 2


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
