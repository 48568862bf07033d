"""blas_threads: small products on one BLAS thread, those in the timed range on one thread
or all as measured faster for their size, big ones left alone; and a timed product's bits
always one thread's, whether or not this host's OpenBLAS keeps them on all threads."""

import time

import numpy as np
import pytest
from helpers import ON_CI

from ember.backends import blas_threads, row_parallel


@pytest.fixture
def fake_blas(monkeypatch):
    """BLAS's thread setter replaced by one that records each count asked for, and fresh
    per-size timings and per-product bit checks."""
    asked = []
    monkeypatch.setattr(blas_threads, "_api", [(asked.append, 2)])
    monkeypatch.setattr(blas_threads, "_choices", row_parallel._Choices())
    monkeypatch.setattr(blas_threads, "_same_bits", {})
    return asked


def _calls(asked, calls, macs, cost, value=lambda threads: 0.0):
    """Run `calls` products of `macs` through blas_threads.product, each computing for
    `cost(threads)` seconds a one-element array of `value(threads)`. Returns, per call,
    the thread counts its computations ran with and the value it returned."""
    out = []
    for _ in range(calls):
        ran = []

        def compute(ran=ran):
            threads = asked[-1] if asked else 2
            ran.append(threads)
            time.sleep(cost(threads))
            return np.array([value(threads)], np.float32)

        y = blas_threads.product(compute, macs, key="a product")
        out.append((ran, float(y[0])))
    return out


@pytest.mark.parametrize("faster", [1, 2])
def test_the_timed_range_tries_both_ways_then_keeps_the_faster(fake_blas, faster, monkeypatch):
    # the slower way's 5 ms would be presumed faster shared (row_parallel): not the subject
    monkeypatch.setattr(row_parallel, "PRESUMED_SHARED_SECONDS", 1.0)
    macs = blas_threads.TIMED_FROM_MACS * 2
    calls = _calls(fake_blas, 30, macs, lambda n: 0.0 if n == faster else 0.005)
    assert calls[0][0] == [2, 1]  # all threads, then one to check they kept its bits
    first = [ran[0] for ran, _ in calls[:4]]
    assert first.count(1) == 2 and first.count(2) == 2  # each way twice, first
    assert [ran for ran, _ in calls[4:]] == [[faster]] * 26  # then the faster alone
    assert fake_blas[-1] == 2  # one thread only for a product, then back


def test_a_product_whose_bits_change_on_all_threads_stays_on_one(fake_blas):
    """Where all threads give other bits (OpenBLAS's Haswell kernels, 16+ rows), every
    result is one thread's, and after the first call one thread is all it runs on, even
    where all threads time faster: a timing never changes a result."""
    macs = blas_threads.TIMED_FROM_MACS * 2
    calls = _calls(fake_blas, 12, macs, lambda n: 0.0 if n == 2 else 0.002, value=float)
    assert calls[0][0] == [2, 1]
    assert all(v == 1.0 for _, v in calls)
    assert all(ran == [1] for ran, _ in calls[1:])


def test_below_the_timed_range_one_thread_and_from_the_limit_nothing(fake_blas):
    calls = _calls(fake_blas, 5, blas_threads.TIMED_FROM_MACS - 1, lambda n: 0.0)
    assert [ran for ran, _ in calls] == [[1]] * 5
    fake_blas.clear()
    calls = _calls(fake_blas, 3, blas_threads.SMALL_GEMM_MACS, lambda n: 0.0)
    assert fake_blas == [] and [ran for ran, _ in calls] == [[2]] * 3
    with blas_threads.single_thread_below(blas_threads.SMALL_GEMM_MACS):
        pass
    assert fake_blas == []


def test_real_products_in_the_timed_range_give_one_threads_bits(monkeypatch):
    """With numpy's OpenBLAS, every call of every shape taken on all threads (as a
    timing may say) returns the bits of the product on one thread."""
    api = blas_threads._probe()
    if api is None or api[1] < 2:
        if ON_CI:
            pytest.fail("numpy's OpenBLAS thread setter was not found, or has one thread")
        pytest.skip("numpy's BLAS is not an OpenBLAS with two or more threads here")
    setter, threads = api
    always_shared = row_parallel._Choices()
    monkeypatch.setattr(always_shared, "share", lambda site: True)
    monkeypatch.setattr(blas_threads, "_choices", always_shared)
    monkeypatch.setattr(blas_threads, "_same_bits", {})
    rng = np.random.default_rng(0)
    kept = []
    try:
        for m in (1, 3, 16, 37):
            for n, k in ((960, 192), (203, 96), (576, 384), (2048, 64)):  # all < 2^23
                x = rng.standard_normal((m, k)).astype(np.float32)
                w = rng.standard_normal((n, k)).astype(np.float32)
                setter(1)
                alone = x @ w.T
                setter(threads)
                macs = max(m * n * k, blas_threads.TIMED_FROM_MACS)  # timed, never above
                key = (x.shape, w.shape)
                for _ in range(3):
                    got = blas_threads.product(lambda x=x, w=w: x @ w.T, macs, key)
                    np.testing.assert_array_equal(got, alone)
                kept.append(blas_threads._same_bits[key])
    finally:
        setter(threads)
    assert len(kept) == 16  # every product's bits on all threads were checked
    print(f"OpenBLAS kept one thread's bits on all threads for {sum(kept)} of 16 products")
