"""Llama-family causal language models: Llama 2/3, Mistral, Qwen2, Gemma, Phi-3.

One implementation; `LlamaConfig` switches carry the differences (see llama_config.py).
Weights come through a VarBuilder with Hugging Face names, from safetensors or from a
GGUF file (gguf_llama.py maps its names and passes quant_layers.QuantizedLayers,
which make quantized layers where the file holds quantized weights).

    model = LlamaForCausalLM.from_pretrained("path/to/model", device=ember.Device.cpu())
    cache = model.new_cache(batch=1, max_len=256)
    logits = model(ids, cache=cache, last_only=True)      # [batch, 1, vocab]

Memory is bounded by the model: `context_length` (max_position_embeddings, or a smaller
`max_len` given at construction) caps the cache, the rotary tables and every forward;
longer inputs are refused with both lengths named. Host data (ids, positions, the 0/1
attention mask) are plain Python lists, the causal mask is built on the device
(llama_host.py), so the same code runs in a browser page without numpy.
"""

import math

from .. import dtype as dt
from .. import functional as F
from ..device import as_device
from ..errors import EmberError, ShapeMismatch, fmt_shape
from ..nn import Module, ModuleList, RmsNorm, VarBuilder, get_activation
from ..nn.activations import activation_op
from ..tensor import Tensor, cat, tensor
from . import llama_host
from .kv_cache import KVCache
from .layer_factory import DenseLayers
from .llama_config import LlamaConfig
from .llama_step import DecodeStep
from .rope import RotaryEmbedding

# What transformers adds for a masked position: the most negative f32, so a row that is
# masked everywhere (a padding query) softmaxes to uniform instead of NaN.
MASKED = llama_host.MASKED
# ... and for narrower compute dtypes, their own most negative finite value.
_LOWEST = {"f16": -65504.0, "bf16": -3.3895e38}
# The most query positions one pass attends with: longer inputs go through the cache in
# tiles of this many, so masks and scores stay [tile, length].
PREFILL_TILE = 512


def rms_norm(vb, dim, eps, plus_one):
    norm = RmsNorm(dim, eps, vb=vb)
    if plus_one:  # Gemma scales by (1 + w), in f32 like HF
        norm.weight = norm.weight + 1.0
    return norm


