"""Open a Whisper model directory: Hugging Face (config.json + *.safetensors [+
generation_config.json]) or CTranslate2 (model.bin + config.json), each with tokenizer.json.

    model = load_whisper("~/.cache/ember/models/whisper-tiny.en", device=dev)

f16 checkpoints load as f32 unless `dtype` says otherwise (dtype=ember.f16 keeps them f16
on a device that computes in f16).
"""

import json
import os

from .. import dtype as dt
from ..errors import FormatError
from ..nn import VarBuilder
from . import whisper_config
from .whisper import WhisperModel


def _json(path):
    try:
        with open(path, encoding="utf-8") as fh:
            value = json.load(fh)
    except (OSError, ValueError) as exc:
        raise FormatError(
            f"{path}: cannot be read as JSON ({exc})", path=path, field="json"
        ) from None
    if not isinstance(value, dict):
        raise FormatError(f"{path}: expected a JSON object", path=path, field="json")
    return value


def model_format(path):
    """ "ctranslate2" or "huggingface" for a model directory, or FormatError saying why neither."""
    if not os.path.isdir(path):
        raise FormatError(f"{path}: not a model directory", path=path, field="path")
    names = os.listdir(path)
    if "model.bin" in names:
        return "ctranslate2"
    if "config.json" in names and any(n.endswith((".safetensors", ".index.json")) for n in names):
        return "huggingface"
    raise FormatError(
        f"{path}: neither a CTranslate2 Whisper directory (model.bin) nor a Hugging Face one "
        f"(config.json and *.safetensors)",
        path=path,
        field="files",
    )


def _open_ct2(path):
    from ..io.ctranslate2 import CTranslate2File, whisper_hf_tensors

    f = CTranslate2File(os.path.join(path, "model.bin"))
    tensors = whisper_hf_tensors(f)
    cfg_path = os.path.join(path, "config.json")
    ct2_config = _json(cfg_path) if os.path.isfile(cfg_path) else {}
    cfg = whisper_config.from_ct2(f, tensors, ct2_config, path)
    return cfg, VarBuilder.from_tensors(tensors, label=os.path.join(path, "model.bin"))


def _open_hf(path):
    cfg_json = _json(os.path.join(path, "config.json"))
    gen_path = os.path.join(path, "generation_config.json")
    gen = _json(gen_path) if os.path.isfile(gen_path) else None
    cfg = whisper_config.from_hf(cfg_json, os.path.join(path, "config.json"), gen)
    return cfg, VarBuilder.from_dir(path)


def load_whisper(path, device=None, dtype=dt.f32):
    """WhisperModel of the directory at `path`, its weights in `dtype` on `device`."""
    path = os.path.expanduser(os.fspath(path))
    fmt = model_format(path)
    cfg, vb = _open_ct2(path) if fmt == "ctranslate2" else _open_hf(path)
    vb = vb.with_dtype(dtype).with_device(device)
    model = WhisperModel(cfg, vb)
    model.path = path
    model.format = fmt
    return model
