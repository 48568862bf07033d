"""Language models from GGUF files (llama.cpp's format): the Llama family and Gemma 2/3.

    model = load_gguf_model("tinyllama.Q4_K_M.gguf", device=ember.Device.cpu())
    tok = tokenizer_from_gguf("tinyllama.Q4_K_M.gguf")

GGUF names tensors its own way (`blk.0.attn_q.weight`); `GGUFSource` presents them under
Hugging Face names to the same VarBuilder the safetensors path uses, so the model code
is shared. On the CPU quantized weights stay packed in the file's memory map and run
through `qmatmul` (a chunk of rows dequantized at a time). On WebGPU the linear layers'
weights of types its kernel decodes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K .. Q6_K:
every quantized tensor of the common GGUF files) go to the device as their raw blocks
and are dequantized inside the matmul, so device memory is about the file's tensor bytes; other types, and other
devices, get those weights dequantized to f32 a few MiB of rows at a time while
uploading (quant_layers.QuantLinear.place). A quantized embedding table stays on the
host: only the looked-up rows are dequantized and uploaded.

llama.cpp's converter permutes the rows of q and k for the "llama" architecture so that
rotary pairs are adjacent; those models use the interleaved rope layout.
"""

import math
from dataclasses import dataclass

import numpy as np

from .. import dtype as dt
from ..device import as_device
from ..errors import FormatError
from ..io.gguf import GGUFFile
from ..io.quant import GGMLType
from ..nn import VarBuilder
from ..tensor import from_numpy
from .gemma import GemmaForCausalLM
from .gemma_config import gemma_config_from_gguf
from .llama import LlamaForCausalLM
from .llama_config import LlamaConfig, check_gguf_metadata
from .quant_layers import ConcatLinear, QuantEmbedding, QuantizedLayers, QuantLinear

_PLAIN = {GGMLType.F32, GGMLType.F16, GGMLType.BF16}

_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight",  # Phi-3 stores gate and up fused here
}


# Gemma 2/3 layers: four norms, and per-head q/k norms (Gemma 3). llama.cpp's "ffn_norm"
# is the norm before the MLP here, not the one after attention as in Llama.
_GEMMA_LAYER_NAMES = {
    **{k: v for k, v in _LAYER_NAMES.items() if "layernorm" not in k},
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
}


def _llama_family(model_type):
    def config(d, md, arch, path):
        cfg = LlamaConfig.from_dict(dict(d, model_type=model_type), path=path)
        if model_type == "gemma":
            cfg.norm_plus_one = False  # llama.cpp's converter already added the 1
            cfg.embed_scale = math.sqrt(cfg.hidden_size)
        return cfg

    return config


@dataclass(frozen=True)
class Architecture:
    """What loading one GGUF `general.architecture` takes."""

    model: type  # the model class
    config: object  # (Llama-style fields, metadata, arch, path) -> the model's config
    layer_names: dict  # Hugging Face layer tensor names -> llama.cpp's
    half_rope: bool  # the converter left rotary pairs split in halves (llama.cpp "NEOX")


# The GGUF architectures ember loads (a new family joins here).
ARCHITECTURES = {
    "llama": Architecture(LlamaForCausalLM, _llama_family("llama"), _LAYER_NAMES, False),
    "mistral": Architecture(LlamaForCausalLM, _llama_family("mistral"), _LAYER_NAMES, False),
    "qwen2": Architecture(LlamaForCausalLM, _llama_family("qwen2"), _LAYER_NAMES, True),
    "gemma": Architecture(LlamaForCausalLM, _llama_family("gemma"), _LAYER_NAMES, True),
    "phi3": Architecture(LlamaForCausalLM, _llama_family("phi3"), _LAYER_NAMES, True),
    "gemma2": Architecture(GemmaForCausalLM, gemma_config_from_gguf, _GEMMA_LAYER_NAMES, True),
    "gemma3": Architecture(GemmaForCausalLM, gemma_config_from_gguf, _GEMMA_LAYER_NAMES, True),
}


