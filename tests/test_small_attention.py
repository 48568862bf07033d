"""The numpy backend's attention for a decode step's few queries (array_small_attention)
against array_attention's tiles on the same views: the same bits, and array_attention
keeps every case above the small path's bounds."""

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


@pytest.mark.parametrize("shape", [((1, 3), 3, 161), ((2, 4), 1, 37), ((), 8, 5)],
                         ids=["gqa-decode", "batch-of-two", "no-batch"])
def test_small_attention_has_the_tiled_paths_bits(shape):
    batch, tq, tk = shape
    q, k, v = _views(np.random.default_rng(3), batch, tq, tk, 64, tk + 40)
    be = ember.Device.cpu().backend
    assert array_small_attention.is_small(q, k)
    got = array_small_attention.attention(np, q, k, v, 0.125)
    want = array_attention.attention(be, q, k, v, None, 0.125, ember.float32)
    assert got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
    s = (q.astype(np.float64) * 0.125) @ np.swapaxes(k, -1, -2).astype(np.float64)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_decode_attention_takes_the_small_path_and_large_ones_do_not(monkeypatch):
    calls = []
    real = array_small_attention.attention
    monkeypatch.setattr(array_small_attention, "attention",
                        lambda *a: calls.append(a[1].shape) or real(*a))
    rng = np.random.default_rng(4)
    q, k, v = (ember.tensor(a) for a in _views(rng, (1, 3), 3, 20, 16, 30))
    want = array_attention.attention(q.backend, q.numpy(), k.numpy(), v.numpy(), None,
                                     0.25, ember.float32)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, v).numpy(), want)
    assert calls == [(1, 3, 3, 16)]
    # more query rows than a decode step's (a prompt, a ViT window), or more scores in
    # all (SAM's decoder over a 64 x 64 grid): array_attention's tiles and threads
    for batch, tq, tk in (((1, 3), 17, 20), ((1, 8), 7, 4096)):
        q, k, v = (ember.tensor(a) for a in _views(rng, batch, tq, tk, 16, tk))
        assert not array_small_attention.is_small(q.numpy(), k.numpy())
        F.scaled_dot_product_attention(q, k, v).numpy()
    assert len(calls) == 1
