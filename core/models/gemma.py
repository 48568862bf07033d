"""Gemma 2 and Gemma 3 (text) causal language models.

The Llama model (llama.py) with what these two change, each a small override:

- four norms per layer: before and after attention, before and after the MLP, each
  output norm applied to the branch before it joins the residual;
- Gemma 3: an RMS norm over every q and k head before the rotation;
- attention scaled by query_pre_attn_scalar**-0.5, not the head size;
- "sliding_attention" layers see the last `sliding_window` positions, "full_attention"
  layers everything; in Gemma 3 each kind has its own rotary base (and only the global
  layers take the rope scaling);
- Gemma 2: scores and logits soft-capped, cap * tanh(x / cap);
- as in Gemma 1 (already in llama.py): RMSNorm by (1 + w), embeddings times
  sqrt(hidden_size), tanh-GELU MLP, tied output head.

    model = GemmaForCausalLM.from_pretrained("path/to/gemma-3-270m", device="cpu")
"""

from ..nn import Module
from ..tensor import cat
from .gemma_config import GemmaConfig
from .llama import MLP, Attention, LlamaForCausalLM, rms_norm


def soft_cap(x, cap):
    """cap * tanh(x / cap): x squashed into (-cap, cap), near x where |x| << cap."""
    return (x / cap).tanh() * cap


class GemmaAttention(Attention):
    def __init__(self, cfg, vb, layer_idx, layers):
        super().__init__(cfg, vb, layer_idx, layers)
        self.rope_kind = cfg.layer_kind(layer_idx)
        self.scale = float(cfg.query_pre_attn_scalar) ** -0.5
        self.softcap = cfg.attn_logit_softcapping
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            eps, plus = cfg.rms_norm_eps, cfg.norm_plus_one
            self.q_norm = rms_norm(vb.pp("q_norm"), cfg.head_dim, eps, plus)
            self.k_norm = rms_norm(vb.pp("k_norm"), cfg.head_dim, eps, plus)

    def rotate_qk(self, qk, rope, tables):
        if self.qk_norm:
            qk = cat(self._normed(qk), 2)
        return super().rotate_qk(qk, rope, tables)

    def _normed(self, heads):
        """[q, k] of heads [b, t, nh + nkv (+ nkv), hd], each through its RMS norm."""
        nh, nkv = self.n_heads, self.n_kv
        return [self.q_norm(heads.narrow(2, 0, nh)), self.k_norm(heads.narrow(2, nh, nkv))]

    def fuses_step(self, tables):
        # the fused step's attention is the plain one: Gemma 3's, not Gemma 2's capped
        return self.softcap is None and tables[2] is not None

    def step_heads(self, qkv):
        if not self.qk_norm:
            return qkv
        nh, nkv = self.n_heads, self.n_kv
        return cat(self._normed(qkv) + [qkv.narrow(2, nh + nkv, nkv)], 2)

    def attend(self, q, k, v, mask):
        if self.softcap is None:
            return super().attend(q, k, v, mask)
        # Capped scores are not what the fused attention computes: the steps spelled out,
        # the g query heads of a kv head as one dim so k and v broadcast over them.
        b, nh, t, hd = q.shape
        nkv = self.n_kv
        q = q.reshape(b, nkv, nh // nkv, t, hd)
        scores = q.matmul(k.unsqueeze(2).transpose(-1, -2)) * self.scale  # [b, nkv, g, t, len]
        scores = soft_cap(scores, self.softcap)
        if mask is not None:
            scores = scores + mask
        out = scores.softmax(-1).matmul(v.unsqueeze(2))  # [b, nkv, g, t, hd]
        return out.reshape(b, nh, t, hd)


class GemmaDecoderLayer(Module):
    def __init__(self, cfg, vb, layer_idx, layers):
        super().__init__()

        def norm(name):
            return rms_norm(vb.pp(name), cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_plus_one)

        self.input_layernorm = norm("input_layernorm")
        self.self_attn = GemmaAttention(cfg, vb.pp("self_attn"), layer_idx, layers)
        self.post_attention_layernorm = norm("post_attention_layernorm")
        self.pre_feedforward_layernorm = norm("pre_feedforward_layernorm")
        self.mlp = MLP(cfg, vb.pp("mlp"), layers)
        self.post_feedforward_layernorm = norm("post_feedforward_layernorm")

    def forward(self, x, rope, tables, cache, masks):
        attn = self.self_attn(self.input_layernorm(x), rope, tables, cache, masks)
        x = x + self.post_attention_layernorm(attn)
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


class GemmaForCausalLM(LlamaForCausalLM):
    config_class = GemmaConfig
    layer_class = GemmaDecoderLayer

    def __init__(self, cfg, vb, device=None, layers=None, max_len=None):
        prefixes = cfg.extra.get("weights_prefixes")
        if prefixes:  # Gemma3ForConditionalGeneration: where this file keeps the text model
            found = [p for p in prefixes if vb.contains(f"{p}.embed_tokens.weight")]
            cfg.extra["weights_prefix"] = (found or prefixes)[0]
        super().__init__(cfg, vb, device, layers, max_len)

    def rope_params(self, kind):
        cfg = self.config
        if kind == "sliding_attention" and cfg.rope_local_theta is not None:
            return cfg.rope_local_theta, None  # the sliding layers' own base, unscaled
        return cfg.rope_theta, cfg.rope_scaling

    def logits(self, x):
        logits = super().logits(x)
        cap = self.config.final_logit_softcapping
        return logits if cap is None else soft_cap(logits, cap)


def load_model(path, device=None, max_len=None):
    """GemmaForCausalLM from a directory (config.json + safetensors)."""
    return GemmaForCausalLM.from_pretrained(path, device, max_len=max_len)


__all__ = ["GemmaAttention", "GemmaConfig", "GemmaDecoderLayer", "GemmaForCausalLM", "load_model"]