class Attention(Module):
    def __init__(self, cfg, vb, layer_idx, layers):
        super().__init__()
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.window = cfg.window_for_layer(layer_idx)
        self.layer_idx = layer_idx
        h, hd = cfg.hidden_size, cfg.head_dim
        qkv_bias = cfg.attention_bias or cfg.qkv_bias
        outs = [self.n_heads * hd, self.n_kv * hd, self.n_kv * hd]
        if cfg.fused_qkv:  # Phi-3 stores them fused
            self.qkv_proj = layers.linear(vb.pp("qkv_proj"), h, sum(outs), qkv_bias)
        else:
            self.qkv_proj = layers.fused(vb, ("q_proj", "k_proj", "v_proj"), h, outs, qkv_bias)
        self.o_proj = layers.linear(vb.pp("o_proj"), self.n_heads * hd, h, cfg.attention_bias)
        self.scale = float(hd) ** -0.5
        self.rope_kind = "default"  # which of the model's rotary tables (see rope_params)

    def forward(self, x, rope, tables, cache, masks):
        b, t, _ = x.shape
        hd, nh, nkv = self.head_dim, self.n_heads, self.n_kv
        qkv = self.qkv_proj(x).reshape(b, t, nh + 2 * nkv, hd)
        mask = masks.get(self.window)
        if t == 1 and cache is not None and mask is None and self.fuses_step(tables):
            # A decode step: the steps below in one backend call, the same bits (their
            # Tensor steps took 1.6 ms of SmolLM2-135M's 20 ms step on the CPU)
            out = cache.attend_step(
                self.layer_idx, self.step_heads(qkv), nh, self.scale, tables[2], rope.interleaved
            )
            return self.o_proj(out)
        q, k = self.rotate_qk(qkv.narrow(2, 0, nh + nkv), rope, tables)
        v = qkv.narrow(2, nh + nkv, nkv).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        out = self.attend(q, k, v, mask)  # [b, nh, t, hd]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, nh * hd))

    def fuses_step(self, tables):
        """Whether a decode step may take functional.attention_step: whole-head rope
        (`tables` has functional.rope's, not a partial rotation's), and rotate_qk and
        attend this class's own. A family that changes them (gemma.py) says here when its
        steps are still the fused op's, with step_heads giving it the heads it takes."""
        cls = type(self)
        own = cls.rotate_qk is Attention.rotate_qk and cls.attend is Attention.attend
        return own and tables[2] is not None

    def step_heads(self, qkv):
        """qkv [b, 1, heads, hd] as the fused step takes it: the heads rope rotates, and v."""
        return qkv

    def rotate_qk(self, qk, rope, tables):
        """The q and k heads ([b, t, nh + nkv, hd], adjacent heads of one output) rotated
        in one pass, returned heads first ([b, heads, t, hd]) as attention wants them."""
        nh, nkv = self.n_heads, self.n_kv
        cos, sin, half = tables
        if half is not None:  # whole heads: ember.functional.rope, [t or b, t, hd/2] tables
            qk = rope.rotate_fused(qk.transpose(1, 2), half)
        else:  # a partial rotation (Phi-3.5): cos/sin [batch or 1, t, rot] over the heads
            qk = rope.rotate(qk, cos.unsqueeze(2), sin.unsqueeze(2)).transpose(1, 2)
        return qk.narrow(1, 0, nh), qk.narrow(1, nh, nkv)

    def attend(self, q, k, v, mask):
        """Attention of q [b, nh, t, hd] over k, v [b, nkv, len, hd] under the additive
        `mask` ([b, 1, 1, t, len] or None): [b, nh, t, hd]."""
        b, nh, t, hd = q.shape
        nkv = self.n_kv
        g = nh // nkv
        # Grouped-query attention without repeating k/v: the g query heads that share a
        # kv head are g*t query rows against it ([b, nkv, g*t, hd] queries, [b, nkv, len,
        # hd] keys: one GEMM per kv head, not g GEMVs). The mask is per query position,
        # so with t > 1 and a mask the g heads broadcast as a dim of their own instead.
        if t == 1 or mask is None:
            out = F.scaled_dot_product_attention(
                q.reshape(b, nkv, g * t, hd),
                k,
                v,
                mask=None if mask is None else mask.reshape(b, 1, 1, mask.shape[-1]),
                scale=self.scale,
            )  # [b, nkv, g*t, hd]
        else:
            out = F.scaled_dot_product_attention(
                q.reshape(b, nkv, g, t, hd),
                k.unsqueeze(2),
                v.unsqueeze(2),
                mask=mask,
                scale=self.scale,
            )  # [b, nkv, g, t, hd]
        return out.reshape(b, nh, t, hd)


class MLP(Module):
    def __init__(self, cfg, vb, layers):
        super().__init__()
        h, i = cfg.hidden_size, cfg.intermediate_size
        self.inter = i
        if cfg.fused_gate_up:  # Phi-3 stores them fused
            self.gate_up_proj = layers.linear(vb.pp("gate_up_proj"), h, 2 * i, cfg.mlp_bias)
        else:
            self.gate_up_proj = layers.fused(vb, ("gate_proj", "up_proj"), h, (i, i), cfg.mlp_bias)
        self.down_proj = layers.linear(vb.pp("down_proj"), i, h, cfg.mlp_bias)
        self._act = get_activation(cfg.hidden_act)
        op = activation_op(cfg.hidden_act)
        # act(gate) * up in one backend call where the activation is a fusable unary op
        self._gated_op = op if op in F.LINEAR_ACTIVATIONS else None

    def forward(self, x):
        gu = self.gate_up_proj(x)
        if self._gated_op is not None:
            h = F.gated_activation(gu, self._gated_op)
        else:
            gate, up = gu.narrow(-1, 0, self.inter), gu.narrow(-1, self.inter, self.inter)
            h = self._act(gate) * up
            del gate, up
        # the layer's widest activation, gone before the down projection's buffers come:
        # held through it, it was the top of a prompt's memory (SmolLM2-135M, 128 tokens:
        # 5.4 -> 3.9 MiB of live arrays at the peak, 1.5 MiB of its peak RSS)
        del gu
        return self.down_proj(h)


