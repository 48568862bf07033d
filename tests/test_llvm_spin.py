"""llvm_spin's spinning helper threads, through llvm_f16's dot split over them
(llvm_attention's split is tested beside its kernel, tests/test_small_attention.py): the
split's bits are the whole kernel's, the helpers run parts, sleep when idle, are woken
by a caller that found them asleep, stop without dropping a job, serve two callers at
once, and a forked child gets helpers of its own."""

import multiprocessing
import threading
import time

import numpy as np
import pytest
from test_gguf import assert_same_bits
from test_qmatmul_f16 import jit  # noqa: F401  (the fixture)

from ember.backends import llvm_build, llvm_spin
from ember.backends import row_parallel

# generous bounds on waits for a thread's state to change (a loaded CI machine), never
# reached when the helpers work
PATIENCE = 30.0
AWAKE = 1 << 50  # cycles: helpers that stay awake until closed (a test's own)


@pytest.fixture
def spin(jit):  # noqa: F811
    """llvm_f16's kernels, where this CPU has the helpers' compiled wait (WAIT)"""
    if llvm_build.kernels("llvm_spin") is None:
        pytest.skip("no spinning helpers on this CPU (llvm_spin.supported: x86-64 only)")
    return jit


def wait():
    """the helpers' compiled wait (llvm_spin's own kernel module)"""
    return llvm_build.kernels("llvm_spin").spin


def halves_and_x(seed, rows, cols, m):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * 0.3).astype(np.float16).view(np.uint16)
    return w, rng.standard_normal((m, cols)).astype(np.float32)


def wait_for(predicate):
    end = time.monotonic() + PATIENCE
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.0005)
    return True


def awake(helpers):
    return all(s != llvm_spin.ASLEEP for s in helpers.slots[:, 0])


