"""The attention contract's grid bias (decomposed relative positions, as SAM's image
encoder uses them): against numpy's whole-matrix softmax, in one tile and in many, on
every device; and the shapes it refuses."""

import numpy as np
import pytest

import ember
import ember.functional as F
from ember.backends import array_attention, composites
from ember.errors import InvalidArgument, ShapeMismatch


def _numpy_attention(q, k, v, rows, cols, scale):
    kh, kw = rows.shape[-1], cols.shape[-1]
    bias = (rows[..., :, :, None] + cols[..., :, None, :]).reshape(*rows.shape[:-1], kh * kw)
    s = q @ np.swapaxes(k, -1, -2) * scale + bias
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("tile", [None, 96], ids=["one-tile", "many-tiles"])
def test_grid_bias_matches_the_whole_matrix(device, monkeypatch, tile):
    if tile is not None:  # 96 scores a tile: 2 query rows of 2 x 3 x 4 x 6 keys
        monkeypatch.setattr(composites, "ATTENTION_TILE_ELEMENTS", tile)
        monkeypatch.setattr(composites, "CPU_ATTENTION_TILE_ELEMENTS", tile)
    rng = np.random.default_rng(0)
    b, h, kh, kw, d = 2, 3, 4, 6, 8
    tq = tk = kh * kw
    q, k, v = (rng.standard_normal((b, h, t, d)).astype(np.float32) for t in (tq, tk, tk))
    rows = rng.standard_normal((b, h, tq, kh)).astype(np.float32)
    cols = rng.standard_normal((b, h, tq, kw)).astype(np.float32)
    got = F.scaled_dot_product_attention(
        *(ember.tensor(a, device=device) for a in (q, k, v)),
        grid_bias=(ember.tensor(rows, device=device), ember.tensor(cols, device=device)),
    ).numpy()
    want = _numpy_attention(q, k, v, rows, cols, d**-0.5)
    np.testing.assert_allclose(got, want, atol=1e-5 if device.kind == "cpu" else 1e-4)


def test_windows_go_in_tiles_of_whole_windows(device, monkeypatch):
    """Attention over many small windows (a ViT's windowed layers: batch dims windows x
    heads) is tiled by windows, every tile holding all of its windows' queries, and
    gives the whole-matrix result. (The numpy backend's own tiles, array_attention's,
    are stacks of whole matrices: windows x heads flattened.)"""
    windows, heads, kh, kw, d = 5, 2, 3, 3, 4
    t = kh * kw
    budget = 2 * heads * t * t  # two whole windows of scores per tile
    for name in ("ATTENTION_TILE_ELEMENTS", "CPU_ATTENTION_TILE_ELEMENTS"):
        monkeypatch.setattr(composites, name, budget)
    monkeypatch.setattr(array_attention, "FUSED_TILE_ELEMENTS", budget)
    calls = []
    if device.kind == "cpu":
        real_tile = array_attention.tile
        monkeypatch.setattr(array_attention, "tile",
                            lambda xp, qs, *a: calls.append(qs.shape) or real_tile(xp, qs, *a))
        want_calls = [(2 * heads, t, d), (2 * heads, t, d), (heads, t, d)]
    else:
        real = device.backend.softmax
        monkeypatch.setattr(device.backend, "softmax",
                            lambda *a, **kw: calls.append(a[1].shape) or real(*a, **kw))
        want_calls = [(2, heads, t, t), (2, heads, t, t), (1, heads, t, t)]
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((windows, heads, t, d)).astype(np.float32) for _ in range(3))
    rows = rng.standard_normal((windows, heads, t, kh)).astype(np.float32)
    cols = rng.standard_normal((windows, heads, t, kw)).astype(np.float32)
    got = F.scaled_dot_product_attention(
        *(ember.tensor(a, device=device) for a in (q, k, v)),
        grid_bias=(ember.tensor(rows, device=device), ember.tensor(cols, device=device)),
    ).numpy()
    np.testing.assert_allclose(got, _numpy_attention(q, k, v, rows, cols, d**-0.5),
                               atol=1e-5 if device.kind == "cpu" else 1e-4)
    assert calls == want_calls


def test_attention_tiles_cover_every_score_once():
    for batch, tq, tk, budget in (((5, 2), 9, 9, 400), ((5, 2), 9, 9, 10**6), ((1, 3), 7, 11, 66),
                                  ((), 7, 5, 10), ((2, 3), 4, 4, 48)):
        lead, inner = (batch[0], int(np.prod(batch[1:]))) if batch else (1, 1)
        seen = np.zeros((lead, tq), int)
        for b0, nb, q0, n in composites.attention_tiles(batch, tq, tk, budget):
            seen[b0:b0 + nb, q0:q0 + n] += 1
            # within the budget, or the smallest tile there is: one query across the batch
            assert nb * inner * n * tk <= max(budget, lead * inner * tk)
        assert (seen == 1).all(), (batch, tq, tk, budget)


def test_grid_bias_broadcasts_over_heads():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 6, 4)).astype(np.float32) for _ in range(3))
    rows = rng.standard_normal((1, 6, 2)).astype(np.float32)
    cols = rng.standard_normal((1, 6, 3)).astype(np.float32)
    got = F.scaled_dot_product_attention(
        *(ember.tensor(a) for a in (q, k, v)),
        grid_bias=(ember.tensor(rows), ember.tensor(cols)),
    ).numpy()
    want = _numpy_attention(
        q, k, v, np.broadcast_to(rows, (2, 3, 6, 2)), np.broadcast_to(cols, (2, 3, 6, 3)), 0.5
    )
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_grid_bias_of_the_wrong_grid_is_refused():
    q = ember.zeros(1, 6, 4)
    with pytest.raises(ShapeMismatch, match="Kh \\* Kw = Tk = 6"):
        F.scaled_dot_product_attention(
            q, q, q, grid_bias=(ember.zeros(1, 6, 2), ember.zeros(1, 6, 2))
        )
    with pytest.raises(InvalidArgument, match="grid_bias must be a pair"):
        F.scaled_dot_product_attention(q, q, q, grid_bias=ember.zeros(1, 6, 6))