class DecoderLayer(Module):
    def __init__(self, cfg, vb, layer_idx, layers):
        super().__init__()
        eps, plus = cfg.rms_norm_eps, cfg.norm_plus_one
        self.input_layernorm = rms_norm(vb.pp("input_layernorm"), cfg.hidden_size, eps, plus)
        self.self_attn = Attention(cfg, vb.pp("self_attn"), layer_idx, layers)
        self.post_attention_layernorm = rms_norm(
            vb.pp("post_attention_layernorm"), cfg.hidden_size, eps, plus
        )
        self.mlp = MLP(cfg, vb.pp("mlp"), layers)

    def forward(self, x, rope, tables, cache, masks):
        # The residual adds stay outside self_attn and mlp (not in their projections'
        # epilogues): each module's output is then transformers' module output, which
        # ember.verify compares block by block.
        x = x + self.self_attn(self.input_layernorm(x), rope, tables, cache, masks)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(Module):
    # What a family changes (gemma.py): its config, its decoder layer, where its weights sit.
    config_class = LlamaConfig
    layer_class = DecoderLayer
    # A decode step takes llama_step.DecodeStep where its layers allow (the same backend
    # calls without the modules' Python between them); False keeps the modules' path.
    fused_decode = True

    def __init__(self, cfg, vb, device=None, layers=None, max_len=None):
        """`layers` makes the layers (DenseLayers by default); `max_len` caps the context
        below the config's max_position_embeddings (a smaller cache and rope tables)."""
        super().__init__()
        self.config = cfg
        self.device = as_device(device if device is not None else (vb.device or "cpu"))
        self.context_length = _context_length(cfg, max_len)
        layers = layers if layers is not None else DenseLayers()
        m = vb.pp(cfg.extra.get("weights_prefix", "model"))
        self.embed_tokens = layers.embedding(
            m.pp("embed_tokens"), cfg.vocab_size, cfg.hidden_size, self.device
        )
        self.layers = ModuleList(
            *[
                self.layer_class(cfg, m.pp(f"layers.{i}"), i, layers)
                for i in range(cfg.num_hidden_layers)
            ]
        )
        self.norm = rms_norm(m.pp("norm"), cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_plus_one)
        if cfg.tie_word_embeddings or not vb.contains("lm_head.weight"):
            self.lm_head = layers.tied_head(self.embed_tokens)
        else:
            self.lm_head = layers.linear(vb.pp("lm_head"), cfg.hidden_size, cfg.vocab_size, False)
        object.__setattr__(self, "_ropes", {})  # rope kind -> RotaryEmbedding

    # --- construction ---------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, device=None, dtype=dt.f32, max_len=None):
        """A model directory holding config.json and safetensors weights."""
        device = as_device(device) if device is not None else as_device("cpu")
        cfg = cls.config_class.from_file(path)
        merge_generation_config(cfg, path)
        vb = VarBuilder.from_dir(path, dtype=dtype, device=device)
        return cls(cfg, vb, device, max_len=max_len)

    @property
    def dtype(self):
        w = self.norm.weight
        return w.dtype

    def new_cache(self, batch=1, max_len=None):
        """A KV cache for `batch` sequences of at most `max_len` positions, and never more
        than the model's context (a larger request gets a context-sized cache)."""
        max_len = self.context_length if max_len is None else min(int(max_len), self.context_length)
        cfg = self.config
        return KVCache(
            cfg.num_hidden_layers,
            batch,
            cfg.num_key_value_heads,
            max_len,
            cfg.head_dim,
            self.dtype,
            self.device,
        )

    def rope_params(self, kind):
        """(theta, scaling) of the rotary tables the layers of `kind` use (one kind here)."""
        return self.config.rope_theta, self.config.rope_scaling

    def rope(self, max_len, kind="default"):
        """Rotary tables covering max_len positions (rebuilt only when a longer one is asked)."""
        rope = self._ropes.get(kind)
        if rope is None or rope.max_len < max_len:
            cfg = self.config
            theta, scaling = self.rope_params(kind)
            rope = RotaryEmbedding(
                cfg.head_dim,
                max_len,
                theta,
                scaling,
                cfg.rotary_dim,
                cfg.rope_interleaved,
                self.device,
                self.dtype,
                cfg.extra.get("rope_freq_factors"),
            )
            self._ropes[kind] = rope
        return rope

    # --- forward --------------------------------------------------------------------------
    def forward(self, input_ids, cache=None, attention_mask=None, last_only=False):
        """Logits for `input_ids` [batch, t] appended after what `cache` holds.

        attention_mask (host 0/1, [batch, cache length + t]) marks real tokens; left
        padding is 0. Positions count real tokens only, as transformers does. With
        `last_only` only the last position's logits are computed: [batch, 1, vocab].
        """
        ids = self._ids(input_ids)
        b, t = ids.shape
        past = cache.length if cache is not None else 0
        total = past + t
        if total > self.context_length:
            raise EmberError(
                f"forward: {total} positions ({past} cached + {t} new) exceed the model's "
                f"context of {self.context_length}",
                op="llama.forward",
                length=total,
                context=self.context_length,
            )
        if cache is not None and cache.batch != b:
            raise ShapeMismatch(
                f"forward: input batch {b} does not match the cache's batch {cache.batch}",
                op="llama.forward",
                shapes=(ids.shape,),
            )
        if cache is not None and total > cache.max_len:
            raise EmberError(
                f"forward: {t} new tokens after {past} cached ones overflows the cache of "
                f"{cache.max_len} positions; create it with a larger max_len",
                op="llama.forward",
                length=past,
                new=t,
                max_len=cache.max_len,
            )
        key_mask = None
        if attention_mask is not None:
            key_mask = llama_host.bool_rows(attention_mask, (b, total))
        if t > PREFILL_TILE:
            return self._tiled(ids, cache, key_mask, last_only)
        positions = llama_host.positions(key_mask, past, self.device)
        rotations = {}  # rope kind -> (its RotaryEmbedding, its tables at these positions)
        for kind in {layer.self_attn.rope_kind for layer in self.layers}:
            rope = self.rope(cache.max_len if cache is not None else total, kind)
            tables = rope.tables(positions, t) + (rope.fused_tables(positions, t),)
            rotations[kind] = rope, tables
        masks = {
            w: llama_host.additive_mask(
                b, t, past, w, key_mask, self._mask_low(), self.dtype, self.device
            )
            for w in {layer.self_attn.window for layer in self.layers}
        }

        x = self.embed_tokens(ids)
        if self.config.embed_scale is not None:
            # transformers rounds the scale to the model's dtype first (sqrt(3072) is 55.5 in bf16)
            x = x * llama_host.round_to_dtype(self.config.embed_scale, x.dtype)
        stepped = None
        if t == 1 and cache is not None and self.fused_decode:
            step = DecodeStep.of(self)  # made each step: nothing in it can go stale
            stepped = step.run(x, rotations, cache, masks) if step is not None else None
        if stepped is not None:
            x = stepped
        else:
            for layer in self.layers:
                x = layer(x, *rotations[layer.self_attn.rope_kind], cache, masks)
        if cache is not None:
            cache.advance(t)
        if t > 1:
            # the layers' temporaries of many positions are freed: before the head reads
            # its (largest) weight, give their memory back (a CPU heap keeps it)
            self.device.release_free_memory()
        if last_only and t > 1:
            x = x.narrow(1, t - 1, 1)
        return self.logits(x)

    def logits(self, x):
        """The vocabulary logits of the last layer's output."""
        return self.lm_head(self.norm(x))

    def _tiled(self, ids, cache, key_mask, last_only):
        """A long input in query tiles of PREFILL_TILE through the cache (a temporary one
        when none is given): each tile's mask and scores are [tile, length], never
        [t, t], so memory grows with the input, not with its square."""
        b, t = ids.shape
        if cache is None:
            cache = self.new_cache(b, t)
        past = cache.length
        outs = []
        for start in range(0, t, PREFILL_TILE):
            n = min(PREFILL_TILE, t - start)
            mask = None if key_mask is None else [row[: past + start + n] for row in key_mask]
            outs.append(self.forward(ids.narrow(1, start, n), cache, mask, last_only))
        return outs[-1] if last_only else cat(outs, 1)

    def _ids(self, input_ids):
        if isinstance(input_ids, Tensor):
            ids = input_ids if input_ids.device == self.device else input_ids.to(self.device)
            ids = ids if ids.dtype is dt.i64 else ids.to(dt.i64)
        else:
            ids = tensor(input_ids, dtype=dt.i64, device=self.device)
        if ids.ndim == 1:
            ids = ids.reshape(1, -1)
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ShapeMismatch(
                f"forward: input_ids must be [batch, seq] with seq > 0, got {fmt_shape(ids.shape)}",
                op="llama.forward",
                shapes=(ids.shape,),
            )
        return ids

    def _mask_low(self):
        return MASKED if self.dtype is dt.f32 else _LOWEST.get(self.dtype.name, MASKED)

    def _weights(self):
        """Every distinct weight and parameter (a quantized one counts once)."""
        seen = set()
        for _, m in self.named_modules():
            for value in list(m._params.values()) + [getattr(m, "weight", None)]:
                if value is not None and id(value) not in seen:
                    seen.add(id(value))
                    yield value

    def num_parameters(self):
        return sum(math.prod(value.shape) for value in self._weights())

    def weight_bytes(self):
        """Bytes held by the weights (quantized ones at their packed size)."""
        return sum(
            value.numel() * value.dtype.itemsize if isinstance(value, Tensor) else value.nbytes
            for value in self._weights()
        )


