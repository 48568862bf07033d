"""The numpy backend's own attention (array_attention: not causal) against the contract's
composite on the same backend, on two threads: tiles of whole windows, tiles of one
matrix's query rows, a lone matrix without batch dims, with and without a grid bias
broadcast over heads, under additive masks broadcast over heads and sequences; rows
whose unshifted exponentials overflow or vanish."""

import numpy as np
import pytest

import ember
import ember.functional as F
from ember.backends import array_attention, composites, row_parallel


def _composite(q, k, v, grid, scale):
    be = q.backend
    bias = None
    if grid is not None:
        rows, cols = grid
        bias = (rows.storage, rows.layout.broadcast_to(q.shape[:-1] + rows.shape[-1:]),
                cols.storage, cols.layout.broadcast_to(q.shape[:-1] + cols.shape[-1:]))
    out = composites.scaled_dot_product_attention(
        be, q.storage, q.layout, k.storage, k.layout, v.storage, v.layout, None, None,
        scale, q.dtype, False, bias)
    return be.view(out, ember.Layout(q.shape[:-1] + v.shape[-1:]))


@pytest.mark.parametrize("budget", [None, 2 * 3 * 48 * 48, 5 * 48],
                         ids=["one-tile", "whole-windows", "query-rows"])
@pytest.mark.parametrize("batch", [(4, 3), (1, 3), ()], ids=["windows", "one-image", "no-batch"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["grid-bias", "plain"])
def test_numpy_attention_matches_the_composite(monkeypatch, budget, batch, with_bias):
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    monkeypatch.setattr(row_parallel, "MIN_PARALLEL_ELEMENTS", 1)  # split even these sizes
    if budget is not None:
        monkeypatch.setattr(array_attention, "FUSED_TILE_ELEMENTS", budget)
    rng = np.random.default_rng(7)
    kh, kw, d = 6, 8, 16
    t = kh * kw
    qkv = rng.standard_normal(batch + (t, 3, d)).astype(np.float32)
    q, k, v = (ember.tensor(qkv)[..., i, :] for i in range(3))  # strided views, as in SAM
    grid = None
    if with_bias:  # broadcast over the heads (the leading batch dims kept)
        lead = batch[:1]
        grid = (ember.tensor(rng.standard_normal(lead + (t, kh)).astype(np.float32)),
                ember.tensor(rng.standard_normal(lead + (t, kw)).astype(np.float32)))
        if batch:
            grid = tuple(g.reshape(lead + (1,) * (len(batch) - 1) + g.shape[-2:]) for g in grid)
    calls = []
    real = array_attention.attention
    monkeypatch.setattr(array_attention, "attention",
                        lambda *a: calls.append(1) or real(*a))
    got = F.scaled_dot_product_attention(q, k, v, grid_bias=grid).numpy()
    assert calls == [1]  # the numpy path ran, not the composite
    want = _composite(q, k, v, grid, d**-0.5)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_causal_attention_takes_the_composite(monkeypatch):
    calls = []
    monkeypatch.setattr(array_attention, "attention", lambda *a: calls.append(1))
    q = ember.tensor(np.random.default_rng(1).standard_normal((2, 5, 4)).astype(np.float32))
    b = F.scaled_dot_product_attention(q, q, q, is_causal=True).numpy()
    assert calls == [] and b.shape == (2, 5, 4)


def _composite_masked(q, k, v, mask, scale):
    be = q.backend
    lmask = mask.layout.broadcast_to(q.shape[:-1] + k.shape[-2:-1])
    out = composites.scaled_dot_product_attention(
        be, q.storage, q.layout, k.storage, k.layout, v.storage, v.layout, mask.storage,
        lmask, scale, q.dtype, False, None)
    return be.view(out, ember.Layout(q.shape[:-1] + v.shape[-1:]))


@pytest.mark.parametrize("budget", [None, 3 * 40 * 24, 7 * 40],
                         ids=["one-tile", "whole-matrices", "query-rows"])
@pytest.mark.parametrize("mask_shape", [(1, 1, 24, 40), (2, 1, 24, 40), (2, 4, 1, 40)],
                         ids=["every-head", "per-sequence", "per-key"])
def test_masked_attention_matches_the_composite_tile_by_tile(monkeypatch, budget, mask_shape):
    """A language model's prompt: an additive mask broadcast over heads (and sequences),
    the most negative f32 where a key is hidden, one query row hiding every key (a
    padding row: uniform weights, as the composite gives). Each tile reads only its own
    part of the broadcast mask, never the whole of it."""
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    monkeypatch.setattr(row_parallel, "MIN_PARALLEL_ELEMENTS", 1)
    if budget is not None:
        monkeypatch.setattr(array_attention, "FUSED_TILE_ELEMENTS", budget)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 4, 24, 16)).astype(np.float32)
    k = rng.standard_normal((2, 4, 40, 16)).astype(np.float32)
    v = rng.standard_normal((2, 4, 40, 8)).astype(np.float32)
    lowest = np.finfo(np.float32).min
    mask = np.where(rng.random(mask_shape) < 0.3, lowest, 0).astype(np.float32)
    mask[..., -1] = 0
    if mask_shape[-2] > 1:
        mask[..., 3, :] = lowest  # a query that sees nothing
    parts = []
    real = array_attention.MaskTiles.part
    monkeypatch.setattr(array_attention.MaskTiles, "part",
                        lambda self, *a: parts.append(real(self, *a)) or parts[-1])
    tq = ember.tensor
    got = F.scaled_dot_product_attention(tq(q), tq(k), tq(v), mask=tq(mask)).numpy()
    want = _composite_masked(tq(q), tq(k), tq(v), tq(mask), 16**-0.5)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert parts, "the numpy path did not run"
    limit = budget or array_attention.FUSED_TILE_ELEMENTS
    assert all(p.size <= max(limit, 24 * 40) for p in parts), [p.shape for p in parts]
    assert sum(p.shape[0] * p.shape[1] for p in parts) == 2 * 4 * 24  # every query row once


