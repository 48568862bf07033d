"""Whisper (encoder-decoder speech recognition), device-generic.

Encoder: two conv1d (the second of stride 2) with GELU, learned/sinusoidal positions from
the checkpoint, pre-norm transformer layers. Decoder: token and position embeddings,
pre-norm layers of causal self-attention (its keys and values kept in a KVCache), cross-
attention over the encoder output (its keys and values computed once per window and kept
in the cache), a feed-forward, and logits against the tied embedding.

Weights use Hugging Face's names; a CTranslate2 model.bin is mapped onto them
(ember.io.ctranslate2.whisper_hf_tensors), so both formats load into the same modules.
A layer factory (models.layer_factory) makes the linear layers and the token embedding:
dense ones by default, QuantLinear / QuantEmbedding (quant_layers.QuantizedLayers) over
weights the source hands out as QTensors (the f16 halves the CPU computes with directly,
see whisper_load). This module needs no numpy (the page runs it).
"""

import math

from .. import dtype as dt
from .. import functional as F
from ..device import as_device
from ..errors import ShapeMismatch, fmt_shape
from ..nn import Conv1d, Embedding, LayerNorm, Linear, Module, ModuleList
from ..tensor import cat, tensor
from .kv_cache import KVCache
from .layer_factory import DenseLayers
from .whisper_step import DecoderStep


class Attention(Module):
    def __init__(self, vb, d_model, n_heads, layers):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = layers.linear(vb.pp("q_proj"), d_model, d_model, True)
        self.k_proj = layers.linear(vb.pp("k_proj"), d_model, d_model, False)
        self.v_proj = layers.linear(vb.pp("v_proj"), d_model, d_model, True)
        self.out_proj = layers.linear(vb.pp("out_proj"), d_model, d_model, True)
        self._layers = layers
        self._fuse, self._qkv = False, None  # see fuse_qkv

    def fuse_qkv(self):
        """Run q, k and v as one Linear from now on (private: verify's hooks stay on the
        parts): a decode step's projections are then one GEMV, 0.5 -> 0.2 ms a layer, the
        same bits as the three. It is derived from the parts' weights, made at first use
        and again after `load` or `to` (_reset_derived)."""
        self._fuse = True

    def _reset_derived(self):
        self._qkv = None

    def _fused(self):
        """The one Linear of the three stacked; the parts' weights become views of its
        weight (no second copy); k's missing bias is zeros there (x + 0 is x). Quantized
        parts run as one QuantLinear over a row stack of their weights (the layer
        factory's concat: one view where their bytes follow one another in the file, as
        CTranslate2's fused q/k/v do)."""
        from ..tensor import zeros

        parts = (self.q_proj, self.k_proj, self.v_proj)
        like = self.q_proj.bias
        biases = [
            p.bias
            if p.bias is not None
            else zeros(p.out_features, dtype=like.dtype, device=like.device)
            for p in parts
        ]
        if not all(isinstance(p, Linear) for p in parts):  # quantized (QuantLinear)
            pairs = [(p.weight, b) for p, b in zip(parts, biases, strict=True)]
            self._qkv = self._layers.concat(("q_proj", "k_proj", "v_proj"), pairs)
            return self._qkv
        w = cat([p.weight for p in parts], 0)
        b = cat(biases, 0)
        start = 0
        for p in parts:
            n = p.out_features
            p.weight = w.narrow(0, start, n)
            if p.bias is not None:
                p.bias = b.narrow(0, start, n)
            start += n
        self._qkv = self._layers.from_tensors(w, b)
        return self._qkv

    def qkv_heads(self, x):
        """(q, k, v) [b, heads, t, head_dim] of x: through the fused Linear, or the three
        parts while a hook watches one of them (ember.verify)."""
        parts = (self.q_proj, self.k_proj, self.v_proj)
        if not self._fuse or any(p._forward_hooks for p in parts):
            return tuple(self.heads(p(x)) for p in parts)
        y = (self._qkv or self._fused())(x)
        d = self.n_heads * self.head_dim
        return tuple(self.heads(y.narrow(-1, i * d, d)) for i in range(3))

    def fuses_step(self):
        """Whether the fused projection serves (as in qkv_heads), so that a decode step's
        self-attention may take functional.attention_step."""
        parts = (self.q_proj, self.k_proj, self.v_proj)
        return self._fuse and not any(p._forward_hooks for p in parts)

    def step(self, x, kv, layer, residual):
        """One position's self-attention, x [b, 1, d], through the decoder's KVCache `kv`
        in one backend call (its k and v written at the cache's length), then out_proj
        with `residual`: the same bits as qkv_heads, kv.update and attend."""
        y = (self._qkv or self._fused())(x)
        qkv = y.reshape(x.shape[0], 1, 3 * self.n_heads, self.head_dim)
        out = kv.attend_step(layer, qkv, self.n_heads)
        return self.out_proj(out, residual=residual)

    def heads(self, x):
        """[b, t, d] -> [b, heads, t, head_dim]"""
        b, t, _ = x.shape
        return x.reshape(b, t, self.n_heads, self.head_dim).transpose(1, 2)

    def keys_values(self, x):
        """Cross-attention's (k, v) [b, heads, positions, head_dim] of the encoder output,
        each head's matrix contiguous: every decode step of the window reads all of them
        (a 1500-row GEMV per head), and a head of the [b, positions, d] projection is a
        strided block of it; contiguous, base's six layers read 4.8 -> 2.2 ms a step."""
        return tuple(self.heads(p(x)).contiguous() for p in (self.k_proj, self.v_proj))

    def attend(self, q, k, v, residual, causal=False):
        b, _, t, _ = q.shape
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)
        return self.out_proj(out, residual=residual)


