"""blas_threads.single_thread_below: small products on one BLAS thread, those in the timed
range on one thread or all as measured faster for their size, big ones left alone; and
OpenBLAS's bits the same on one thread or all, which the timed choice relies on."""

import time

import numpy as np
import pytest
from helpers import ON_CI

from ember.backends import blas_threads, row_parallel


@pytest.fixture
def fake_blas(monkeypatch):
    """BLAS's thread setter replaced by one that records each count asked for, and fresh
    per-size timings."""
    asked = []
    monkeypatch.setattr(blas_threads, "_api", [(asked.append, 2)])
    monkeypatch.setattr(blas_threads, "_choices", row_parallel._Choices())
    return asked


def _threads_each_call(asked, calls, macs, cost):
    """Run `calls` products of `macs` under single_thread_below; `cost(threads)` seconds
    each. Returns the thread count each call ran with."""
    ran = []
    for _ in range(calls):
        before = len(asked)
        with blas_threads.single_thread_below(macs):
            threads = 1 if asked[before:] == [1] else 2
            time.sleep(cost(threads))
        ran.append(threads)
    return ran


@pytest.mark.parametrize("faster", [1, 2])
def test_the_timed_range_tries_both_ways_then_keeps_the_faster(fake_blas, faster):
    macs = blas_threads.TIMED_FROM_MACS * 2
    ran = _threads_each_call(fake_blas, 30, macs, lambda n: 0.0 if n == faster else 0.005)
    assert ran[:4].count(1) == 2 and ran[:4].count(2) == 2  # each way twice, first
    assert ran[4:] == [faster] * 26  # then the faster one (the other again every 100 calls)
    assert fake_blas.count(1) == fake_blas.count(2) == ran.count(1)  # one thread, then back


def test_below_the_timed_range_one_thread_and_from_the_limit_nothing(fake_blas):
    ran = _threads_each_call(fake_blas, 5, blas_threads.TIMED_FROM_MACS - 1, lambda n: 0.0)
    assert ran == [1] * 5
    fake_blas.clear()
    with blas_threads.single_thread_below(blas_threads.SMALL_GEMM_MACS):
        pass
    assert fake_blas == []


def test_openblas_gives_the_same_bits_on_one_thread_or_all():
    api = blas_threads._probe()
    if api is None or api[1] < 2:
        if ON_CI:
            pytest.fail("numpy's OpenBLAS thread setter was not found, or has one thread")
        pytest.skip("numpy's BLAS is not an OpenBLAS with two or more threads here")
    setter, threads = api
    rng = np.random.default_rng(0)
    try:
        for m in (1, 3, 16):
            for n, k in ((960, 576), (3072, 576), (576, 1536), (51864, 384)):
                x = rng.standard_normal((m, k)).astype(np.float32)
                w = rng.standard_normal((n, k)).astype(np.float32)
                setter(1)
                alone = x @ w.T
                setter(threads)
                np.testing.assert_array_equal(x @ w.T, alone)
    finally:
        setter(threads)