def architecture(gguf_file):
    """The registry entry for the file's general.architecture (FormatError naming it and
    the supported ones when ember has none)."""
    arch = gguf_file.metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise FormatError(
            f"{gguf_file.path}: general.architecture {arch!r} is not a model ember can load "
            f"(supported: {', '.join(ARCHITECTURES)})",
            path=gguf_file.path,
            field="general.architecture",
        )
    return arch, ARCHITECTURES[arch]


def gguf_name(hf_name):
    """The llama.cpp tensor name for a Hugging Face Llama tensor name (None if unmapped)."""
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    parts = hf_name.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit():
        tail = _LAYER_NAMES.get(parts[3])
        if tail is not None:
            return f"blk.{parts[2]}.{tail}"
    return None


class GGUFSource:
    """A VarBuilder source over a GGUFFile, answering by Hugging Face names.

    Quantized 2-D tensors load as QTensor views of the memory map (the layers built
    over them place their weights on the model's device, see load_gguf_model); other
    tensors (F32/F16/BF16, 1-D) load as ember tensors on the device. With `dequantize`
    every tensor loads dense, in the VarBuilder's dtype.
    """

    def __init__(self, gguf_file, layer_names=_LAYER_NAMES, dequantize=False):
        self.file = gguf_file
        self.dequantize = dequantize
        self._names = {}
        for name in list(_GLOBAL_NAMES):
            if _GLOBAL_NAMES[name] in gguf_file.tensors:
                self._names[name] = _GLOBAL_NAMES[name]
        for gname in gguf_file.tensors:
            parts = gname.split(".", 2)
            if parts[0] == "blk" and len(parts) == 3:  # other names are not layer weights
                _, layer, tail = parts
                for hf_tail, g_tail in layer_names.items():
                    if g_tail == tail:
                        self._names[f"model.layers.{layer}.{hf_tail}"] = gname

    def keys(self):
        return self._names.keys()

    def __contains__(self, name):
        return name in self._names

    def shape(self, name):
        return tuple(self.file.tensors[self._names[name]].shape)

    def where(self, name=None):
        if name is None:
            return self.file.path
        return f"{self.file.path} (tensor {self._names.get(name, name)!r})"

    def _kept(self, ggml_type, device):
        """Whether a 2-D tensor of this type stays in its file's type (a QTensor): every
        block type, and F16 where the device computes with halves as stored (the CPU with
        the jit extra: half the memory of the f32 copy, and of its reads a decode step)."""
        if ggml_type not in _PLAIN:
            return True
        return ggml_type == GGMLType.F16 and device.backend.computes_quantized(GGMLType.F16)

    def load(self, name, device=None, dtype=None):
        gname = self._names[name]
        info = self.file.tensors[gname]
        device = as_device(device) if device is not None else as_device("cpu")
        want = dt.as_dtype(dtype) if dtype is not None else dt.f32
        if len(info.shape) == 2 and not self.dequantize and self._kept(info.ggml_type, device):
            return self.file.qtensor(gname)
        t = from_numpy(self.file.dequantize(gname)).to(device)
        return t if t.dtype is want else t.to(want)


