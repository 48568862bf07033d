"""Llama-family causal language models: Llama 2/3, Mistral, Qwen2, Gemma, Phi-3.

One implementation; `LlamaConfig` switches carry the differences (see llama_config.py).
Weights come through a VarBuilder with Hugging Face names, from safetensors or from a
GGUF file (gguf_llama.py maps its names and may hand out quantized weights, which
become `QuantLinear` layers).

    model = LlamaForCausalLM.from_pretrained("path/to/model", device=ember.Device.cpu())
    cache = model.new_cache(batch=1, max_len=256)
    logits = model(ids, cache=cache, last_only=True)      # [batch, 1, vocab]

numpy is optional: in a browser without it (Pyodide), ids, positions and masks are built
from Python lists (llama_host.py) and quantized (GGUF) weights are not available.
"""
import math

from .. import dtype as dt
from ..device import as_device
from ..errors import EmberError, ShapeMismatch, fmt_shape
from ..nn import Embedding, Linear, Module, ModuleList, RmsNorm, VarBuilder, get_activation
from ..tensor import Tensor, cat, from_numpy, tensor
from . import llama_host
from .kv_cache import KVCache
from .llama_config import LlamaConfig
from .rope import RotaryEmbedding

try:
    import numpy as np

    from ..io.quant import QTensor
    from .quant_layers import QuantEmbedding, QuantLinear
except ImportError:   # no numpy (Pyodide): no quantized weights, host data as lists
    np = None

    # Never instances here: every weight is a plain Tensor.
    class QTensor:
        pass

    class QuantLinear:
        pass

    QuantEmbedding = None

# What transformers adds for a masked position: the most negative f32, so a row that is
# masked everywhere (a padding query) softmaxes to uniform instead of NaN.
MASKED = llama_host.MASKED
# ... and for narrower compute dtypes, their own most negative finite value.
_LOWEST = {"f16": -65504.0, "bf16": -3.3895e38}


class _Loaded:
    """A VarBuilder stand-in that hands a layer the tensors it is given. Layers built
    without a vb first make shape placeholders on the default device (the CPU, which a
    page without numpy cannot open); built through this they make none."""

    def __init__(self, **tensors):
        self.tensors = tensors

    def get(self, shape, name):
        return self.tensors[name]

    def contains(self, name):
        return self.tensors.get(name) is not None


def linear(vb, in_features, out_features, bias):
    """A Linear, or a QuantLinear when the source hands out a quantized weight."""
    w = vb.get((out_features, in_features), "weight")
    b = vb.get((out_features,), "bias") if bias else None
    if isinstance(w, QTensor):
        return QuantLinear(w, b)
    return Linear(in_features, out_features, bias=bias, vb=_Loaded(weight=w, bias=b))


def fused_linear(vb, names, in_features, outs, bias):
    """One Linear over the concatenated weights of `names` (q/k/v, or gate/up): one GEMM
    per step instead of several, which matters when decoding one token at a time.
    Quantized weights of one ggml type are stacked as bytes; of mixed types (Q4_K_M
    files) they stay separate, and a list of layers comes back."""
    layers = [linear(vb.pp(n), in_features, o, bias) for n, o in zip(names, outs)]
    quant = [isinstance(layer, QuantLinear) for layer in layers]
    if all(quant) and len({layer.qweight.ggml_type for layer in layers}) == 1:
        # Rows are whole blocks, so same-type quantized weights stack row-wise as bytes.
        w = layers[0].qweight
        raw = np.concatenate([layer.qweight.raw for layer in layers])
        b = cat([layer.bias for layer in layers], 0) if bias else None
        return QuantLinear(QTensor(raw, w.ggml_type, (sum(outs), in_features)), b)
    if any(quant):
        return layers
    return Linear(in_features, sum(outs), bias=bias, vb=_Loaded(
        weight=cat([layer.weight for layer in layers], 0),
        bias=cat([layer.bias for layer in layers], 0) if bias else None))


def rms_norm(vb, dim, eps, plus_one):
    w = vb.get((dim,), "weight")
    # Gemma scales by (1 + w), in f32 like HF
    return RmsNorm(dim, eps, vb=_Loaded(weight=w + 1.0 if plus_one else w))


