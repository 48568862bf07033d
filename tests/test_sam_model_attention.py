"""The attention contract's grid bias (decomposed relative positions, as SAM's image
encoder uses them): against numpy's whole-matrix softmax, in one tile and in many, on
every device; and the shapes it refuses."""

import numpy as np
import pytest

import ember
import ember.functional as F
from ember.backends import composites
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
