"""`verify_model`: ember's model of a family it ships against transformers' (torch, CPU),
on the same inputs, compared block by block.

Families: BERT encoders (model_type "bert", sentence-embedding directories included),
the causal LMs `load_causal_lm` reads (Llama family, Gemma 2/3) from a safetensors
directory or a GGUF file (transformers reads the GGUF through its own loader, the `gguf`
package's dequantizer), and Whisper from a Hugging Face or CTranslate2 directory (see
whisper_family). The pairs are the blocks both implementations share, named as ember
names them; inside a block ember may fuse what transformers keeps apart (QKV in one GEMM,
the activation inside a Linear), so finer pairs would differ by construction, not by error.
"""

import json
import os

import numpy as np

from .. import dtype as dt
from ..errors import FormatError, InvalidArgument
from . import whisper_family
from .compare import compare
from .gguf_reference import transformers_from_gguf
from .reference import import_torch, import_transformers

REFERENCES = ("transformers",)


def supported_model_types():
    """The config.json model_types verify knows, in the order an error lists them."""
    from ..models.causal_lm import MODEL_CLASSES

    return ("bert", *MODEL_CLASSES, "whisper")


def detect(path):
    """("bert" | "llama" | "whisper" | "gguf", config dict or None) for a model path, or
    FormatError (for a directory of another family, naming the supported ones)."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic == b"GGUF":
            return "gguf", None
        raise FormatError(f"verify: {path} is neither a GGUF file nor a model directory", path=path)
    if not os.path.isdir(path):
        raise FormatError(f"verify: {path} does not exist", path=path)
    if os.path.isfile(os.path.join(path, "model.bin")):
        return "whisper", None  # CTranslate2: the one family ember reads in that format
    cfg_path = os.path.join(path, "config.json")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as exc:
        raise FormatError(f"verify: cannot read {cfg_path} ({exc})", path=cfg_path) from None
    if not isinstance(cfg, dict):
        raise FormatError(f"verify: {cfg_path} is not a JSON object", path=cfg_path)
    kind = cfg.get("model_type", "llama")  # as load_causal_lm reads a config without one
    known = supported_model_types()
    if kind not in known:
        raise FormatError(
            f"verify: {cfg_path}: model_type {kind!r} is not a family verify knows "
            f"(supported: {', '.join(known)})",
            path=cfg_path,
            field="model_type",
        )
    return (kind if kind in ("bert", "whisper") else "llama"), cfg


def verify_model(
    path, device="cpu", reference="transformers", atol=1e-4, rtol=1e-4, tokens=16, text=None, seed=0
):
    """(Report, facts) comparing ember and `reference` on the model at `path`."""
    if reference not in REFERENCES:
        raise InvalidArgument(
            f"verify: unknown reference {reference!r} (known: {', '.join(REFERENCES)})",
            op="verify",
            reference=reference,
        )
    if not isinstance(tokens, int) or tokens < 1:
        raise InvalidArgument(
            f"verify: tokens must be a positive integer, got {tokens!r}", op="verify"
        )
    from ..device import as_device, exact_cpu_products

    device = as_device(device)
    family, cfg = detect(path)
    import_transformers()  # fail before loading anything when the reference is missing
    loader = {"bert": _bert, "llama": _llama, "gguf": _gguf, "whisper": _whisper}[family]
    ember_model, torch_model, pairs, vocab, tokenizer = loader(path, device)
    ids = _ids(tokenizer, text, vocab, tokens, seed, path)
    extra = {}
    if family == "whisper":
        cfg_w = ember_model.config
        if ids.shape[1] > cfg_w.max_target_positions:
            raise InvalidArgument(
                f"verify: {ids.shape[1]} tokens exceed the decoder's max_target_positions "
                f"{cfg_w.max_target_positions}",
                op="verify",
            )
        mels = whisper_family.features(cfg_w, seed)
        e_in = (mels, ids)
        t_in = {"input_features": mels, "decoder_input_ids": ids, "use_cache": False}
        extra["features_shape"] = list(mels.shape)
    elif family == "bert":
        mask = np.ones_like(ids)
        if ids.shape[1] > 1:
            # a second row with its last quarter padded exercises the attention mask
            ids = np.concatenate([ids, ids[:, ::-1]])
            mask = np.concatenate([mask, mask])
            mask[1, ids.shape[1] - max(1, ids.shape[1] // 4) :] = 0
        e_in, t_in = (ids, mask), {"input_ids": ids, "attention_mask": mask}
    else:
        e_in, t_in = (ids,), {"input_ids": ids}
    # quantized products in f32 arithmetic (the reference's): a prompt's products would
    # otherwise round x to 16 bits (llvm_integer_gemm), a difference of ~1e-5 relative a
    # product that is the design's, not a defect to find
    with exact_cpu_products():
        report = compare(
            ember_model,
            torch_model,
            e_in,
            pairs,
            torch_inputs=t_in,
            atol=atol,
            rtol=rtol,
            device=device,
        )
    facts = {
        "model": path,
        "family": _family_name(family, ember_model, path),
        "model_type": (cfg or {}).get("model_type", _no_config_type(family)),
        "device": str(device),
        "reference": reference,
        "input_shape": list(ids.shape),
        **extra,
    }
    return report, facts


def _family_name(family, ember_model, path):
    if family == "gguf":
        return f"{_causal_family(ember_model)} (gguf)"
    if family == "llama":
        return _causal_family(ember_model)
    if family == "whisper" and os.path.isfile(os.path.join(path, "model.bin")):
        return "whisper (ctranslate2)"
    return family


def _causal_family(ember_model):
    from ..models.gemma import GemmaForCausalLM

    return "gemma" if isinstance(ember_model, GemmaForCausalLM) else "llama"


def _no_config_type(family):
    return "gguf" if family == "gguf" else "ctranslate2"


def _ids(tokenizer, text, vocab, tokens, seed, path):
    if text is not None:
        if tokenizer is None:
            raise InvalidArgument(
                f"verify: --text needs a tokenizer and {path} has none", op="verify", path=path
            )
        ids = list(tokenizer.encode(text).ids)
        if not ids:
            raise InvalidArgument("verify: the text encodes to no tokens", op="verify")
        return np.asarray([ids], dtype=np.int64)
    low = min(5, vocab - 1)
    return np.random.default_rng(seed).integers(low, vocab, (1, tokens)).astype(np.int64)


def _tokenizer(path):
    tok = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(tok):
        return None
    from ..pipelines.tokenizer_loader import load_tokenizer

    return load_tokenizer(tok)


def _bert(path, device):
    from ..models.bert import BertConfig, BertModel
    from ..nn import VarBuilder

    transformers = import_transformers()
    cfg = BertConfig.from_json(os.path.join(path, "config.json"))
    ember_model = BertModel(cfg, VarBuilder.from_dir(path, dtype=dt.f32, device=device))
    torch_model = transformers.BertModel.from_pretrained(
        path, dtype=import_torch().float32, add_pooling_layer=False
    ).eval()
    pairs = {"embeddings": "embeddings"}
    for i in range(cfg.num_hidden_layers):
        for part in ("attention.self", "attention", "intermediate", "output", ""):
            name = f"encoder.layer.{i}" + (f".{part}" if part else "")
            pairs[name] = name
    return ember_model, torch_model, pairs, cfg.vocab_size, _tokenizer(path)


# a decoder layer's parts compared on their own (Gemma 2/3 add the two feed-forward norms)
_LAYER_PARTS = (
    "input_layernorm",
    "self_attn",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "mlp",
    "post_feedforward_layernorm",
)


def _llama_pairs(ember_model, torch_model):
    cfg = ember_model.config
    ember_tree = dict(ember_model.named_modules())
    torch_tree = dict(torch_model.named_modules())
    # Gemma3ForConditionalGeneration keeps its text model under model.language_model
    base = "model.language_model." if "model.language_model.layers.0" in torch_tree else "model."
    # Gemma: transformers scales the embedding inside embed_tokens, ember right after it,
    # so that pair differs by the scale; layer 0's input norm compares what follows.
    pairs = {} if cfg.embed_scale is not None else {"embed_tokens": base + "embed_tokens"}
    for i in range(cfg.num_hidden_layers):
        for part in _LAYER_PARTS + ("",):
            name = f"layers.{i}" + (f".{part}" if part else "")
            if name in ember_tree:
                pairs[name] = base + name
    pairs.update({"norm": base + "norm", "lm_head": "lm_head"})
    return pairs


def _llama(path, device):
    from ..models.causal_lm import load_causal_lm

    transformers = import_transformers()
    ember_model = load_causal_lm(path, device=device)
    torch_model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=import_torch().float32
    ).eval()
    pairs = _llama_pairs(ember_model, torch_model)
    return (ember_model, torch_model, pairs, ember_model.config.vocab_size, _tokenizer(path))


def _gguf(path, device):
    from ..models.gguf_llama import load_gguf_model, tokenizer_from_gguf

    ember_model = load_gguf_model(path, device=device)
    torch_model = transformers_from_gguf(path, ember_model.config)
    cfg = ember_model.config
    try:
        tokenizer = tokenizer_from_gguf(path)
    except FormatError:
        tokenizer = None  # a GGUF without tokenizer.ggml.* metadata: random ids only
    return (
        ember_model,
        torch_model,
        _llama_pairs(ember_model, torch_model),
        cfg.vocab_size,
        tokenizer,
    )


def _whisper(path, device):
    ember_model, torch_model, pairs, cfg = whisper_family.load(path, device)
    return ember_model, torch_model, pairs, cfg.vocab_size, _tokenizer(path)
