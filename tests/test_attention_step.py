"""functional.attention_step (Backend.attention_step): a decoder's one-position
self-attention (rope where given, the cache writes, grouped-query attention) in one backend
call, on every device. It must give the bits of the Tensor steps a model takes otherwise
(rope, copy_ into the cache, the attention), the contract's composite's bits, and numpy's
values; and a Llama decoder layer's decode step through it must give the layer's general
path's bits (Whisper's and Gemma's: tests/test_whisper_model.py, tests/test_gemma.py)."""

import numpy as np
import pytest
from helpers import record_attention_steps
from strided import VARIANTS, rng_for, variant
from test_decode_fusions import _decoder_layer

import ember
import ember.functional as F
from ember.backends import composites
from ember.layout import Layout
from ember.models.kv_cache import KVCache
from ember.models.llama import Attention
from ember.models.rope import RotaryEmbedding
from ember.tensor import Tensor

NH, KV, D, MAX_LEN = 4, 2, 8, 6


def _inputs(device, kind, batch, per_row, length, seed):
    rng = rng_for("rope-attention-step", kind, batch, per_row, length, seed)
    qkv, qkv_np = variant(kind, (batch, 1, NH + 2 * KV, D), "f32", device, rng)
    angles = rng.standard_normal((batch, 1, D // 2) if per_row else (1, D // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    cache = rng.standard_normal((2, batch, KV, MAX_LEN, D)).astype(np.float32)
    return qkv, qkv_np, cos, sin, cache


def _reference(qkv, cos, sin, keys, values, length, scale, rope):
    """numpy in f64: the output [B, 1, NH * D] and the caches after the step."""
    b, g = qkv.shape[0], NH // KV
    x = qkv[:, 0].astype(np.float64)
    qk = x[:, : NH + KV]
    rot = qk
    if rope is not None:
        c = cos.reshape(-1, 1, D // 2).astype(np.float64)
        s = sin.reshape(-1, 1, D // 2).astype(np.float64)
        half = (qk[..., : D // 2], qk[..., D // 2 :])
        a, o = (qk[..., 0::2], qk[..., 1::2]) if rope == "interleaved" else half
        first, second = a * c - o * s, o * c + a * s
        rot = np.stack([first, second], -1).reshape(qk.shape) if rope == "interleaved" else \
            np.concatenate([first, second], -1)
    keys, values = keys.astype(np.float64), values.astype(np.float64)
    keys[:, :, length], values[:, :, length] = rot[:, NH:], x[:, NH + KV :]
    q = rot[:, :NH].reshape(b, KV, g, D)
    scores = q @ np.swapaxes(keys[:, :, : length + 1], -1, -2) * scale
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ values[:, :, : length + 1]).reshape(b, 1, NH * D), keys, values


def _spelled_out(qkv, cos, sin, keys, values, length, scale, rope):
    """The Tensor steps llama.Attention (whisper's without rope) takes without the op."""
    b = qkv.shape[0]
    rot = qkv.narrow(2, 0, NH + KV).transpose(1, 2)
    if rope is not None:
        rot = F.rope(rot, cos, sin, rope == "interleaved")
    keys.narrow(2, length, 1).copy_(rot.narrow(1, NH, KV))
    values.narrow(2, length, 1).copy_(qkv.narrow(2, NH + KV, KV).transpose(1, 2))
    out = F.scaled_dot_product_attention(
        rot.narrow(1, 0, NH).reshape(b, KV, NH // KV, D),
        keys.narrow(2, 0, length + 1),
        values.narrow(2, 0, length + 1),
        scale=scale,
    )
    return out.reshape(b, NH, 1, D).transpose(1, 2).reshape(b, 1, NH * D)


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("rope", [None, "half", "interleaved"])
@pytest.mark.parametrize("batch,per_row", [(1, False), (2, False), (2, True)])
def test_the_step_is_the_models_steps_and_the_composite_and_matches_numpy(
    device, kind, rope, batch, per_row
):
    length, scale = 3, 0.3
    qkv, qkv_np, cos, sin, cache = _inputs(device, kind, batch, per_row, length, 0)
    tcos, tsin = (ember.tensor(t, device=device) for t in (cos, sin))
    interleaved = rope == "interleaved"
    runs = []
    for how in ("fused", "spelled out", "composite"):
        keys, values = (ember.tensor(c, device=device) for c in cache)
        if how == "fused":
            tables = None if rope is None else (tcos, tsin)
            out = F.attention_step(qkv, keys, values, length, NH, scale, tables, interleaved)
        elif how == "spelled out":
            out = _spelled_out(qkv, tcos, tsin, keys, values, length, scale, rope)
        else:
            laid = None if rope is None else (tcos.storage, tcos.layout, tsin.storage,
                                              tsin.layout)
            storage = composites.attention_step(
                device.backend, qkv.storage, qkv.layout, (keys.storage, keys.layout),
                (values.storage, values.layout), length, NH, scale, ember.f32, laid,
                interleaved,
            )
            out = Tensor(storage, Layout((batch, 1, NH * D)), ember.f32, device)
        assert out.shape == (batch, 1, NH * D)
        runs.append([out.numpy(), keys.numpy(), values.numpy()])
    for other in runs[1:]:  # every array the same bits: the output and both caches
        for got, want in zip(runs[0], other, strict=True):
            np.testing.assert_array_equal(got, want)
    want = _reference(qkv_np, cos, sin, cache[0], cache[1], length, scale, rope)
    for got, ref in zip(runs[0], want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    untouched = [p for p in range(MAX_LEN) if p != length]  # only the step's slot changes
    np.testing.assert_array_equal(runs[0][1][:, :, untouched], cache[0][:, :, untouched])
    np.testing.assert_array_equal(runs[0][2][:, :, untouched], cache[1][:, :, untouched])


def test_the_step_refuses_what_it_cannot_take(cpu):
    def call(qkv_shape=(1, 1, NH + 2 * KV, D), cache_shape=(1, KV, MAX_LEN, D), length=2,
             table=(1, D // 2), n_heads=NH, rope=True):
        z = ember.zeros
        tables = (z(*table), z(*table)) if rope else None
        return F.attention_step(z(*qkv_shape), z(*cache_shape), z(*cache_shape), length,
                                n_heads, rope=tables)

    assert call().shape == (1, 1, NH * D)
    with pytest.raises(ember.ShapeMismatch, match="one position"):
        call(qkv_shape=(1, 2, NH + 2 * KV, D))  # two positions: they would see each other
    with pytest.raises(ember.ShapeMismatch, match="4 q heads"):
        call(qkv_shape=(1, 1, NH + KV, D))  # no v heads
    with pytest.raises(ember.ShapeMismatch, match="multiple of 2"):
        call(qkv_shape=(1, 1, 3 + 2 * KV, D), n_heads=3)
    with pytest.raises(ember.ShapeMismatch, match="cos/sin"):
        call(table=(2, D // 2))
    with pytest.raises(ember.InvalidArgument, match="position 6 is outside the cache of 6"):
        call(length=MAX_LEN)
    with pytest.raises(ember.ShapeMismatch, match="keys/values"):
        call(cache_shape=(KV, MAX_LEN, D))
    with pytest.raises(ember.ShapeMismatch, match="even with rope"):
        call(qkv_shape=(1, 1, NH + 2 * KV, 7), cache_shape=(1, KV, MAX_LEN, 7), table=(1, 3))
    assert call(qkv_shape=(1, 1, NH + 2 * KV, 7), cache_shape=(1, KV, MAX_LEN, 7),
                rope=False).shape == (1, 1, NH * 7)  # an odd head size without rope
    with pytest.raises(ember.InvalidArgument, match=r"\(cos, sin\)"):
        F.attention_step(ember.zeros(1, 1, NH + 2 * KV, D), ember.zeros(1, KV, MAX_LEN, D),
                         ember.zeros(1, KV, MAX_LEN, D), 0, NH, rope=(ember.zeros(1, 4),))


@pytest.mark.parametrize("interleaved", [False, True])
def test_a_decoder_layers_decode_steps_through_it_keep_the_general_paths_bits(
    device, interleaved, monkeypatch
):
    cfg, layer = _decoder_layer(device)
    rope = RotaryEmbedding(cfg.head_dim, 8, cfg.rope_theta, interleaved=interleaved,
                           device=device)
    rng = rng_for("layer-steps", interleaved)
    xs = [ember.tensor(rng.standard_normal((1, t, 16)).astype(np.float32), device=device)
          for t in (3, 1, 1)]
    steps = record_attention_steps(monkeypatch, device.backend)

    def run():
        cache = KVCache(1, 1, cfg.num_key_value_heads, 8, cfg.head_dim, device=device)
        outs, at = [], 0
        for x in xs:
            t = x.shape[1]
            tables = rope.tables(at, t) + (rope.fused_tables(at, t),)
            outs.append(layer(x, rope, tables, cache, {None: None}).numpy())
            cache.advance(t)
            at += t
        return outs + [cache.keys[0].numpy(), cache.values[0].numpy()]

    fused = run()
    assert steps == [3, 4]  # the two decode steps went through it, the prompt did not
    monkeypatch.setattr(Attention, "fuses_step", lambda self, tables: False)
    general = run()
    assert steps == [3, 4]
    for got, want in zip(fused, general, strict=True):
        np.testing.assert_array_equal(got, want)
