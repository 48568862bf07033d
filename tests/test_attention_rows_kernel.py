"""llvm_attention_rows' compiled attention of many queries (with or without an additive
mask) and array_attention_rows, which drives it for the numpy backend: float64 softmax's values
for every tail (query rows past a block, keys past a score step, v's row past a wide
product step, any head dim), rows with strides, bits that do not depend on the threads,
the runs or the operands' layout, and rows whose maximum score is not finite left to the
BLAS tiles."""

import numpy as np
import pytest

from ember.backends import array_attention, array_attention_rows, row_parallel

RNG = np.random.default_rng(23)


class _Numpy:
    xp = np


def _reference(q, k, v, scale):
    s = (q.astype(np.float64) * np.float32(scale)) @ np.swapaxes(k, -1, -2).astype(np.float64)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("rows,tk,d", [(1, 1, 8), (5, 7, 3), (33, 100, 64), (70, 211, 32),
                                        (300, 1500, 64)])
@pytest.mark.parametrize("vectors", [1, 3, 5])
def test_kernel_gives_float64_softmax_values(row_attention_kernels, rows, tk, d, vectors):
    kern = row_attention_kernels
    dv = vectors * kern.lanes  # 5 vectors: one wide product step and a vector on its own
    q, k = (RNG.standard_normal((n, d)).astype(np.float32) for n in (rows, tk))
    v = RNG.standard_normal((tk, dv)).astype(np.float32)
    out = np.full((rows, dv), np.nan, np.float32)
    scratch = np.empty(kern.scratch_floats(tk, d, dv), np.float32)
    assert kern.attend(q, k, v, out, d**-0.5, scratch) == 0
    np.testing.assert_allclose(out, _reference(q, k, v, d**-0.5), rtol=1e-5, atol=1e-6)


def test_kernel_reads_and_writes_rows_with_strides(row_attention_kernels):
    """Rows of a fused q/k/v projection and an output wider than its rows: the strides
    are taken as given, nothing beside the output's rows is written."""
    kern = row_attention_kernels
    tk, d, dv = 45, 16, 2 * kern.lanes
    fused = RNG.standard_normal((tk, 3, 32)).astype(np.float32)
    q, k = fused[:40, 0, :d], fused[:, 1, :d]
    v = RNG.standard_normal((tk, 3 * dv)).astype(np.float32)[:, dv : 2 * dv]
    wide = np.full((40, dv + 8), 7.0, np.float32)
    scratch = np.empty(kern.scratch_floats(tk, d, dv), np.float32)
    assert kern.attend(q, k, v, wide[:, :dv], 0.25, scratch) == 0
    np.testing.assert_allclose(wide[:, :dv], _reference(q, k, v, 0.25), rtol=1e-5, atol=1e-6)
    assert (wide[:, dv:] == 7.0).all()


def test_kernel_counts_rows_whose_maximum_is_not_finite(row_attention_kernels):
    kern = row_attention_kernels
    q = RNG.standard_normal((40, 8)).astype(np.float32)
    k, v = RNG.standard_normal((9, 8)).astype(np.float32), np.ones((9, kern.lanes), np.float32)
    q[3, 0], q[35, 2] = np.inf, np.nan
    scratch = np.empty(kern.scratch_floats(9, 8, kern.lanes), np.float32)
    out = np.empty((40, kern.lanes), np.float32)
    assert kern.attend(q, k, v, out, 1.0, scratch) == 2


def test_kernel_refuses_what_it_cannot_take(row_attention_kernels):
    kern = row_attention_kernels
    q = np.zeros((4, 8), np.float32)
    v = np.zeros((5, kern.lanes + 1), np.float32)  # not whole vectors
    scratch = np.empty(kern.scratch_floats(5, 8, kern.lanes + 1), np.float32)
    with pytest.raises(ValueError, match="llvm_attention_rows"):
        kern.attend(q, np.zeros((5, 8), np.float32), v, np.zeros((4, kern.lanes + 1), np.float32),
                    1.0, scratch)
    v = np.zeros((5, kern.lanes), np.float32)
    with pytest.raises(ValueError, match="scratch"):
        kern.attend(q, np.zeros((5, 8), np.float32), v, np.zeros((4, kern.lanes), np.float32),
                    1.0, scratch[:10])


def _heads(m, tq, tk, d, dv):
    q = RNG.standard_normal((1, m, tq, d)).astype(np.float32)
    k = RNG.standard_normal((1, m, tk, d)).astype(np.float32)
    v = RNG.standard_normal((1, m, tk, dv)).astype(np.float32)
    return q, k, v