class EncoderLayer(Module):
    def __init__(self, cfg, vb, layers):
        super().__init__()
        d, eps = cfg.d_model, cfg.layer_norm_eps
        self.self_attn_layer_norm = LayerNorm(d, eps, vb=vb.pp("self_attn_layer_norm"))
        self.self_attn = Attention(vb.pp("self_attn"), d, cfg.encoder_attention_heads, layers)
        self.self_attn.fuse_qkv()
        self.final_layer_norm = LayerNorm(d, eps, vb=vb.pp("final_layer_norm"))
        self.fc1 = layers.linear(vb.pp("fc1"), d, cfg.encoder_ffn_dim, True)
        self.fc2 = layers.linear(vb.pp("fc2"), cfg.encoder_ffn_dim, d, True)

    def forward(self, x):
        h = self.self_attn_layer_norm(x)
        a = self.self_attn
        x = a.attend(*a.qkv_heads(h), residual=x)
        h = self.final_layer_norm(x)
        return self.fc2(self.fc1(h, activation="gelu"), residual=x)


class Encoder(Module):
    def __init__(self, cfg, vb, layers):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.conv1 = Conv1d(cfg.num_mel_bins, d, 3, padding=1, vb=vb.pp("conv1"))
        self.conv2 = Conv1d(d, d, 3, stride=2, padding=1, vb=vb.pp("conv2"))
        self.embed_positions = Embedding(cfg.max_source_positions, d, vb=vb.pp("embed_positions"))
        self.layers = ModuleList(
            *[EncoderLayer(cfg, vb.pp(f"layers.{i}"), layers) for i in range(cfg.encoder_layers)]
        )
        self.layer_norm = LayerNorm(d, cfg.layer_norm_eps, vb=vb.pp("layer_norm"))

    def forward(self, features):
        """features [b, n_mels, 2 * max_source_positions] -> [b, max_source_positions, d]"""
        cfg = self.cfg
        want = (cfg.num_mel_bins, 2 * cfg.max_source_positions)
        if features.ndim != 3 or tuple(features.shape[1:]) != want:
            raise ShapeMismatch(
                f"Whisper encoder: features {fmt_shape(features.shape)} must be [batch, "
                f"{want[0]}, {want[1]}] (mel bins, frames of a 30 s window)",
                op="whisper.encoder",
                shapes=(features.shape,),
            )
        x = self.conv1(features).gelu()
        x = self.conv2(x).gelu().transpose(1, 2)  # [b, positions, d]
        x = x + self.embed_positions.weight
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class DecoderLayer(Module):
    def __init__(self, cfg, vb, index, layers):
        super().__init__()
        d, eps, h = cfg.d_model, cfg.layer_norm_eps, cfg.decoder_attention_heads
        self.index = index
        self.self_attn_layer_norm = LayerNorm(d, eps, vb=vb.pp("self_attn_layer_norm"))
        self.self_attn = Attention(vb.pp("self_attn"), d, h, layers)
        self.self_attn.fuse_qkv()
        self.encoder_attn_layer_norm = LayerNorm(d, eps, vb=vb.pp("encoder_attn_layer_norm"))
        self.encoder_attn = Attention(vb.pp("encoder_attn"), d, h, layers)
        self.final_layer_norm = LayerNorm(d, eps, vb=vb.pp("final_layer_norm"))
        self.fc1 = layers.linear(vb.pp("fc1"), d, cfg.decoder_ffn_dim, True)
        self.fc2 = layers.linear(vb.pp("fc2"), cfg.decoder_ffn_dim, d, True)

    def forward(self, x, cache, heads=None, scores=None):
        """`heads` (a tuple of this layer's head indices, for word alignment): the
        cross-attention scores q.k/sqrt(d) of those heads, [b, len(heads), t, positions],
        are appended to the list `scores` before the softmax hides them."""
        h = self.self_attn_layer_norm(x)
        a = self.self_attn
        if x.shape[1] == 1 and a.fuses_step():  # a decode step: one backend call
            x = a.step(h, cache.self_kv, self.index, residual=x)
        else:
            q, k, v = a.qkv_heads(h)
            k, v = cache.self_kv.update(self.index, k, v)
            x = a.attend(q, k, v, residual=x, causal=x.shape[1] > 1)
        h = self.encoder_attn_layer_norm(x)
        c = self.encoder_attn
        ck, cv = cache.cross[self.index]
        q = c.heads(c.q_proj(h))
        if heads:
            scores.append(self._cross_scores(q, ck, heads))
        x = c.attend(q, ck, cv, residual=x)
        h = self.final_layer_norm(x)
        return self.fc2(self.fc1(h, activation="gelu"), residual=x)

    def _cross_scores(self, q, k, heads):
        ids = tensor(list(heads), device=q.device)
        qh, kh = q.index_select(1, ids), k.index_select(1, ids)
        return qh.matmul(kh.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))


