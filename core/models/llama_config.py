"""The configuration shared by the Llama family, read from a Hugging Face config.json.

Llama 2/3, Mistral, Qwen2, Gemma and Phi-3 differ only in switches: biases, fused
projections, norm offset, embedding scale, activation, sliding window, rope scaling.
`model_type` picks each family's defaults; the file's fields override them.
"""

import math
import os
from dataclasses import dataclass, field, fields

from ..errors import FormatError
from ..io.files import read_json
from . import config_fields as cf

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "gemma", "phi3")
LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclass
class LlamaConfig:
    MODEL_TYPES = SUPPORTED_MODEL_TYPES  # what from_dict accepts (a family's subclass changes it)
    family = "Llama-family"  # named when a model_type is refused

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
    rope_scaling: dict = None  # {"rope_type": "llama3" | "linear" | "dynamic", ...}
    partial_rotary_factor: float = 1.0  # Phi-3.5/4-mini rotate only part of each head
    rope_interleaved: bool = False  # GGUF llama weights pair adjacent features
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q, k, v and o (Llama's switch)
    qkv_bias: bool = False  # bias on q, k, v only (Qwen2)
    mlp_bias: bool = False
    sliding_window: int = None
    layer_types: list = None  # per layer "full_attention" | "sliding_attention"
    fused_qkv: bool = False  # Phi-3: one qkv_proj
    fused_gate_up: bool = False  # Phi-3: one gate_up_proj
    norm_plus_one: bool = False  # Gemma: RMSNorm scales by (1 + w)
    embed_scale: float = None  # Gemma: embeddings times sqrt(hidden_size)
    bos_token_id: int = None
    eos_token_id: object = None  # an int or a list of ints
    pad_token_id: int = None
    extra: dict = field(default_factory=dict, repr=False)
    source: str = field(default="config", repr=False, compare=False)  # named in errors

    def __post_init__(self):
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None:
            heads = cf.positive_int(self.source, "num_attention_heads", self.num_attention_heads)
            hidden = cf.positive_int(self.source, "hidden_size", self.hidden_size)
            if hidden % heads:
                raise FormatError(
                    f"{self.source}: field 'hidden_size' {hidden} is not divisible by "
                    f"num_attention_heads {heads} (and no head_dim is given)",
                    path=self.source,
                    field="hidden_size",
                )
            self.head_dim = hidden // heads
        self.validate()

    def validate(self):
        """Every field the model reads, checked (FormatError naming the file and field)."""
        src = self.source
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            cf.positive_int(src, name, getattr(self, name))
        if self.num_attention_heads % self.num_key_value_heads:
            raise FormatError(
                f"{src}: num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}",
                path=src,
                field="num_key_value_heads",
            )
        cf.string(src, "model_type", self.model_type, self.MODEL_TYPES)
        cf.string(src, "hidden_act", self.hidden_act)
        self.rms_norm_eps = cf.positive_number(src, "rms_norm_eps", self.rms_norm_eps)
        self.rope_theta = cf.positive_number(src, "rope_theta", self.rope_theta)
        self.partial_rotary_factor = cf.number(
            src,
            "partial_rotary_factor",
            self.partial_rotary_factor,
            low=0.0,
            high=1.0,
            low_open=True,
        )
        if self.rotary_dim < 2 or self.rotary_dim % 2:
            raise FormatError(
                f"{src}: head_dim {self.head_dim} times partial_rotary_factor "
                f"{self.partial_rotary_factor} gives {self.rotary_dim} rotary features; rope "
                "needs an even number >= 2",
                path=src,
                field="partial_rotary_factor",
            )
        for name in (
            "rope_interleaved",
            "tie_word_embeddings",
            "attention_bias",
            "qkv_bias",
            "mlp_bias",
            "fused_qkv",
            "fused_gate_up",
            "norm_plus_one",
        ):
            cf.boolean(src, name, getattr(self, name))
        cf.optional(cf.positive_int, src, "sliding_window", self.sliding_window)
        if self.layer_types is not None:
            if (
                not isinstance(self.layer_types, list)
                or len(self.layer_types) != self.num_hidden_layers
            ):
                raise cf.fail(
                    src,
                    "layer_types",
                    f"a list of {self.num_hidden_layers} layer types (one per layer)",
                    self.layer_types,
                )
            for i, kind in enumerate(self.layer_types):
                cf.string(src, f"layer_types[{i}]", kind, LAYER_TYPES)
        if self.embed_scale is not None:
            self.embed_scale = cf.positive_number(src, "embed_scale", self.embed_scale)
        cf.token_ids(src, "bos_token_id", self.bos_token_id)
        cf.token_ids(src, "eos_token_id", self.eos_token_id)
        cf.optional(cf.integer, src, "pad_token_id", self.pad_token_id, low=None)
        if self.rope_scaling is not None:
            self.rope_scaling = _check_rope_scaling(src, self.rope_scaling, self.rotary_dim)

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
        if not isinstance(model_type, str) or model_type not in cls.MODEL_TYPES:
            raise FormatError(
                f"{path}: model_type {model_type!r} is not a {cls.family} model "
                f"(supported: {', '.join(cls.MODEL_TYPES)})",
                path=path,
                field="model_type",
            )
        # transformers >= 5 nests rope settings in rope_parameters; older files have
        # rope_theta and rope_scaling at the top level.
        rope = d.pop("rope_parameters", None)
        cf.optional(cf.mapping, path, "rope_parameters", rope)
        if isinstance(rope, dict):
            rope = dict(rope)
            d.setdefault("rope_theta", rope.pop("rope_theta", 10000.0))
            if "partial_rotary_factor" in rope:
                d.setdefault("partial_rotary_factor", rope.pop("partial_rotary_factor"))
            kind = rope.get("rope_type", rope.get("type", "default"))
            if kind not in (None, "default"):
                d.setdefault("rope_scaling", rope)
        if d.get("rope_scaling") is not None:
            scaling = dict(cf.mapping(path, "rope_scaling", d["rope_scaling"]))
            scaling.setdefault("max_position_embeddings", d.get("max_position_embeddings"))
            d["rope_scaling"] = scaling
        family = dict(_FAMILY_DEFAULTS.get(model_type, {}))
        if model_type == "gemma":
            hidden = cf.positive_int(path, "hidden_size", d.get("hidden_size", cls.hidden_size))
            family["embed_scale"] = math.sqrt(hidden)
            # Gemma's released configs say "gelu" but mean the tanh approximation
            # (transformers rewrites it the same way); hidden_activation wins when set.
            act = d.get("hidden_activation") or d.get("hidden_act") or "gelu_pytorch_tanh"
            cf.string(path, "hidden_activation", act)
            d["hidden_act"] = "gelu_pytorch_tanh" if act == "gelu" else act
        known = {f.name for f in fields(cls)} - {"extra", "source"}
        kwargs = dict(family)
        kwargs.update(
            {
                k: v
                for k, v in d.items()
                if (k in known and v is not None) or k in ("sliding_window", "layer_types")
            }
        )
        kwargs["extra"] = {k: v for k, v in d.items() if k not in known}
        kwargs["model_type"] = model_type
        kwargs["source"] = path
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise FormatError(f"{path}: {exc}", path=path) from None

    @classmethod
    def from_file(cls, path):
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        d = read_json(path, "model config")
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


def _check_rope_scaling(src, scaling, rotary_dim):
    """rope_scaling as rope.py reads it: a known kind with the numbers that kind needs."""
    cf.mapping(src, "rope_scaling", scaling)
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    cf.optional(cf.string, src, "rope_scaling.rope_type", kind)
    if kind in (None, "default"):
        return scaling
    out = dict(scaling)
    if "factor" in scaling or kind in ("linear", "dynamic", "llama3"):
        out["factor"] = cf.positive_number(src, "rope_scaling.factor", scaling.get("factor"))
    if kind == "dynamic":
        if rotary_dim <= 2:
            raise cf.fail(
                src,
                "rope_scaling.rope_type",
                "used with more than 2 rotary features (dynamic scaling divides by rotary_dim - 2)",
                kind,
            )
        original = scaling.get("original_max_position_embeddings") or scaling.get(
            "max_position_embeddings"
        )
        cf.positive_int(src, "rope_scaling.original_max_position_embeddings", original)
    if kind == "llama3":
        low = cf.positive_number(
            src, "rope_scaling.low_freq_factor", scaling.get("low_freq_factor")
        )
        high = cf.positive_number(
            src, "rope_scaling.high_freq_factor", scaling.get("high_freq_factor")
        )
        if high == low:
            raise cf.fail(
                src, "rope_scaling.high_freq_factor", "different from low_freq_factor", high
            )
        cf.positive_int(
            src,
            "rope_scaling.original_max_position_embeddings",
            scaling.get("original_max_position_embeddings"),
        )
    return out


def check_gguf_metadata(md, arch, path):
    """The `{arch}.*` and `tokenizer.ggml.*` values a LlamaConfig is built from (see
    gguf_llama.config_from_gguf), checked before anything converts or divides them."""

    def get(name):
        return md.get(f"{arch}.{name}")

    def count(name, required=False):
        value = get(name)
        if value is None and not required:
            return None
        return cf.positive_int(path, f"{arch}.{name}", value)

    hidden = count("embedding_length")
    heads = count("attention.head_count")
    for name in (
        "feed_forward_length",
        "block_count",
        "context_length",
        "vocab_size",
        "attention.sliding_window",
    ):
        count(name)
    head_dim = count("attention.key_length")
    if head_dim is None and hidden is not None and heads is not None and hidden % heads:
        raise FormatError(
            f"{path}: {arch}.embedding_length {hidden} is not divisible by "
            f"{arch}.attention.head_count {heads} (and no "
            f"{arch}.attention.key_length is given)",
            path=path,
            field=f"{arch}.embedding_length",
        )
    rot = count("rope.dimension_count")
    if rot is not None and head_dim is not None and rot > head_dim:
        raise cf.fail(
            path, f"{arch}.rope.dimension_count", f"at most the head size {head_dim}", rot
        )
    kv = get("attention.head_count_kv")
    if isinstance(kv, list):
        if not kv:
            raise cf.fail(
                path, f"{arch}.attention.head_count_kv", "a count or a non-empty list of counts", kv
            )
        for i, v in enumerate(kv):
            cf.positive_int(path, f"{arch}.attention.head_count_kv[{i}]", v)
        kv = kv[0]  # config_from_gguf uses the first: llama-family layers share one
    else:
        kv = count("attention.head_count_kv")
    if kv is not None and heads is not None and heads % kv:
        raise FormatError(
            f"{path}: {arch}.attention.head_count {heads} is not a multiple of "
            f"{arch}.attention.head_count_kv {kv}",
            path=path,
            field=f"{arch}.attention.head_count_kv",
        )
    for name in ("attention.layer_norm_rms_epsilon", "rope.freq_base"):
        cf.optional(cf.positive_number, path, f"{arch}.{name}", get(name))
    cf.optional(cf.string, path, f"{arch}.rope.scaling.type", get("rope.scaling.type"))
    cf.optional(cf.number, path, f"{arch}.rope.scaling.factor", get("rope.scaling.factor"), low=0.0)
    # The tokenizer built from the same metadata hashes tokens and merges, indexes scores.
    _check_array(md, "tokenizer.ggml.tokens", (str, bytes), "strings", path)
    _check_array(md, "tokenizer.ggml.merges", (str,), "strings", path)
    _check_array(md, "tokenizer.ggml.token_type", (int,), "integers", path)
    _check_array(md, "tokenizer.ggml.scores", (int, float), "numbers", path)
    tokens = md.get("tokenizer.ggml.tokens")
    if tokens is not None:
        for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            if md.get(key) is not None and len(md[key]) != len(tokens):
                raise cf.fail(
                    path,
                    key,
                    f"an array of {len(tokens)} entries (one per token)",
                    f"{len(md[key])} entries",
                )
    top = None if not tokens else len(tokens) - 1
    for key in (
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.unknown_token_id",
    ):
        cf.optional(cf.integer, path, key, md.get(key), low=0, high=top)
    cf.optional(
        cf.boolean, path, "tokenizer.ggml.add_bos_token", md.get("tokenizer.ggml.add_bos_token")
    )
    cf.optional(cf.string, path, "tokenizer.ggml.model", md.get("tokenizer.ggml.model"))
    cf.optional(cf.string, path, "tokenizer.ggml.pre", md.get("tokenizer.ggml.pre"))


def _check_array(md, key, types, what, path):
    value = md.get(key)
    if value is None:
        return
    if not isinstance(value, list):
        raise cf.fail(path, key, f"an array of {what}", value)
    for i, v in enumerate(value):
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise cf.fail(path, f"{key}[{i}]", f"one of an array of {what}", v)