def test_attention_takes_the_kernel_with_bits_no_thread_changes(row_attention_kernels,
                                                                monkeypatch):
    """array_attention's unmasked attention of many queries runs through the kernel; one
    thread or two, runs of any length, and k, v as strided views of a fused projection
    or packed: the same bits."""
    calls = []
    for name in ("attend", "attend_pieces"):  # per piece from Python, or the team's
        real = getattr(type(row_attention_kernels), name)
        monkeypatch.setattr(type(row_attention_kernels), name,
                            lambda *a, real=real: calls.append(1) or real(*a))
    lanes = row_attention_kernels.lanes
    q, k, v = _heads(3, 150, 150, lanes, lanes)
    results = []
    for threads, runs in ((1, 8), (2, 8), (2, 1)):
        monkeypatch.setitem(row_parallel._state, "workers", threads)
        monkeypatch.setattr(row_parallel, "MIN_PARALLEL_ELEMENTS", 1)
        monkeypatch.setattr(array_attention_rows, "RUNS_PER_THREAD", runs)
        results.append(array_attention.attention(_Numpy(), q, k, v, None, 0.25, None))
    fused = np.stack([q, k, v], axis=3)  # [1, heads, t, 3, d]: rows 3 d apart
    strided = array_attention.attention(_Numpy(), fused[..., 0, :], fused[..., 1, :],
                                        fused[..., 2, :], None, 0.25, None)
    assert calls and all(np.array_equal(r.view(np.uint32), results[0].view(np.uint32))
                         for r in results[1:] + [strided])
    np.testing.assert_allclose(results[0], _reference(q, k, v, 0.25), rtol=1e-5, atol=1e-6)


def test_rows_the_kernel_leaves_go_through_the_tiles(row_attention_kernels, monkeypatch):
    """An infinite query element: its run is redone by the BLAS tiles, which give what
    the tiles alone give there; the other runs keep the kernel's values."""
    q, k, v = _heads(2, 64, 30, 8, row_attention_kernels.lanes)
    q[0, 1, 40, 0] = np.inf
    monkeypatch.setattr(array_attention_rows, "RUNS_PER_THREAD", 1)
    monkeypatch.setitem(row_parallel._state, "workers", 2)  # a run a matrix
    got = array_attention.attention(_Numpy(), q, k, v, None, 0.5, None)
    monkeypatch.setattr(array_attention_rows, "MIN_QUERIES", 1 << 30)  # the tiles only
    tiles = array_attention.attention(_Numpy(), q, k, v, None, 0.5, None)
    assert np.array_equal(got[0, 1], tiles[0, 1], equal_nan=True)
    assert not np.isfinite(tiles[0, 1, 40]).all()
    want = _reference(q[0, :1], k[0, :1], v[0, :1], 0.5)[0]
    np.testing.assert_allclose(got[0, 0], want, rtol=1e-5, atol=1e-6)


def test_few_queries_keep_the_tiles(row_attention_kernels, monkeypatch):
    """A decode step's cross-attention (a query a head) would leave most of a query
    block's lanes idle: the BLAS tiles take it."""
    calls = []
    real = type(row_attention_kernels).attend
    monkeypatch.setattr(type(row_attention_kernels), "attend",
                        lambda *a: calls.append(1) or real(*a))
    q, k, v = _heads(8, 1, 300, 64, 64)
    array_attention.attention(_Numpy(), q, k, v, None, 0.125, None)
    assert calls == []


def test_long_rows_keep_their_digits(row_attention_kernels):
    """20,000 keys of near-equal scores: each query's sums (its softmax's, its product's)
    run a span of keys at a time and then over the spans; one running sum of every key
    loses ~n x 2^-24 of the result's relative precision."""
    kern = row_attention_kernels
    tk, d, dv = 20000, 8, kern.lanes
    q = (RNG.standard_normal((kern.block, d)) * 0.01).astype(np.float32)
    k = RNG.standard_normal((tk, d)).astype(np.float32)
    v = (1.0 + RNG.random((tk, dv))).astype(np.float32)  # all positive: no cancelling
    out = np.empty((kern.block, dv), np.float32)
    scratch = np.empty(kern.scratch_floats(tk, d, dv), np.float32)
    assert kern.attend(q, k, v, out, 1.0, scratch) == 0
    # a running sum of all 20,000: 8e-6 here; a span at a time: 1.2e-6
    np.testing.assert_allclose(out, _reference(q, k, v, 1.0), rtol=3e-6)


def _masked_reference(q, k, v, scale, mask):
    s = (q.astype(np.float64) * np.float32(scale)) @ np.swapaxes(k, -1, -2).astype(np.float64)
    s = s + mask
    with np.errstate(invalid="ignore"):  # a row whose every key is hidden: NaN, unused
        p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("rows,tk", [(5, 7), (40, 40), (70, 133)])
