"""The configuration shared by the Llama family, read from a Hugging Face config.json.

Llama 2/3, Mistral, Qwen2, Gemma and Phi-3 differ only in switches: biases, fused
projections, norm offset, embedding scale, activation, sliding window, rope scaling.
`model_type` picks each family's defaults; the file's fields override them.
"""
import json
import math
import os
from dataclasses import dataclass, field, fields

from ..errors import FormatError

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "gemma", "phi3")


@dataclass
class LlamaConfig:
    model_type: str = "llama"
    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = None
    head_dim: int = None
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rope_scaling: dict = None            # {"rope_type": "llama3" | "linear" | "dynamic", ...}
    partial_rotary_factor: float = 1.0   # Phi-3.5/4-mini rotate only part of each head
    rope_interleaved: bool = False       # GGUF llama weights pair adjacent features
    tie_word_embeddings: bool = False
    attention_bias: bool = False         # bias on q, k, v and o (Llama's switch)
    qkv_bias: bool = False               # bias on q, k, v only (Qwen2)
    mlp_bias: bool = False
    sliding_window: int = None
    layer_types: list = None             # per layer "full_attention" | "sliding_attention"
    fused_qkv: bool = False              # Phi-3: one qkv_proj
    fused_gate_up: bool = False          # Phi-3: one gate_up_proj
    norm_plus_one: bool = False          # Gemma: RMSNorm scales by (1 + w)
    embed_scale: float = None            # Gemma: embeddings times sqrt(hidden_size)
    bos_token_id: int = None
    eos_token_id: object = None          # an int or a list of ints
    pad_token_id: int = None
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise FormatError(
                f"config: num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}", field="num_key_value_heads")

    @property
    def rotary_dim(self):
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def eos_token_ids(self):
        e = self.eos_token_id
        if e is None:
            return []
        return [int(x) for x in e] if isinstance(e, (list, tuple)) else [int(e)]

    def window_for_layer(self, i):
        """The sliding window of layer i, or None for full attention."""
        if self.layer_types is not None:
            return self.sliding_window if self.layer_types[i] == "sliding_attention" else None
        if self.model_type == "qwen2" and not self.extra.get("use_sliding_window", False):
            return None
        return self.sliding_window

    @classmethod
    def from_dict(cls, d, path="config.json"):
        d = dict(d)
        model_type = d.get("model_type", "llama")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise FormatError(
                f"{path}: model_type {model_type!r} is not a Llama-family model "
                f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})", path=path, field="model_type")
        # transformers >= 5 nests rope settings in rope_parameters; older files have
        # rope_theta and rope_scaling at the top level.
        rope = d.pop("rope_parameters", None)
        if isinstance(rope, dict):
            rope = dict(rope)
            d.setdefault("rope_theta", rope.pop("rope_theta", 10000.0))
            if "partial_rotary_factor" in rope:
                d.setdefault("partial_rotary_factor", rope.pop("partial_rotary_factor"))
            kind = rope.get("rope_type", rope.get("type", "default"))
            if kind not in (None, "default"):
                d.setdefault("rope_scaling", rope)
        if d.get("rope_scaling") is not None:
            scaling = dict(d["rope_scaling"])
            scaling.setdefault("max_position_embeddings", d.get("max_position_embeddings"))
            d["rope_scaling"] = scaling
        family = dict(_FAMILY_DEFAULTS.get(model_type, {}))
        if model_type == "gemma":
            hidden = d.get("hidden_size", cls.hidden_size)
            family["embed_scale"] = math.sqrt(hidden)
            # Gemma's released configs say "gelu" but mean the tanh approximation
            # (transformers rewrites it the same way); hidden_activation wins when set.
            act = d.get("hidden_activation") or d.get("hidden_act") or "gelu_pytorch_tanh"
            d["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
        known = {f.name for f in fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in family.items()}
        kwargs.update({k: v for k, v in d.items() if k in known and v is not None
                       or k in ("sliding_window", "layer_types")})
        kwargs["extra"] = {k: v for k, v in d.items() if k not in known}
        kwargs["model_type"] = model_type
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise FormatError(f"{path}: {exc}", path=path) from None

    @classmethod
    def from_file(cls, path):
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError) as exc:
            raise FormatError(f"{path}: cannot read the model config ({exc})", path=path) from None
        if not isinstance(d, dict):
            raise FormatError(f"{path}: the config must be a JSON object", path=path)
        return cls.from_dict(d, path)


_FAMILY_DEFAULTS = {
    "llama": {},
    "mistral": {},
    "qwen2": {"qkv_bias": True},
    "gemma": {"norm_plus_one": True, "tie_word_embeddings": True},
    "phi3": {"fused_qkv": True, "fused_gate_up": True},
}