class Attention(Module):
    def __init__(self, cfg, vb, layer_idx):
        super().__init__()
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.window = cfg.window_for_layer(layer_idx)
        self.layer_idx = layer_idx
        h, hd = cfg.hidden_size, cfg.head_dim
        qkv_bias = cfg.attention_bias or cfg.qkv_bias
        outs = [self.n_heads * hd, self.n_kv * hd, self.n_kv * hd]
        if cfg.fused_qkv:
            self.qkv_proj = linear(vb.pp("qkv_proj"), h, sum(outs), qkv_bias)
        else:
            fused = fused_linear(vb, ("q_proj", "k_proj", "v_proj"), h, outs, qkv_bias)
            if isinstance(fused, list):
                self.q_proj, self.k_proj, self.v_proj = fused
            else:
                self.qkv_proj = fused
        self.o_proj = linear(vb.pp("o_proj"), self.n_heads * hd, h, cfg.attention_bias)
        self.scale = float(hd) ** -0.5

    def forward(self, x, rope, tables, cache, masks):
        b, t, _ = x.shape
        hd, nh, nkv = self.head_dim, self.n_heads, self.n_kv
        cos, sin, fused = tables
        # cos/sin are [batch or 1, t, rot]; heads sit in dim 2 here, so broadcast over it.
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
        if hasattr(self, "qkv_proj") and fused is not None:
            # The backend's rope kernel reads the strided [b, heads, t, hd] view of q and k
            # and writes them contiguous, heads first, as attention wants them.
            qkv = self.qkv_proj(x).reshape(b, t, nh + 2 * nkv, hd)
            qk = rope.rotate_fused(qkv.narrow(2, 0, nh + nkv).transpose(1, 2), fused)
            q, k = qk.narrow(1, 0, nh), qk.narrow(1, nh, nkv)
            v = qkv.narrow(2, nh + nkv, nkv).transpose(1, 2)
        elif hasattr(self, "qkv_proj"):
            # q and k are adjacent heads of one output: rotate them in one pass.
            qkv = self.qkv_proj(x).reshape(b, t, nh + 2 * nkv, hd)
            qk = rope.rotate(qkv.narrow(2, 0, nh + nkv), cos, sin)
            q = qk.narrow(2, 0, nh).transpose(1, 2)
            k = qk.narrow(2, nh, nkv).transpose(1, 2)
            v = qkv.narrow(2, nh + nkv, nkv).transpose(1, 2)
        else:
            q = rope.rotate(self.q_proj(x).reshape(b, t, nh, hd), cos, sin).transpose(1, 2)
            k = rope.rotate(self.k_proj(x).reshape(b, t, nkv, hd), cos, sin).transpose(1, 2)
            v = self.v_proj(x).reshape(b, t, nkv, hd).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)
        length = k.shape[2]
        g = nh // nkv
        # Grouped-query attention without repeating k/v: the g query heads that share a
        # kv head become g*t rows of one matmul against it.
        scores = q.reshape(b, nkv, g * t, hd).matmul(k.transpose(-1, -2)) * self.scale
        mask = masks.get(self.window)
        if mask is not None:
            scores = (scores.reshape(b, nkv, g, t, length) + mask).reshape(b, nkv, g * t, length)
        out = scores.softmax(-1).matmul(v)                       # [b, nkv, g*t, hd]
        out = out.reshape(b, nh, t, hd).transpose(1, 2).reshape(b, t, nh * hd)
        return self.o_proj(out)


class MLP(Module):
    def __init__(self, cfg, vb):
        super().__init__()
        h, i = cfg.hidden_size, cfg.intermediate_size
        self.inter = i
        if cfg.fused_gate_up:
            self.gate_up_proj = linear(vb.pp("gate_up_proj"), h, 2 * i, cfg.mlp_bias)
        else:
            fused = fused_linear(vb, ("gate_proj", "up_proj"), h, (i, i), cfg.mlp_bias)
            if isinstance(fused, list):
                self.gate_proj, self.up_proj = fused
            else:
                self.gate_up_proj = fused
        self.down_proj = linear(vb.pp("down_proj"), i, h, cfg.mlp_bias)
        self._act = get_activation(cfg.hidden_act)

    def forward(self, x):
        if hasattr(self, "gate_up_proj"):
            gu = self.gate_up_proj(x)
            gate, up = gu.narrow(-1, 0, self.inter), gu.narrow(-1, self.inter, self.inter)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(self._act(gate) * up)