def wake_all(helpers):
    helpers.wake((1 << helpers.count) - 1)
    assert wait_for(lambda: awake(helpers)), "a woken helper never started spinning"


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("rows", [1, 2, 3, 7, 64, 301])
@pytest.mark.parametrize("m", [1, 3])
def test_a_split_product_has_the_whole_kernels_bits_and_writes_only_its_columns(
    spin, count, rows, m
):
    w, x = halves_and_x(rows * 10 + m, rows, 70, m)
    want = np.empty((m, rows), np.float32)
    spin.dot(w, x, want, 0, rows)
    helpers = llvm_spin.Helpers(wait(), count, AWAKE)
    try:
        wake_all(helpers)
        wide = np.full((m, rows + 9), -7.0, np.float32)
        spin.dot_split(w, x, wide[:, 4 : 4 + rows], 0, rows, helpers)
        assert_same_bits(wide[:, 4 : 4 + rows], want)
        assert (wide[:, :4] == -7.0).all() and (wide[:, 4 + rows :] == -7.0).all()
        # parts beyond the rows' end are not posted: a helper ran a part only if it had one
        parts = -(-rows // (count + 1))
        parts = -(-parts // 2) * 2
        with_rows = [i for i in range(count) if (i + 1) * parts < rows]
        assert all(helpers.jobs()[i] == 0 for i in range(count) if i not in with_rows)
        assert wait_for(lambda: all(helpers.jobs()[i] == 1 for i in with_rows))
    finally:
        helpers.close()


def product_and_helpers(spin, seed, rows, cols, m, count):
    """(w, x, the whole kernel's product, `count` new helpers that stay awake once woken)"""
    w, x = halves_and_x(seed, rows, cols, m)
    want = np.empty((m, rows), np.float32)
    spin.dot(w, x, want, 0, rows)
    return w, x, want, llvm_spin.Helpers(wait(), count, AWAKE)


def test_a_sleeping_helper_leaves_the_product_to_the_caller_and_is_woken(spin):
    w, x, want, helpers = product_and_helpers(spin, 1, 512, 128, 1, 1)
    try:
        assert helpers.slots[0, 0] == llvm_spin.ASLEEP
        got = np.empty_like(want)
        # the caller ran it all, woke the helper, and says the run was not shared
        assert spin.dot_split(w, x, got, 0, 512, helpers) is False
        assert_same_bits(got, want)
        assert helpers.jobs() == [0]
        assert wait_for(lambda: awake(helpers)), "the caller did not wake the helper"
        assert spin.dot_split(w, x, got, 0, 512, helpers) is True
        assert helpers.jobs() == [1]
        assert_same_bits(got, want)
    finally:
        helpers.close()


def test_ready_wakes_sleeping_helpers_and_returns_once_they_spin(spin):
    helpers = llvm_spin.Helpers(wait(), 2, AWAKE)
    try:
        assert all(s == llvm_spin.ASLEEP for s in helpers.slots[:, 0])
        helpers.ready(patience=PATIENCE)
        assert awake(helpers)
        helpers.ready(patience=PATIENCE)  # none asleep: nothing to do, returns at once
        assert awake(helpers)
    finally:
        helpers.close()


def test_a_long_product_wakes_its_sleeping_helper_before_splitting(spin, monkeypatch):
    # above WAKE_FOR weights times rows the caller waits for the helper instead of
    # running the helper's part itself; below it, the helper's part is the caller's
    from ember.backends import llvm_products

    w, x, want, helpers = product_and_helpers(spin, 3, 512, 128, 1, 1)
    try:
        got = np.empty_like(want)
        monkeypatch.setattr(llvm_products, "WAKE_FOR", 512 * 128 + 1)
        assert spin.dot_split(w, x, got, 0, 512, helpers) is False  # asleep: ran alone
        assert helpers.jobs() == [0]
        helpers.close()  # asleep for good: a fresh set for the long product
        helpers = llvm_spin.Helpers(wait(), 1, AWAKE)
        monkeypatch.setattr(llvm_products, "WAKE_FOR", 512 * 128)
        monkeypatch.setattr(llvm_spin, "READY_PATIENCE", PATIENCE)
        assert spin.dot_split(w, x, got, 0, 512, helpers) is True
        assert helpers.jobs() == [1]
        assert_same_bits(got, want)
    finally:
        helpers.close()


def test_an_idle_helper_goes_back_to_sleep(spin):
    w, x = halves_and_x(8, 512, 128, 1)
    helpers = llvm_spin.Helpers(wait(), 1, idle_cycles=1000)
    try:
        out = np.empty((1, 512), np.float32)
        spin.dot_split(w, x, out, 0, 512, helpers)  # wakes it
        # woken, it spins for its 1000 cycles of the time-stamp counter, then sleeps
        assert wait_for(lambda: helpers.slots[0, 0] == llvm_spin.ASLEEP and
                        not helpers._wake[0].is_set())
        assert helpers._threads[0].is_alive()  # asleep, not gone
    finally:
        helpers.close()


def test_closed_helpers_stop_and_callers_then_run_alone(spin):
    w, x, want, helpers = product_and_helpers(spin, 2, 256, 64, 2, 2)
    wake_all(helpers)
    helpers.close()
    assert not any(t.is_alive() for t in helpers._threads)
    assert all(s == llvm_spin.ASLEEP for s in helpers.slots[:, 0])
    got = np.empty_like(want)
    spin.dot_split(w, x, got, 0, 256, helpers)
    assert_same_bits(got, want)
    assert helpers.jobs() == [0, 0]


def test_two_callers_share_the_helpers_and_each_gets_its_own_products(spin):
    helpers = llvm_spin.Helpers(wait(), 1, AWAKE)
    cases = [halves_and_x(seed, 400, 96, 1) for seed in (3, 4)]
    wants = []
    for w, x in cases:
        wants.append(np.empty((1, 400), np.float32))
        spin.dot(w, x, wants[-1], 0, 400)
    wrong = []

    def caller(i):
        w, x = cases[i]
        out = np.empty((1, 400), np.float32)
        for _ in range(300):
            out[:] = np.nan
            spin.dot_split(w, x, out, 0, 400, helpers)
            if not np.array_equal(out.view(np.uint32), wants[i].view(np.uint32)):
                wrong.append(i)

    try:
        wake_all(helpers)
        threads = [threading.Thread(target=caller, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not wrong
        assert helpers.jobs()[0] > 0  # they did share it
    finally:
        helpers.close()


def shares_with_the_helpers(monkeypatch, product, want, helpers):
    """product() (a fused qmatmul) run until one was shared with the process's helpers,
    then more: each time the bits `want` of one thread's kernel."""
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    monkeypatch.setitem(row_parallel._state, "spin_bound", False)
    monkeypatch.setattr(row_parallel, "_choices", row_parallel._Choices())
    before = sum(helpers.jobs())
    # the first run wakes the helper, which starts spinning once it gets the GIL (a few
    # products later on a loaded machine); run_either tries both ways, then the faster
    end = time.monotonic() + PATIENCE
    while sum(helpers.jobs()) == before:
        assert time.monotonic() < end, "no product was shared with the helper"
        assert_same_bits(product(), want)
        monkeypatch.setattr(row_parallel, "_choices", row_parallel._Choices())  # shared first
    for _ in range(20):
        assert_same_bits(product(), want)


def test_the_f16_product_runs_on_the_processes_helpers(spin, monkeypatch):
    """array_qmatmul's fused F16 path shares a product run_rows would share with the
    process's helpers (while it times faster): the bits of one thread's kernel (a block
    type's: tests/test_qmatmul_llvm_quant.py)."""
    from ember.io import quant
    from ember.io.quant import GGMLType, QTensor

    w, x = halves_and_x(5, 1024, 256, 1)
    weight = QTensor(w.view(np.uint8), GGMLType.F16, w.shape)
    want = np.empty((1, 1024), np.float32)
    spin.dot(w, x, want, 0, 1024)
    shares_with_the_helpers(
        monkeypatch, lambda: quant.qmatmul(x, weight, path="fused"), want, spin.helpers(2)
    )


def _child_product(queue):
    from ember.backends import llvm_f16

    kernels = llvm_f16.kernels()
    w, x = halves_and_x(6, 300, 64, 1)
    want, got = np.empty((1, 300), np.float32), np.empty((1, 300), np.float32)
    kernels.dot(w, x, want, 0, 300)
    helpers = kernels.helpers(2)
    for _ in range(50):
        kernels.dot_split(w, x, got, 0, 300, helpers)
    queue.put((helpers.pid, bool(np.array_equal(got, want))))


def test_a_forked_child_gets_helpers_of_its_own(spin, monkeypatch):
    """The parent's helpers spin (their slots IDLE) when it forks: a child using them
    would post to threads it does not have and wait forever."""
    import os

    parent = llvm_spin.Helpers(wait(), 1, AWAKE)
    monkeypatch.setitem(llvm_spin._state, "helpers", parent)
    try:
        assert spin.helpers(2) is parent
        wake_all(parent)
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=_child_product, args=(queue,))
        child.start()
        child.join(PATIENCE)
        if child.exitcode is None:
            child.kill()
        assert child.exitcode == 0, "the child hung or failed on its parent's helpers"
        pid, same = queue.get(timeout=PATIENCE)
        assert pid != os.getpid() and same
    finally:
        parent.close()