def config_from_gguf(gguf_file):
    """The model's config (a LlamaConfig, or its family's subclass) from a GGUF file's
    metadata (llama.cpp's key names)."""
    md = gguf_file.metadata
    arch, entry = architecture(gguf_file)
    check_gguf_metadata(md, arch, gguf_file.path)  # types and ranges, before int() and //

    def key(name, default=None, required=False):
        full = f"{arch}.{name}"
        if full in md:
            return md[full]
        if required:
            raise FormatError(
                f"{gguf_file.path}: metadata key {full!r} is missing",
                path=gguf_file.path,
                field=full,
            )
        return default

    hidden = int(key("embedding_length", required=True))
    heads = int(key("attention.head_count", required=True))
    head_dim = int(key("attention.key_length", hidden // heads))
    rot = key("rope.dimension_count")
    tokens = md.get("tokenizer.ggml.tokens")
    embd = gguf_file.tensors.get("token_embd.weight")
    if embd is None:
        raise FormatError(
            f"{gguf_file.path}: tensor 'token_embd.weight' is missing",
            path=gguf_file.path,
            field="token_embd.weight",
        )
    vocab = int(key("vocab_size", len(tokens) if tokens else embd.shape[0]))
    kv_heads = key("attention.head_count_kv", heads)
    if isinstance(kv_heads, list):  # per-layer counts: llama-family models use one
        kv_heads = kv_heads[0]
    scaling = None
    kind = key("rope.scaling.type")
    if kind in ("linear",) and key("rope.scaling.factor"):
        scaling = {"rope_type": "linear", "factor": float(key("rope.scaling.factor"))}
    d = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length", required=True)),
        "num_hidden_layers": int(key("block_count", required=True)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv_heads),
        "head_dim": head_dim,
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(key("rope.freq_base", 10000.0)),
        "rope_scaling": scaling,
        "partial_rotary_factor": (int(rot) / head_dim) if rot else 1.0,
        "max_position_embeddings": int(key("context_length", 2048)),
        "sliding_window": key("attention.sliding_window"),
        "tie_word_embeddings": "output.weight" not in gguf_file.tensors,
        "rope_interleaved": not entry.half_rope,
        "qkv_bias": "blk.0.attn_q.bias" in gguf_file.tensors,
        "attention_bias": "blk.0.attn_output.bias" in gguf_file.tensors,
        "bos_token_id": md.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": md.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": md.get("tokenizer.ggml.padding_token_id"),
    }
    cfg = entry.config(d, md, arch, gguf_file.path)
    if "rope_freqs.weight" in gguf_file.tensors:  # llama3 scaling, as per-frequency divisors
        cfg.extra["rope_freq_factors"] = gguf_file.dequantize("rope_freqs.weight")
    return cfg


def load_gguf_model(path, device=None, dtype=dt.f32, dequantize=False, max_len=None):
    """The model of the file's architecture (LlamaForCausalLM, GemmaForCausalLM) over its
    weights, kept memory-mapped on the CPU; with `dequantize`, every weight dequantized
    once at load into dense `dtype` tensors instead (the reference form of the model).
    `max_len` caps the context below the file's (see LlamaForCausalLM)."""
    device = as_device(device) if device is not None else as_device("cpu")
    f = path if isinstance(path, GGUFFile) else GGUFFile(path)
    cfg = config_from_gguf(f)
    # The config's checks read the tokenizer's long lists (~9 MiB of Python objects for
    # SmolLM2); the model needs none of them: let them go before its pages are touched,
    # and the file's pages they were read from too.
    f.metadata.release_arrays()
    f.release_header_pages()
    _, entry = architecture(f)
    source = GGUFSource(f, entry.layer_names, dequantize=dequantize)
    vb = VarBuilder(source, dtype=dtype, device=device)
    model = entry.model(cfg, vb, device, layers=QuantizedLayers(), max_len=max_len)
    model._gguf = f  # the memory map must outlive the quantized weights viewing it
    if isinstance(model.embed_tokens, QuantEmbedding):
        model.embed_tokens.out_dtype = dt.as_dtype(dtype)
    # Place now (not at the first forward), one layer at a time: a GPU uploads raw blocks
    # where it has a kernel for the type, else f32 dequantized in row chunks; the CPU keeps
    # the file's view and loads its kernels for the types before any weight is read.
    for _, m in model.named_modules():
        if isinstance(m, QuantLinear):
            m.place(device, dtype)
    return model


def device_weight_bytes(model):
    """Bytes the placed quantized layers' weights take on the model's device."""
    return sum(m.device_bytes() for _, m in model.named_modules() if isinstance(m, QuantLinear))


def tokenizer_from_gguf(path):
    """An ember Tokenizer built from the GGUF file's tokenizer.ggml.* metadata."""
    from .gguf_tokenizer import tokenizer_from_metadata

    f = path if isinstance(path, GGUFFile) else GGUFFile(path)
    tokenizer = tokenizer_from_metadata(f.metadata, f.path)
    f.metadata.release_arrays()  # the tokenizer holds what it needs of them
    return tokenizer


__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "ConcatLinear",
    "GGUFSource",
    "QuantizedLayers",
    "config_from_gguf",
    "device_weight_bytes",
    "gguf_name",
    "load_gguf_model",
    "tokenizer_from_gguf",
    "np",
]