def _context_length(cfg, max_len):
    context = int(cfg.max_position_embeddings)
    if max_len is None:
        return context
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise EmberError(
            f"LlamaForCausalLM: max_len must be a positive int, got {max_len!r}",
            op="llama",
            max_len=max_len,
        )
    return min(max_len, context)


def merge_generation_config(cfg, path):
    """Chat models list extra end-of-turn ids in generation_config.json: stop on those too."""
    import json
    import os

    gpath = os.path.join(path, "generation_config.json")
    if not os.path.exists(gpath):
        return
    try:
        with open(gpath, encoding="utf-8") as f:
            eos = json.load(f).get("eos_token_id")
    except (OSError, ValueError, AttributeError):
        return
    if eos is None:
        return
    extra = eos if isinstance(eos, list) else [eos]
    cfg.eos_token_id = sorted(set(cfg.eos_token_ids) | {int(e) for e in extra})


def load_model(path, device=None, dtype=dt.f32, max_len=None):
    """LlamaForCausalLM from a directory (config.json + safetensors)."""
    return LlamaForCausalLM.from_pretrained(path, device, dtype, max_len)


__all__ = [
    "DenseLayers",
    "LlamaConfig",
    "LlamaForCausalLM",
    "KVCache",
    "load_model",
    "merge_generation_config",
    "EmberError",
]