_UNMADE = object()


class DecoderCache:
    """Per window: the self-attention KVCache and each layer's cross-attention (k, v)."""

    def __init__(self, self_kv, cross):
        self.self_kv = self_kv
        self.cross = cross
        self.step = _UNMADE  # the window's DecoderStep (Decoder.fused_step)

    @property
    def length(self):
        return self.self_kv.length


class Decoder(Module):
    # A decode step takes whisper_step.DecoderStep where its layers allow (the same
    # backend calls without the modules' Python between them); False keeps the modules'.
    fused_decode = True

    def __init__(self, cfg, vb, layers):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        device = as_device(vb.device) if vb.device is not None else as_device("cpu")
        self.embed_tokens = layers.embedding(vb.pp("embed_tokens"), cfg.vocab_size, d, device)
        self.embed_positions = Embedding(cfg.max_target_positions, d, vb=vb.pp("embed_positions"))
        self.layers = ModuleList(
            *[DecoderLayer(cfg, vb.pp(f"layers.{i}"), i, layers) for i in range(cfg.decoder_layers)]
        )
        self.layer_norm = LayerNorm(d, cfg.layer_norm_eps, vb=vb.pp("layer_norm"))
        self._layers = layers
        self._head = None  # a quantized table's output projection (logits), made at first use

    def logits(self, h):
        """h [..., d] (after the final layer norm) -> f32 logits [..., vocab]: proj_out is
        tied to the token embeddings; a quantized table (a QuantEmbedding) runs as one
        QuantLinear over the same bytes (the layer factory's tied_head)."""
        emb = self.embed_tokens
        if isinstance(emb, Embedding):
            y = F.linear(h, emb.weight)
        else:
            if self._head is None:
                self._head = self._layers.tied_head(emb)
            y = self._head(h)
        return y if y.dtype == dt.f32 else y.float()

    def new_cache(self, encoder_out):
        """A cache for decoding against `encoder_out` [b, positions, d]: the cross-attention
        keys and values of every layer, computed here once."""
        cfg, w = self.cfg, self.layer_norm.weight
        b = encoder_out.shape[0]
        self_kv = KVCache(
            cfg.decoder_layers,
            b,
            cfg.decoder_attention_heads,
            cfg.max_target_positions,
            cfg.d_model // cfg.decoder_attention_heads,
            dtype=w.dtype,
            device=w.device,
        )
        cross = [layer.encoder_attn.keys_values(encoder_out) for layer in self.layers]
        return DecoderCache(self_kv, cross)

    def fused_step(self, cache):
        """The DecoderStep of a decode step against `cache` (None: the modules' path), made
        once a window and kept on its cache: its checks (every module's hooks among them)
        cost ~0.2 ms, 2% of a base step, where a window's steps all get the same answer."""
        if not self.fused_decode:
            return None
        if cache.step is _UNMADE:
            cache.step = DecoderStep.of(self)
        return cache.step

    def run_fused(self, x, cache):
        """x [b, 1, d] through every layer as the fused step runs them (fused_step), or
        None where it does not take this step (the caller's layers then run)."""
        step = self.fused_step(cache)
        return step.run(x, cache) if step is not None else None

    def forward(self, tokens, cache, last_only=True):
        """tokens (Tensor i64/i32 [b, t]) after the cache's length -> logits f32 [b, t or 1,
        vocab]; the cache advances by t."""
        return self._run(tokens, cache, last_only, {}, None)

    def forward_aligned(self, tokens, cache, heads):
        """(logits f32 [b, t, vocab], cross-attention scores [b, n, t, positions]) for the n
        `heads`, pairs (layer, head) in sorted order: the heads whose attention follows the
        speech (Whisper's alignment heads), for word timestamps."""
        by_layer = {}
        for layer, head in sorted(heads):
            by_layer.setdefault(layer, []).append(head)
        scores = []
        logits = self._run(tokens, cache, False, by_layer, scores)
        return logits, cat(scores, dim=1)

    def _run(self, tokens, cache, last_only, heads, scores):
        _b, t = tokens.shape
        start = cache.length
        if start + t > self.cfg.max_target_positions:
            raise ShapeMismatch(
                f"Whisper decoder: {start + t} tokens exceed max_target_positions "
                f"{self.cfg.max_target_positions}",
                op="whisper.decoder",
                shapes=(tokens.shape,),
            )
        x = self.embed_tokens(tokens) + self.embed_positions.weight.narrow(0, start, t)
        stepped = self.run_fused(x, cache) if t == 1 and not heads else None
        if stepped is not None:
            x = stepped
        else:
            for layer in self.layers:
                x = layer(x, cache, heads.get(layer.index), scores)
        cache.self_kv.advance(t)
        if last_only:
            x = x.narrow(1, t - 1, 1)
        return self.logits(self.layer_norm(x))


class WhisperModel(Module):
    """`encoder(features)`, `decoder.new_cache(encoder_out)`, `decoder(tokens, cache)`."""

    def __init__(self, cfg, vb, layers=None):
        """`layers` makes the linear layers and the token embedding (DenseLayers by
        default; whisper_load passes QuantizedLayers where it keeps f16 weights)."""
        super().__init__()
        layers = layers if layers is not None else DenseLayers()
        self.cfg = cfg
        self.encoder = Encoder(cfg, vb.pp("model.encoder"), layers)
        self.decoder = Decoder(cfg, vb.pp("model.decoder"), layers)

    @property
    def dtype(self):
        """The activations' dtype (a dense weight's: quantized ones compute in f32)."""
        return self.decoder.layer_norm.weight.dtype

    @property
    def device(self):
        return self.decoder.layer_norm.weight.device