@pytest.mark.parametrize("size", [60.0, -60.0], ids=["overflow", "underflow"])
def test_rows_out_of_exp_range_are_redone_shifted(monkeypatch, size):
    """Scores of +-240 (exp overflows f32, or every weight of a row is 0): those rows are
    computed again and shifted by their maximum; the rest keep the unshifted path. The
    result is float64 softmax's, in tiles of a few query rows."""
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    monkeypatch.setattr(row_parallel, "MIN_PARALLEL_ELEMENTS", 1)
    monkeypatch.setattr(array_attention, "FUSED_TILE_ELEMENTS", 4 * 40)
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, 3, 12, 8)).astype(np.float32)
    k = rng.standard_normal((2, 3, 40, 8)).astype(np.float32)
    v = rng.standard_normal((2, 3, 40, 8)).astype(np.float32)
    k[..., 0] = 0.0
    k[..., 5, 0] = 1.0  # key 5 scores size * q[..., 0] more than the others
    q[:, :, 3:7, 0] = size * 8**0.5 * 4  # rows 3-6: scores near +-240 (f32 exp: 88 at most)
    if size < 0:  # every score of rows 3-6 far below exp's range
        k[..., 0] = 1.0
    got = F.scaled_dot_product_attention(*(ember.tensor(a) for a in (q, k, v))).numpy()
    s = (q.astype(np.float64) * 8**-0.5) @ np.swapaxes(k, -1, -2).astype(np.float64)
    assert np.abs(s[:, :, 3:7]).max() > 200  # the case is what it says
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_masked_decode_step_takes_the_small_path():
    """A decode step under a padding mask (a batch of prompts of different lengths): few
    queries, a short cache, the mask broadcast over heads; the composite's values."""
    from ember.backends import array_small_attention

    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 3, 3, 16)).astype(np.float32)  # 3 kv heads, 3 grouped queries
    k = rng.standard_normal((2, 3, 30, 16)).astype(np.float32)
    v = rng.standard_normal((2, 3, 30, 16)).astype(np.float32)
    mask = np.zeros((2, 1, 1, 30), np.float32)
    mask[1, ..., :7] = np.finfo(np.float32).min  # the second sequence's left padding
    tq = ember.tensor
    assert array_small_attention.is_small(q, k)
    got = F.scaled_dot_product_attention(tq(q), tq(k), tq(v), mask=tq(mask)).numpy()
    want = _composite_masked(tq(q), tq(k), tq(v), tq(mask), 16**-0.5)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(  # the padding's keys weigh nothing
        got[1], F.scaled_dot_product_attention(tq(q[1]), tq(k[1, :, 7:]), tq(v[1, :, 7:])).numpy(),
        rtol=1e-6, atol=1e-6)


def test_big_matrices_that_fit_one_tile_spread_over_the_threads(monkeypatch):
    """A decode step's cross-attention (heads x 1 query x many keys) fits one tile's
    budget but is worth both cores: at least a tile per thread, each matrix its own, so
    the bits are one tile's."""
    assert array_attention.fused_tiles(8, 1, 1500, 1 << 19, spread=2) == [
        (0, 4, 0, 1), (4, 8, 0, 1)]
    assert array_attention.fused_tiles(8, 1, 1500, 1 << 19) == [(0, 8, 0, 1)]
    assert array_attention.fused_tiles(3, 1, 10, 1 << 19, spread=8) == [
        (0, 1, 0, 1), (1, 2, 0, 1), (2, 3, 0, 1)]
    rng = np.random.default_rng(9)
    q = rng.standard_normal((1, 8, 1, 64)).astype(np.float32)
    k, v = (rng.standard_normal((1, 8, 1500, 64)).astype(np.float32) for _ in range(2))
    tiles = []
    real = array_attention.fused_tiles
    monkeypatch.setattr(array_attention, "fused_tiles",
                        lambda *a: tiles.append(real(*a)) or tiles[-1])
    monkeypatch.setitem(row_parallel._state, "workers", 2)

    class Backend:
        xp = np

    spread = array_attention.attention(Backend(), q, k, v, None, 0.125, None)
    monkeypatch.setattr(array_attention, "SPREAD_MACS", 1 << 60)
    alone = array_attention.attention(Backend(), q, k, v, None, 0.125, None)
    assert len(tiles[0]) == 2 and len(tiles[1]) == 1
    assert np.array_equal(spread.view(np.uint32), alone.view(np.uint32))
