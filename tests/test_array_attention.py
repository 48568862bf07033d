"""The numpy backend's own attention (array_attention: no mask, not causal) against the
contract's composite on the same backend, on two threads: tiles of whole windows, tiles
of one matrix's query rows, a lone matrix without batch dims, with and without a grid
bias broadcast over heads; rows whose unshifted exponentials overflow or vanish."""

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


def test_masked_or_causal_attention_takes_the_composite(monkeypatch):
    calls = []
    monkeypatch.setattr(array_attention, "attention", lambda *a: calls.append(1))
    q = ember.tensor(np.random.default_rng(1).standard_normal((2, 5, 4)).astype(np.float32))
    mask = ember.zeros(5, 5)
    a = F.scaled_dot_product_attention(q, q, q, mask=mask).numpy()
    b = F.scaled_dot_product_attention(q, q, q, is_causal=True).numpy()
    assert calls == [] and a.shape == b.shape == (2, 5, 4)


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
