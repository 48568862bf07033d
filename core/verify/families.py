"""`verify_model`: ember's model of a family it ships against transformers' (torch, CPU),
on the same token ids, compared block by block.

Families: BERT encoders (model_type "bert", sentence-embedding directories included) and
Llama-family causal LMs, from a safetensors directory or a GGUF file (transformers reads
the GGUF through its own loader, the `gguf` package's dequantizer). The pairs are the
blocks both implementations share, named as ember names them; inside a block ember may
fuse what transformers keeps apart (QKV in one GEMM, the activation inside a Linear), so
finer pairs would differ by construction, not by error.
"""

import json
import os

import numpy as np

from .. import dtype as dt
from ..errors import FormatError, InvalidArgument
from .compare import compare
from .reference import import_torch, import_transformers

REFERENCES = ("transformers",)


def detect(path):
    """("bert" | "llama" | "gguf", config dict or None) for a model path, or FormatError."""
    if os.path.isfile(path):
        with open(path, "rb") as f:
            magic = f.read(4)
        if magic == b"GGUF":
            return "gguf", None
        raise FormatError(f"verify: {path} is neither a GGUF file nor a model directory", path=path)
    if not os.path.isdir(path):
        raise FormatError(f"verify: {path} does not exist", path=path)
    cfg_path = os.path.join(path, "config.json")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as exc:
        raise FormatError(f"verify: cannot read {cfg_path} ({exc})", path=cfg_path) from None
    if not isinstance(cfg, dict):
        raise FormatError(f"verify: {cfg_path} is not a JSON object", path=cfg_path)
    return ("bert" if cfg.get("model_type") == "bert" else "llama"), cfg


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
    from ..device import as_device

    device = as_device(device)
    family, cfg = detect(path)
    import_transformers()  # fail before loading anything when the reference is missing
    loader = {"bert": _bert, "llama": _llama, "gguf": _gguf}[family]
    ember_model, torch_model, pairs, vocab, tokenizer = loader(path, device)
    ids = _ids(tokenizer, text, vocab, tokens, seed, path)
    if family == "bert":
        mask = np.ones_like(ids)
        if ids.shape[1] > 1:
            # a second row with its last quarter padded exercises the attention mask
            ids = np.concatenate([ids, ids[:, ::-1]])
            mask = np.concatenate([mask, mask])
            mask[1, ids.shape[1] - max(1, ids.shape[1] // 4) :] = 0
        e_in, t_in = (ids, mask), {"input_ids": ids, "attention_mask": mask}
    else:
        e_in, t_in = (ids,), {"input_ids": ids}
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
        "family": family if family != "gguf" else "llama (gguf)",
        "model_type": (cfg or {}).get("model_type", "gguf"),
        "device": str(device),
        "reference": reference,
        "input_shape": list(ids.shape),
    }
    return report, facts


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


def _llama_pairs(cfg):
    # Gemma: transformers scales the embedding inside embed_tokens, ember right after it,
    # so that pair differs by the scale; layer 0's input norm compares what follows.
    pairs = {} if cfg.embed_scale is not None else {"embed_tokens": "model.embed_tokens"}
    for i in range(cfg.num_hidden_layers):
        for part in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp", ""):
            name = f"layers.{i}" + (f".{part}" if part else "")
            pairs[name] = "model." + name
    pairs.update({"norm": "model.norm", "lm_head": "lm_head"})
    return pairs


def _llama(path, device):
    from ..models.llama import LlamaForCausalLM

    transformers = import_transformers()
    ember_model = LlamaForCausalLM.from_pretrained(path, device=device)
    torch_model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=import_torch().float32
    ).eval()
    cfg = ember_model.config
    return (ember_model, torch_model, _llama_pairs(cfg), cfg.vocab_size, _tokenizer(path))


def _gguf(path, device):
    from ..models.gguf_llama import load_gguf_model, tokenizer_from_gguf

    ember_model = load_gguf_model(path, device=device)
    torch_model = _transformers_from_gguf(path)
    cfg = ember_model.config
    try:
        tokenizer = tokenizer_from_gguf(path)
    except FormatError:
        tokenizer = None  # a GGUF without tokenizer.ggml.* metadata: random ids only
    return (ember_model, torch_model, _llama_pairs(cfg), cfg.vocab_size, tokenizer)


def _transformers_from_gguf(path):
    """transformers' model of a GGUF file, built from its config and its weights as
    transformers' GGUF reader dequantizes them (through the `gguf` package), without
    from_pretrained (which asks for `accelerate` on GGUF files)."""
    torch = import_torch()
    transformers = import_transformers()
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        config = dict(load_gguf_checkpoint(path)["config"])
        model_type = config.pop("model_type")
        config.pop("_model_name_or_path", None)
        hf_config = transformers.AutoConfig.for_model(model_type, **config)
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
        tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    except (ValueError, KeyError, ImportError) as exc:
        raise FormatError(f"verify: transformers cannot read {path} ({exc})", path=path) from None
    state = {k: v if hasattr(v, "detach") else torch.from_numpy(v) for k, v in tensors.items()}
    missing, _ = model.load_state_dict(state, strict=False)
    if [k for k in missing if k != "lm_head.weight" or not hf_config.tie_word_embeddings]:
        raise FormatError(f"verify: transformers' reading of {path} lacks {missing}", path=path)
    return model.eval()
