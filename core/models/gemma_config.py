"""The configuration of Gemma 2 and Gemma 3 (text), from config.json or GGUF metadata.

A LlamaConfig with the switches those two add: per-head q/k norms (Gemma 3), a
`query_pre_attn_scalar` in place of the head size in the attention scale, tanh
soft-capping of attention scores and of the logits (Gemma 2), and a second rotary base
for the sliding-window layers (Gemma 3: 10,000 there, 1,000,000 in the global ones).
Every layer is either "sliding_attention" or "full_attention" (`layer_types`).
"""

import math
from dataclasses import dataclass

from . import config_fields as cf
from .llama_config import LlamaConfig

# transformers' defaults, which its saved configs and llama.cpp's GGUFs leave implicit:
# every `pattern`-th layer attends globally, the others through the window.
_PATTERN = {"gemma2": 2, "gemma3_text": 6}
_LOCAL_THETA = 10000.0  # Gemma 3's sliding layers (transformers' and llama.cpp's default)


@dataclass
class GemmaConfig(LlamaConfig):
    MODEL_TYPES = ("gemma2", "gemma3_text")
    family = "Gemma 2/3"

    model_type: str = "gemma3_text"
    query_pre_attn_scalar: float = 256.0
    attn_logit_softcapping: float = None
    final_logit_softcapping: float = None
    rope_local_theta: float = None  # the sliding layers' base (None: rope_theta)
    qk_norm: bool = False  # Gemma 3: RMS norms over each q and k head

    def validate(self):
        super().validate()
        src = self.source
        self.query_pre_attn_scalar = cf.positive_number(
            src, "query_pre_attn_scalar", self.query_pre_attn_scalar
        )
        for name in ("attn_logit_softcapping", "final_logit_softcapping", "rope_local_theta"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, cf.positive_number(src, name, value))
        cf.boolean(src, "qk_norm", self.qk_norm)
        if self.layer_types is None:
            raise cf.fail(src, "layer_types", "a list of layer types (one per layer)", None)
        if "sliding_attention" in self.layer_types and self.sliding_window is None:
            raise cf.fail(src, "sliding_window", "a window for the sliding layers", None)

    def layer_kind(self, i):
        return self.layer_types[i]

    @classmethod
    def from_dict(cls, d, path="config.json"):
        d = dict(d)
        model_type = d.get("model_type")
        if model_type == "gemma3" and isinstance(d.get("text_config"), dict):
            # Gemma3ForConditionalGeneration: the language model is its text part.
            text = dict(d["text_config"])
            text.setdefault("tie_word_embeddings", d.get("tie_word_embeddings", True))
            d = {**text, "model_type": "gemma3_text"}
            # its files name the text weights one of two ways (GemmaForCausalLM picks)
            d["weights_prefixes"] = ["language_model.model", "model.language_model"]
            model_type = "gemma3_text"
        if model_type not in cls.MODEL_TYPES:
            return super().from_dict(d, path)  # refused there, naming what is supported
        hidden = cf.positive_int(path, "hidden_size", d.get("hidden_size", cls.hidden_size))
        layers = cf.positive_int(
            path, "num_hidden_layers", d.get("num_hidden_layers", cls.num_hidden_layers)
        )
        # Older configs name the pattern; newer ones list layer_types.
        pattern = d.pop("sliding_window_pattern", None) or d.pop("_sliding_window_pattern", None)
        pattern = cf.positive_int(path, "sliding_window_pattern", pattern or _PATTERN[model_type])
        if d.get("layer_types") is None:
            d["layer_types"] = [
                "sliding_attention" if (i + 1) % pattern else "full_attention"
                for i in range(layers)
            ]
        _split_rope(d, path)
        act = d.pop("hidden_activation", None) or d.get("hidden_act") or "gelu_pytorch_tanh"
        cf.string(path, "hidden_activation", act)
        # Released configs say "gelu" but mean the tanh approximation (transformers too).
        d["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
        d.setdefault("tie_word_embeddings", True)
        d.setdefault("query_pre_attn_scalar", 256)
        if model_type == "gemma2":
            # transformers' defaults when the file leaves them out (it writes null to disable)
            d.setdefault("attn_logit_softcapping", 50.0)
            d.setdefault("final_logit_softcapping", 30.0)
        d["qk_norm"] = model_type == "gemma3_text"
        d["norm_plus_one"] = True  # RMSNorm scales by (1 + w)
        d["embed_scale"] = math.sqrt(hidden)
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            if d.get(name) is None:
                d.pop(name, None)  # null: off
        return super().from_dict(d, path)


def _split_rope(d, path):
    """rope_theta / rope_scaling (the global layers) and rope_local_theta (the sliding
    ones) from either form transformers writes: top-level rope_theta and
    rope_local_base_freq, or rope_parameters keyed by layer type."""
    rope = d.pop("rope_parameters", None)
    cf.optional(cf.mapping, path, "rope_parameters", rope)
    if isinstance(rope, dict) and "full_attention" in rope:
        full = dict(cf.mapping(path, "rope_parameters.full_attention", rope["full_attention"]))
        local = dict(
            cf.mapping(path, "rope_parameters.sliding_attention", rope.get("sliding_attention", {}))
        )
        if local.get("rope_type", "default") not in (None, "default"):
            raise cf.fail(
                path,
                "rope_parameters.sliding_attention.rope_type",
                "'default' (scaled rope in the sliding layers is not supported)",
                local.get("rope_type"),
            )
        d["rope_theta"] = full.pop("rope_theta", 1000000.0)
        if full.get("rope_type", full.get("type", "default")) not in (None, "default"):
            d["rope_scaling"] = full
        d["rope_local_theta"] = local.get("rope_theta", _LOCAL_THETA)
    elif isinstance(rope, dict):  # one set for every layer (Gemma 2)
        d["rope_parameters"] = rope
    if d.get("model_type") == "gemma3_text":
        d.setdefault("rope_local_theta", d.pop("rope_local_base_freq", None) or _LOCAL_THETA)
    else:
        d.pop("rope_local_base_freq", None)


def gemma_config_from_gguf(d, md, arch, path):
    """A GemmaConfig from the Llama-style fields `d` gguf_llama read from a "gemma2" or
    "gemma3" GGUF and its metadata `md`, with what llama.cpp leaves implicit."""
    model_type = {"gemma2": "gemma2", "gemma3": "gemma3_text"}[arch]
    d = dict(d, model_type=model_type)
    key = md.get
    pattern = key(f"{arch}.attention.sliding_window_pattern")
    n = d["num_hidden_layers"]
    if isinstance(pattern, list):  # per layer: True where the layer is a sliding one
        if len(pattern) != n or not all(isinstance(v, bool) for v in pattern):
            raise cf.fail(
                path, f"{arch}.attention.sliding_window_pattern", f"{n} booleans", pattern
            )
        d["layer_types"] = ["sliding_attention" if v else "full_attention" for v in pattern]
    elif pattern is not None:
        d["sliding_window_pattern"] = pattern
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        value = key(f"{arch}.{name}")
        d[name] = cf.optional(cf.positive_number, path, f"{arch}.{name}", value)
    # llama.cpp scales queries by 1/sqrt(head size), except in the 27B models (62 layers in
    # Gemma 3, 46 in Gemma 2), whose configs set query_pre_attn_scalar = hidden / heads.
    big = {"gemma2": 46, "gemma3": 62}[arch] == n
    hidden, heads = d["hidden_size"], d["num_attention_heads"]
    d["query_pre_attn_scalar"] = hidden // heads if big else d["head_dim"]
    cfg = GemmaConfig.from_dict(d, path)
    cfg.norm_plus_one = False  # llama.cpp's converter already added the 1 to every norm
    return cfg
