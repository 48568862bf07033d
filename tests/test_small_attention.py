"""The numpy backend's attention for a decode step's few queries (array_small_attention):
llvm_attention's compiled kernel where it is built, numpy's tile arithmetic otherwise
(EMBER_JIT=0: array_attention's bits on the same views); float64's values either way,
the numpy form for what the kernel does not take, and array_attention keeps every case
above the small path's bounds."""

import time

import numpy as np
import pytest

import ember
import ember.functional as F
from ember.backends import array_attention, array_small_attention


def _views(rng, batch, tq, tk, d, cache):
    """q contiguous, k and v the first tk positions of a longer cache (strided), as a
    decode step reads them."""
    q = rng.standard_normal(batch + (tq, d)).astype(np.float32)
    kv = rng.standard_normal((2,) + batch + (cache, d)).astype(np.float32)
    return q, kv[0][..., :tk, :], kv[1][..., :tk, :]


def _reference(q, k, v, scale, mask=None):
    s = (q.astype(np.float64) * scale) @ np.swapaxes(k, -1, -2).astype(np.float64)
    if mask is not None:
        s = s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


SHAPES = [((1, 3), 3, 161), ((2, 4), 1, 37), ((), 8, 5), ((1, 8), 1, 1500)]
IDS = ["gqa-decode", "batch-of-two", "no-batch", "cross-attention"]


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_small_attention_without_the_kernel_has_the_tiled_paths_bits(shape, monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")
    batch, tq, tk = shape
    q, k, v = _views(np.random.default_rng(3), batch, tq, tk, 64, tk + 40)
    be = ember.Device.cpu().backend
    assert array_small_attention.is_small(q, k)
    got = array_small_attention.attention(np, q, k, v, 0.125)
    want = array_attention.attention(be, q, k, v, None, 0.125, ember.float32)
    assert got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, _reference(q, k, v, 0.125), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_the_kernel_gives_float64s_values_on_strided_stacks(
    shape, masked, attention_kernels, monkeypatch
):
    batch, tq, tk = shape
    rng = np.random.default_rng(5)
    q, k, v = _views(rng, batch, tq, tk, 64, tk + 40)  # k, v: strided views of a cache
    mask = None
    if masked:
        mask = np.where(rng.random(batch + (tq, tk)) < 0.3, -np.inf, 0).astype(np.float32)
        mask[..., 0] = 0  # every row keeps a key
    calls = []
    real = attention_kernels.attend
    monkeypatch.setattr(attention_kernels, "attend", lambda *a: calls.append(a) or real(*a))
    got = array_small_attention.attention(np, q, k, v, 0.125, mask)
    assert len(calls) == 1  # the kernel took it, in one call
    assert got.shape == batch + (tq, 64) and got.flags.c_contiguous
    np.testing.assert_allclose(got, _reference(q, k, v, 0.125, mask), rtol=1e-5, atol=1e-6)


def test_what_the_kernel_leaves_goes_the_numpy_way(attention_kernels):
    """A mask broadcast over heads (strides that do not merge), a row with every key
    masked, a NaN: numpy's tile on the whole call, so numpy's results to the bit (a
    fully masked row: its NaNs)."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 3, 3, 16)).astype(np.float32)
    k, v = (rng.standard_normal((2, 3, 30, 16)).astype(np.float32) for _ in range(2))
    padding = np.zeros((2, 1, 1, 30), np.float32)
    padding[1, ..., :7] = -np.inf
    no_key = np.zeros((2, 3, 3, 30), np.float32)
    no_key[0, 1, 2] = -np.inf
    q_nan = q.copy()
    q_nan[1, 0, 0, 0] = np.nan
    cases = [(q, np.broadcast_to(padding, (2, 3, 3, 30))), (q, no_key), (q_nan, None)]

    with np.errstate(invalid="ignore"):
        got = [array_small_attention.attention(np, a, k, v, 0.25, m) for a, m in cases]
        for g, (a, m) in zip(got, cases, strict=True):
            want = np.empty_like(g)
            array_attention.tile(np, a * 0.25, np.swapaxes(k, -1, -2), v, want, mask=m)
            np.testing.assert_array_equal(g, want)
    np.testing.assert_allclose(got[0], _reference(q, k, v, 0.25, cases[0][1]), rtol=1e-5, atol=1e-6)
    assert np.isnan(got[1][0, 1, 2]).all() and np.isnan(got[2][1, 0, 0]).all()


def test_decode_attention_takes_the_small_path_and_large_ones_do_not(monkeypatch):
    calls = []
    real = array_small_attention.attention
    monkeypatch.setattr(
        array_small_attention, "attention", lambda *a: calls.append(a[1].shape) or real(*a)
    )
    rng = np.random.default_rng(4)
    q, k, v = (ember.tensor(a) for a in _views(rng, (1, 3), 3, 20, 16, 30))
    want = real(np, q.numpy(), k.numpy(), v.numpy(), 0.25)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, v).numpy(), want)
    assert calls == [(1, 3, 3, 16)]
    # more query rows than a decode step's (a prompt, a ViT window), or more scores in
    # all (SAM's decoder over a 64 x 64 grid): array_attention's tiles and threads
    for batch, tq, tk in (((1, 3), 17, 20), ((1, 8), 7, 4096)):
        q, k, v = (ember.tensor(a) for a in _views(rng, batch, tq, tk, 16, tk))
        assert not array_small_attention.is_small(q.numpy(), k.numpy())
        F.scaled_dot_product_attention(q, k, v).numpy()
    assert len(calls) == 1


@pytest.mark.parametrize("mask_kind", ["none", "some keys", "a row of none"])
def test_heads_shared_with_the_spinning_helpers_give_one_calls_bits(
    mask_kind, attention_kernels, monkeypatch
):
    """A step's heads offered to llvm_spin's helpers (Whisper's cross-attention) give the
    bits of one call on one thread, and a row the kernel leaves undone in any part sends
    the whole call the numpy way, as one call does."""
    from ember.backends import row_parallel

    if attention_kernels.helpers(2) is None:
        pytest.skip("no spinning helpers on this CPU (llvm_spin: x86-64 only)")
    rng = np.random.default_rng(11)
    q, k, v = _views(rng, (1, 8), 1, 1500, 64, 1540)
    mask = None
    if mask_kind != "none":
        mask = np.where(rng.random((1, 8, 1, 1500)) < 0.3, -np.inf, 0).astype(np.float32)
        mask[..., 0] = 0
        if mask_kind == "a row of none":
            mask[0, 6] = -np.inf
    monkeypatch.setitem(row_parallel._state, "spin_bound", False)
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    with np.errstate(invalid="ignore"):
        want = array_small_attention.attention(np, q, k, v, 0.125, mask)
        monkeypatch.setitem(row_parallel._state, "workers", 2)
        monkeypatch.setattr(row_parallel, "_choices", row_parallel._Choices())
        split = []
        real = attention_kernels.attend_split
        monkeypatch.setattr(
            attention_kernels, "attend_split", lambda *a: split.append(a) or real(*a)
        )
        for _ in range(6):  # run_either tries both ways, the shared one first
            np.testing.assert_array_equal(
                array_small_attention.attention(np, q, k, v, 0.125, mask), want
            )
    assert split
    if mask_kind == "a row of none":
        assert np.isnan(want[0, 6]).all()
    else:
        np.testing.assert_allclose(want, _reference(q, k, v, 0.125, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("helpers_count", [1, 3])
def test_the_split_kernel_runs_parts_on_the_helpers_with_one_calls_bits(
    helpers_count, attention_kernels
):
    """attend_split's parts, run by helpers kept awake, write the bits one attend call
    writes, and count the same undone rows (heads 2 and 5 wholly masked)."""
    from ember.backends import llvm_build, llvm_spin

    if attention_kernels.helpers(2) is None:
        pytest.skip("no spinning helpers on this CPU (llvm_spin: x86-64 only)")
    rng = np.random.default_rng(13)
    q, k, v = _views(rng, (1, 7), 2, 300, 32, 310)
    mask = np.where(rng.random((1, 7, 2, 300)) < 0.3, -np.inf, 0).astype(np.float32)
    mask[..., 0] = 0
    mask[0, [2, 5], 1] = -np.inf
    operands = [(a, a.strides[1] // 4, a.strides[2] // 4) for a in (q, k, v, mask)]
    want, got = np.zeros((2, 1, 7, 2, 32), np.float32)
    undone = attention_kernels.attend(
        operands + [(want, 64, 32)], 7, 2, 300, 32, 32, 0.125, np.empty(632, np.float32)
    )
    helpers = llvm_spin.Helpers(llvm_build.kernels("llvm_spin").spin, helpers_count, 1 << 50)
    try:
        helpers.wake((1 << helpers_count) - 1)
        deadline = time.monotonic() + 30  # generous for a loaded machine; never reached
        while any(s == llvm_spin.ASLEEP for s in helpers.slots[:, 0]):
            assert time.monotonic() < deadline, "a woken helper never started spinning"
            time.sleep(0.0005)
        got_undone, helped = attention_kernels.attend_split(
            operands + [(got, 64, 32)],
            7,
            2,
            300,
            32,
            32,
            0.125,
            np.empty(7 * 632, np.float32),
            helpers,
        )
        assert sum(helpers.jobs()) == helpers_count  # each helper ran its part
        assert helped  # and the split says so
    finally:
        helpers.close()
    assert undone == got_undone == 2
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
