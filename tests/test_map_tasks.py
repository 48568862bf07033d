"""Independent calls side by side on the CPU (Backend.map_independent -> row_parallel.map_tasks):
results in order, the calls truly concurrent, each one single-threaded inside (BLAS pinned,
row work inline), the first failure raised, and the sentence embedder's vectors the same bits
as one micro-batch after another."""
import threading

import numpy as np
import pytest

from ember.backends import blas_threads, row_parallel
from ember.backends.base import Backend


@pytest.fixture
def two_workers(monkeypatch):
    """The pool with two threads, whatever this machine has; restored afterwards."""
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    yield
    pool = row_parallel._state["pool"]
    if pool is not None:
        pool.shutdown()


def test_results_keep_the_items_order(two_workers):
    items = list(range(37))
    assert row_parallel.map_tasks(lambda x: x * x, items) == [x * x for x in items]
    assert row_parallel.map_tasks(lambda x: x, []) == []


def test_two_calls_are_in_flight_at_once(two_workers):
    # Each call waits for the other at the barrier: one after the other would never meet
    # (the timeout only turns that hang into a failure).
    barrier = threading.Barrier(2, timeout=60)
    threads = set()

    def fn(item):
        threads.add(threading.get_ident())
        barrier.wait()
        return item

    assert row_parallel.map_tasks(fn, ["a", "b"]) == ["a", "b"]
    assert len(threads) == 2


def test_inside_a_call_blas_is_pinned_and_row_work_runs_inline(two_workers):
    seen = []

    def fn(item):
        inner = []
        row_parallel.run_rows(lambda s, e: inner.append((s, e)), 1000, 1 << 16)
        seen.append((blas_threads._pinned[0], inner,
                     blas_threads.single_thread_below(1) is blas_threads._NOTHING))
        return item

    row_parallel.map_tasks(fn, [1, 2, 3])
    assert seen == [(1, [(0, 1000)], True)] * 3
    assert blas_threads._pinned[0] == 0   # restored after the calls


def test_the_first_failing_item_is_raised_after_the_others_ended(two_workers):
    started = []

    def fn(item):
        started.append(item)
        if item in (3, 5):
            raise ValueError(f"item {item} failed")
        return item

    with pytest.raises(ValueError, match="item 3 failed"):
        row_parallel.map_tasks(fn, list(range(8)))
    assert 3 in started and blas_threads._pinned[0] == 0


def test_one_worker_or_a_nested_call_runs_in_the_caller(monkeypatch, two_workers):
    me = threading.get_ident()
    inner_threads = []

    def outer(item):
        row_parallel.map_tasks(lambda _: inner_threads.append(threading.get_ident()), [0, 1])
        return threading.get_ident()

    outer_threads = row_parallel.map_tasks(outer, [0, 1])
    # Each nested pair ran in its own outer call's thread.
    assert sorted(inner_threads) == sorted([t for t in outer_threads for _ in range(2)])
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    assert row_parallel.map_tasks(lambda _: threading.get_ident(), [0, 1, 2]) == [me] * 3


def test_the_contract_default_runs_in_turn():
    order = []
    assert Backend.map_independent(None, lambda x: order.append(x) or -x, [1, 2, 3]) == [-1, -2, -3]
    assert order == [1, 2, 3]


def test_sentence_embeddings_are_the_same_bits_side_by_side(two_workers, tmp_path, monkeypatch):
    from corpus_fixtures import save_tiny_model, sentences

    from ember.pipelines.sentence_embedder import SentenceEmbedder

    emb = SentenceEmbedder.from_pretrained(str(save_tiny_model(tmp_path / "st")), device="cpu")
    texts = sentences(300)
    calls = []
    real = type(emb.device.backend).map_independent
    monkeypatch.setattr(type(emb.device.backend), "map_independent",
                        lambda self, fn, items: calls.append(len(items)) or real(self, fn, items))
    side_by_side = emb.encode(texts, batch_size=16).numpy()
    # in turn on one BLAS thread, as each call side by side runs: OpenBLAS's Haswell
    # kernels give other bits on two threads, so in turn on all threads may differ there
    monkeypatch.setattr(type(emb.device.backend), "map_independent",
                        lambda self, fn, items: [fn(i) for i in items])
    with blas_threads.one_thread_throughout():
        in_turn = emb.encode(texts, batch_size=16).numpy()
    assert calls == [19] and side_by_side.shape == (300, emb.dim)   # 300 texts, 16 a batch
    np.testing.assert_array_equal(side_by_side, in_turn)


def test_set_cpu_threads_sets_the_pool_size_unless_the_environment_does(two_workers,
                                                                       monkeypatch):
    from ember import DeviceError, set_cpu_threads

    monkeypatch.delenv("EMBER_CPU_THREADS", raising=False)
    set_cpu_threads(3)
    assert row_parallel.workers() == 3
    monkeypatch.setenv("EMBER_CPU_THREADS", "2")
    set_cpu_threads(1)
    assert row_parallel.workers() == 3   # the variable's owner decides, not the call
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(DeviceError, match="set_cpu_threads: expected a whole number"):
            set_cpu_threads(bad)