class DecoderLayer(Module):
    def __init__(self, cfg, vb, layer_idx):
        super().__init__()
        eps, plus = cfg.rms_norm_eps, cfg.norm_plus_one
        self.input_layernorm = rms_norm(vb.pp("input_layernorm"), cfg.hidden_size, eps, plus)
        self.self_attn = Attention(cfg, vb.pp("self_attn"), layer_idx)
        self.post_attention_layernorm = rms_norm(vb.pp("post_attention_layernorm"),
                                                 cfg.hidden_size, eps, plus)
        self.mlp = MLP(cfg, vb.pp("mlp"))

    def forward(self, x, rope, tables, cache, masks):
        x = x + self.self_attn(self.input_layernorm(x), rope, tables, cache, masks)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(Module):
    def __init__(self, cfg, vb, device=None):
        super().__init__()
        self.config = cfg
        self.device = as_device(device if device is not None else (vb.device or "cpu"))
        m = vb.pp("model")
        emb = m.pp("embed_tokens").get((cfg.vocab_size, cfg.hidden_size), "weight")
        if isinstance(emb, QTensor):
            self.embed_tokens = QuantEmbedding(emb, self.device)
        else:
            self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, vb=_Loaded(weight=emb))
        self.layers = ModuleList(*[DecoderLayer(cfg, m.pp(f"layers.{i}"), i)
                                   for i in range(cfg.num_hidden_layers)])
        self.norm = rms_norm(m.pp("norm"), cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_plus_one)
        if cfg.tie_word_embeddings or not vb.contains("lm_head.weight"):
            if isinstance(emb, QTensor):
                self.lm_head = QuantLinear(emb, None)
            else:
                self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False,
                                      vb=_Loaded(weight=emb))
        else:
            self.lm_head = linear(vb.pp("lm_head"), cfg.hidden_size, cfg.vocab_size, False)
        self._rope = None

    # --- construction ---------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, device=None, dtype=dt.f32):
        """A model directory holding config.json and safetensors weights."""
        device = as_device(device) if device is not None else as_device("cpu")
        cfg = LlamaConfig.from_file(path)
        _merge_generation_config(cfg, path)
        vb = VarBuilder.from_dir(path, dtype=dtype, device=device)
        return cls(cfg, vb, device)

    @property
    def dtype(self):
        w = self.norm.weight
        return w.dtype

    def new_cache(self, batch=1, max_len=None):
        """A KV cache for `batch` sequences of at most `max_len` positions."""
        cfg = self.config
        max_len = int(max_len or cfg.max_position_embeddings)
        return KVCache(cfg.num_hidden_layers, batch, cfg.num_key_value_heads, max_len,
                       cfg.head_dim, self.dtype, self.device)

    def rope(self, max_len):
        """Rotary tables covering max_len positions (rebuilt only when a longer one is asked)."""
        if self._rope is None or self._rope.max_len < max_len:
            cfg = self.config
            object.__setattr__(self, "_rope", RotaryEmbedding(
                cfg.head_dim, max_len, cfg.rope_theta, cfg.rope_scaling, cfg.rotary_dim,
                cfg.rope_interleaved, self.device, self.dtype,
                cfg.extra.get("rope_freq_factors")))
        return self._rope

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
        if cache is not None and cache.batch != b:
            raise ShapeMismatch(f"forward: input batch {b} does not match the cache's batch "
                                f"{cache.batch}", op="llama.forward", shapes=(ids.shape,))
        total = past + t
        if cache is not None and total > cache.max_len:
            raise EmberError(
                f"forward: {t} new tokens after {past} cached ones overflows the cache of "
                f"{cache.max_len} positions; create it with a larger max_len",
                op="llama.forward", length=past, new=t, max_len=cache.max_len)
        key_mask = None
        if attention_mask is not None:
            key_mask = (np.asarray(attention_mask, dtype=bool) if np is not None
                        else llama_host.bool_rows(attention_mask))
            mask_shape = tuple(key_mask.shape) if np is not None else llama_host.shape_of(key_mask)
            if mask_shape != (b, total):
                raise ShapeMismatch(
                    f"forward: attention_mask has shape {fmt_shape(mask_shape)}, expected "
                    f"[{b}, {total}] (cache length {past} + {t} new tokens)",
                    op="llama.forward", shapes=(mask_shape,))
        rope = self.rope(cache.max_len if cache is not None else total)
        positions = self._positions(key_mask, b, past, t)
        tables = rope.tables(positions, t) + (rope.fused_tables(positions, t),)
        masks = self._masks(b, t, past, key_mask)

        x = self.embed_tokens(ids)
        if self.config.embed_scale is not None:
            # transformers rounds the scale to the model's dtype first (sqrt(3072) is 55.5 in bf16)
            x = x * llama_host.round_to_dtype(self.config.embed_scale, x.dtype)
        for layer in self.layers:
            x = layer(x, rope, tables, cache, masks)
        if cache is not None:
            cache.advance(t)
        if last_only and t > 1:
            x = x.narrow(1, t - 1, 1)
        return self.lm_head(self.norm(x))

    def _ids(self, input_ids):
        if isinstance(input_ids, Tensor):
            ids = input_ids if input_ids.device == self.device else input_ids.to(self.device)
            ids = ids if ids.dtype is dt.i64 else ids.to(dt.i64)
        elif np is None:
            ids = tensor(llama_host.int_rows(input_ids), dtype=dt.i64, device=self.device)
        else:
            ids = tensor(np.asarray(input_ids, dtype=np.int64), dtype=dt.i64, device=self.device)
        if ids.ndim == 1:
            ids = ids.reshape(1, -1)
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ShapeMismatch(f"forward: input_ids must be [batch, seq] with seq > 0, got "
                                f"{fmt_shape(ids.shape)}", op="llama.forward", shapes=(ids.shape,))
        return ids

    def _positions(self, key_mask, b, past, t):
        """An int start when every row uses past..past+t-1, else a [b, t] i64 tensor."""
        if np is None:
            return llama_host.positions(key_mask, past, self.device)
        if key_mask is None or key_mask.all():
            return past
        pos = np.cumsum(key_mask, axis=1, dtype=np.int64) - 1
        pos = np.where(key_mask, pos, 1)[:, past:]       # padding slots: any valid row
        return from_numpy(np.ascontiguousarray(pos)).to(self.device)

    def _masks(self, b, t, past, key_mask):
        """Additive masks [b, 1, 1, t, past+t] by sliding window (None: full attention);
        a window whose mask would allow everything maps to None and costs nothing."""
        total = past + t
        windows = {layer.self_attn.window for layer in self.layers}
        if np is None:
            return {w: llama_host.additive_mask(b, t, past, w, key_mask, self._mask_low(),
                                                self.dtype, self.device) for w in windows}
        q = past + np.arange(t)[:, None]
        k = np.arange(total)[None, :]
        out = {}
        for w in windows:
            allowed = k <= q
            if w is not None:
                allowed = allowed & (k > q - w)
            allowed = np.broadcast_to(allowed, (b, t, total))
            if key_mask is not None:
                allowed = allowed & key_mask[:, None, :]
            if allowed.all():
                out[w] = None
                continue
            add = np.where(allowed, np.float32(0), np.float32(self._mask_low())).astype(np.float32)
            m = from_numpy(np.ascontiguousarray(add.reshape(b, 1, 1, t, total))).to(self.device)
            out[w] = m if self.dtype is dt.f32 else m.to(self.dtype)
        return out

    def _mask_low(self):
        return MASKED if self.dtype is dt.f32 else _LOWEST.get(self.dtype.name, MASKED)

    def num_parameters(self):
        n = 0
        seen = set()
        for _, m in self.named_modules():
            for value in list(m._params.values()) + [getattr(m, "weight", None)]:
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                n += math.prod(value.shape)
        return n

    def weight_bytes(self):
        """Bytes held by the weights (quantized ones at their packed size)."""
        total, seen = 0, set()
        for _, m in self.named_modules():
            for value in list(m._params.values()) + [getattr(m, "weight", None)]:
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                if isinstance(value, QTensor):
                    total += value.nbytes
                elif isinstance(value, Tensor):
                    total += value.numel() * value.dtype.itemsize
        return total


def _merge_generation_config(cfg, path):
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


def load_model(path, device=None, dtype=dt.f32):
    """LlamaForCausalLM from a directory (config.json + safetensors)."""
    return LlamaForCausalLM.from_pretrained(path, device, dtype)


__all__ = ["LlamaConfig", "LlamaForCausalLM", "KVCache", "load_model", "EmberError"]
