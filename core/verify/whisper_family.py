"""Whisper for `verify_model`: ember's WhisperModel from a Hugging Face or CTranslate2
directory against transformers' WhisperForConditionalGeneration, one forward each
(encoder over mel features, then the decoder over token ids with the whole prompt at once).

ember's Whisper keeps its layers in plain lists and has no single forward, so the ember
side here is a view: a module whose children are the model's own sub-modules under
transformers' names (minus "model."), so the hooks land on the modules that run, and
whose forward calls the model's encoder and decoder. For a CTranslate2 directory the
reference is transformers' model built from ember's config with the model.bin tensors as
ember maps them onto Hugging Face names (so it checks the computation, not that mapping).
"""

import os

import numpy as np

from .. import dtype as dt
from ..errors import FormatError
from ..nn import Module, ModuleList
from .reference import import_torch, import_transformers

# inside a layer, the sub-modules whose outputs mean the same on both sides (out_proj and
# fc2 add the residual in ember, fc1 applies GELU: they would differ by construction)
_ENCODER_PARTS = ("self_attn_layer_norm", "self_attn.q_proj", "self_attn.k_proj")
_ENCODER_PARTS += ("self_attn.v_proj", "final_layer_norm")
_DECODER_PARTS = _ENCODER_PARTS + ("encoder_attn_layer_norm", "encoder_attn.q_proj")
_DECODER_PARTS += ("encoder_attn.k_proj", "encoder_attn.v_proj")


class _Group(Module):
    """Named children only: a container the forward never calls."""

    def __init__(self, **children):
        super().__init__()
        for name, child in children.items():
            setattr(self, name, child)


class WhisperView(Module):
    """forward(features, tokens) -> logits [b, t, vocab], through `model`'s own modules,
    which are this module's children as encoder.conv1, encoder.layers.0, decoder.layers.1, ..."""

    def __init__(self, model):
        super().__init__()
        enc, dec = model.encoder, model.decoder
        self.encoder = _Group(
            conv1=enc.conv1,
            conv2=enc.conv2,
            layers=ModuleList(*enc.layers),
            layer_norm=enc.layer_norm,
        )
        self.decoder = _Group(
            embed_tokens=dec.embed_tokens, layers=ModuleList(*dec.layers), layer_norm=dec.layer_norm
        )
        self._model = model  # underscored: not a child, so its names do not appear twice
        self.config = model.cfg

    def forward(self, features, tokens):
        encoded = self._model.encoder(features)
        cache = self._model.decoder.new_cache(encoded)
        return self._model.decoder(tokens, cache, last_only=False)


def pairs(cfg):
    """{ember name: transformers name} for a WhisperConfig."""
    names = ["encoder.conv1", "encoder.conv2", "encoder.layer_norm", "decoder.embed_tokens"]
    names.append("decoder.layer_norm")
    for side, count, parts in (
        ("encoder", cfg.encoder_layers, _ENCODER_PARTS),
        ("decoder", cfg.decoder_layers, _DECODER_PARTS),
    ):
        for i in range(count):
            names.append(f"{side}.layers.{i}")
            names += [f"{side}.layers.{i}.{part}" for part in parts]
    return {name: "model." + name for name in names}


def load(path, device):
    """(WhisperView, transformers model, pairs, WhisperConfig)."""
    from ..models.whisper_load import load_whisper

    model = load_whisper(path, device=device, dtype=dt.f32)
    torch = import_torch()
    transformers = import_transformers()
    if model.format == "huggingface":
        reference = transformers.WhisperForConditionalGeneration.from_pretrained(
            path, dtype=torch.float32
        )
    else:
        reference = _from_ct2(path, model.cfg, torch, transformers)
    return WhisperView(model), reference.eval(), pairs(model.cfg), model.cfg


def _from_ct2(path, cfg, torch, transformers):
    from ..io.ctranslate2 import CTranslate2File, whisper_hf_tensors
    from ..models.whisper_config import SIZE_FIELDS

    # the special-token ids only have to lie inside the vocabulary (a forward ignores them)
    specials = dict.fromkeys(
        ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"), 0
    )
    hf_cfg = transformers.WhisperConfig(**{k: getattr(cfg, k) for k in SIZE_FIELDS}, **specials)
    reference = transformers.WhisperForConditionalGeneration(hf_cfg)
    tensors = whisper_hf_tensors(CTranslate2File(os.path.join(path, "model.bin")))
    state = {
        k: torch.from_numpy(np.array(v, dtype=np.float32))  # a copy: the mapped views are read-only
        for k, v in tensors.items()
    }
    # proj_out is tied to the token embedding (and so absent from the mapped tensors)
    missing, _ = reference.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "proj_out.weight"]
    if missing:
        raise FormatError(
            f"verify: {path}'s model.bin lacks {missing} for transformers' Whisper", path=path
        )
    return reference


def features(cfg, seed):
    """Seeded random log-mel features [1, mels, frames] for one 30 s window."""
    rng = np.random.default_rng(seed + 1)
    shape = (1, cfg.num_mel_bins, 2 * cfg.max_source_positions)
    return rng.standard_normal(shape).astype(np.float32)