def test_the_masked_kernel_adds_the_transposed_mask(row_attention_kernels, rows, tk):
    """A causal mask (-inf above the diagonal of the last `rows` keys) plus finite biases,
    given transposed and padded to whole blocks: float64's values under the mask."""
    kern = row_attention_kernels
    d, dv = 16, kern.lanes
    q, k = (RNG.standard_normal((n, d)).astype(np.float32) for n in (rows, tk))
    v = RNG.standard_normal((tk, dv)).astype(np.float32)
    mask = RNG.uniform(-2, 2, (rows, tk)).astype(np.float32)
    mask[np.arange(rows)[:, None] < np.arange(tk)[None] - (tk - rows)] = -np.inf
    mask_t = np.full((tk, kern.padded(rows)), 123.0, np.float32)  # padding: never used
    mask_t[:, :rows] = mask.T
    out = np.full((rows, dv), np.nan, np.float32)
    scratch = np.empty(kern.scratch_floats(tk, d, dv), np.float32)
    assert kern.attend(q, k, v, out, 0.3, scratch, mask_t) == 0
    np.testing.assert_allclose(out, _masked_reference(q, k, v, 0.3, mask), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="mask_t"):  # too few columns for the blocks read
        kern.attend(q, k, v, out, 0.3, scratch, mask_t[:, :rows - 1] if rows > 1 else mask_t[:0])


def test_a_prompts_masked_grouped_attention_takes_the_kernel(row_attention_kernels, monkeypatch):
    """A language model's prompt: 3 kv heads each shared by 3 query heads (k and v
    broadcast), one causal mask over every head (stride 0), 128 positions; and a batch of
    two with its own padding mask a row. The kernel's team takes them (one thread or
    two: the same bits), float64's values; a row all of whose keys are hidden (a padded
    query) is left to the tiles, which give what the tiles alone give."""
    lanes = row_attention_kernels.lanes
    calls = []
    real = type(row_attention_kernels).attend_pieces
    monkeypatch.setattr(type(row_attention_kernels), "attend_pieces",
                        lambda *a: calls.append(1) or real(*a))
    t, d = 128, 64
    q = RNG.standard_normal((1, 3, 3, t, d)).astype(np.float32)
    k = np.broadcast_to(RNG.standard_normal((1, 3, 1, t, d)).astype(np.float32), q.shape)
    v = np.broadcast_to(RNG.standard_normal((1, 3, 1, t, lanes)).astype(np.float32),
                        (1, 3, 3, t, lanes))
    causal = np.triu(np.full((t, t), -np.inf, np.float32), 1)
    mask = np.broadcast_to(causal, (1, 3, 3, t, t))
    runs = []
    for threads in (1, 2):
        monkeypatch.setitem(row_parallel._state, "workers", threads)
        runs.append(array_attention.attention(_Numpy(), q, k, v, None, 0.125, None, mask))
    assert calls and np.array_equal(runs[0].view(np.uint32), runs[1].view(np.uint32))
    np.testing.assert_allclose(runs[0], _masked_reference(q, k, v, 0.125, causal),
                               rtol=1e-5, atol=1e-6)

    qb, kb = (RNG.standard_normal((2, 2, 20, 8)).astype(np.float32) for _ in range(2))
    vb = RNG.standard_normal((2, 2, 20, lanes)).astype(np.float32)
    pad = np.zeros((2, 1, 20, 20), np.float32)
    pad[1, :, :, 15:] = -np.inf  # the second sequence's last 5 keys are padding
    pad[1, :, 17, :] = -np.inf  # and its query 17 sees nothing: left to the tiles
    masks = np.broadcast_to(pad, (2, 2, 20, 20))
    got = array_attention.attention(_Numpy(), qb, kb, vb, None, 0.5, None, masks)
    monkeypatch.setattr(array_attention_rows, "MIN_QUERIES", 1 << 30)  # the tiles only
    tiles = array_attention.attention(_Numpy(), qb, kb, vb, None, 0.5, None, masks)
    assert np.array_equal(got[1, :, 17], tiles[1, :, 17], equal_nan=True)
    fine = np.ones(20, bool)
    fine[17] = False
    np.testing.assert_allclose(got[0], _masked_reference(qb[0], kb[0], vb[0], 0.5, pad[0]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1][:, fine],
                               _masked_reference(qb[1], kb[1], vb[1], 0.5, pad[1])[:, fine],
                               rtol=1e-5, atol=1e-6)
