"""Open a Whisper model directory: Hugging Face (config.json + *.safetensors [+
generation_config.json]) or CTranslate2 (model.bin + config.json), each with tokenizer.json.

    model = load_whisper("~/.cache/ember/models/whisper-tiny.en", device=dev)

With dtype=None an f16 checkpoint stays f16 on a device that declares f16 support
(`backend.info["f16"]`: WebGPU adapters with shader-f16) and loads as f32 elsewhere (the
CPU, which has no fast f16 arithmetic); an explicit dtype is used as given.

Computing in f32 does not need the weights in f32. Where the device's qmatmul computes
with f16 weights as they are stored (`backend.computes_quantized(F16)`: the CPU with the
jit extra, whose llvm_f16 kernels widen the halves in registers), an f16 checkpoint's
(CTranslate2 or Hugging Face) linear weights and token table stay the file's f16 halves,
as F16 QTensors under QuantLinear and QuantEmbedding (quant_layers.QuantizedLayers);
norms, biases, convolutions and positions are widened. The values are the same (a half widens
exactly); the sums' order differs. Nothing is widened at load and every decode step
reads half the bytes. benchmarks/whisper.py, jfk.wav, 3 rounds' medians, kept halves vs
widened (EMBER_JIT=0), one session: tiny.en cold start 0.64 vs 0.69 s, RTF 23.5x vs
21.3x, peak RSS 244 vs 238 MB; base 1.36 vs 1.53 s, 10.7x vs 10.0x, 333 vs 391 MB.
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


def _open_ct2(path, device, dtype):
    """(config, VarBuilder, layer factory or None) of a CTranslate2 directory; f16 weights
    that load as f32 are kept as they are where the device computes with them (see the
    module's note), else widened here by half_widen (exact, faster than the cast
    VarBuilder would make)."""
    from ..io.ctranslate2 import CTranslate2File, whisper_hf_tensors

    label = os.path.join(path, "model.bin")
    f = CTranslate2File(label)
    tensors = whisper_hf_tensors(f)
    cfg_path = os.path.join(path, "config.json")
    ct2_config = _json(cfg_path) if os.path.isfile(cfg_path) else {}
    cfg = whisper_config.from_ct2(f, tensors, ct2_config, path)
    vb = VarBuilder.from_tensors(tensors, label=label)
    chosen = dt.as_dtype(dtype) if dtype is not None else choose_dtype(vb, device)
    if chosen is not dt.f32:
        return cfg, vb, None
    if _stored_dtype(vb) is dt.f16 and _computes_halves(device):
        return _with_kept_halves(cfg, tensors, label, f.release_view)
    return cfg, VarBuilder.from_tensors(_widened(f, tensors, device), label=label), None


def _with_kept_halves(cfg, tensors, label, release):
    from .quant_layers import QuantizedLayers  # numpy's: not in the page

    vb = VarBuilder.from_tensors(_kept_halves(tensors, release), label=label)
    return cfg, vb, QuantizedLayers()


def _computes_halves(device):
    from ..device import as_device
    from ..io.quant import GGMLType

    return as_device(device if device is not None else "cpu").backend.computes_quantized(
        GGMLType.F16
    )


def _kept_halves(tensors, release=None):
    """The tensors (numpy arrays by Hugging Face name) with each f16 matrix of a linear
    layer, and the token table, as an F16 QTensor over the file's bytes; the other f16
    tensors (norms, biases, convolutions, positions) widened, and `release(array)` called
    on each of those (CTranslate2File.release_view gives its pages of the map back)."""
    from ..io.half_widen import widen_f16
    from ..io.quant import GGMLType, QTensor

    out = {}
    for name, a in tensors.items():
        if a.dtype.name != "float16":
            out[name] = a
        elif a.ndim == 2 and name.endswith(".weight") and ".embed_positions." not in name:
            out[name] = QTensor(a.view("uint8"), GGMLType.F16, a.shape)
        else:
            out[name] = widen_f16(a)
            if release is not None:
                release(a)
    return out


# The tied embedding [vocab, d] is the decoder's output projection too: every decode step
# reads all of it as x @ W.T, which OpenBLAS runs 2.3x faster from W stored transposed
# ([d, vocab] in memory: tiny.en's 51,864 x 384, 6.1 -> 2.6 ms on two threads, a quarter
# of a step). Widened straight into that order, it costs no second copy; the token lookup
# then gathers strided columns, a few hundred floats a token.
_TIED_EMBEDDING = "model.decoder.embed_tokens.weight"


def _widened(f, tensors, device):
    """The CTranslate2 tensors with f16 widened to f32 (half_widen: exact, faster than
    the cast VarBuilder would make); on the CPU the tied embedding stored transposed. Each
    tensor's pages of the file's map go back to the OS once it is widened, so the f16
    file and the f32 model are never resident together (base: 145 + 290 MB)."""
    from ..device import as_device
    from ..io.half_widen import widen_f16, widen_f16_transposed
    from ..tensor import from_numpy

    on_cpu = device is None or as_device(device).kind == "cpu"
    out = {}
    for name, a in tensors.items():
        if a.dtype.name != "float16":
            out[name] = a
            continue
        if on_cpu and name == _TIED_EMBEDDING:
            out[name] = from_numpy(widen_f16_transposed(a)).t()
        else:
            out[name] = widen_f16(a)
        f.release_view(a)
    return out


def _open_hf(path, device, dtype):
    """(config, VarBuilder, layer factory or None) of a Hugging Face directory; an f16
    checkpoint that loads as f32 keeps its halves where the device computes with them,
    as a CTranslate2 one does (the safetensors' memory maps, not copies)."""
    cfg_json = _json(os.path.join(path, "config.json"))
    gen_path = os.path.join(path, "generation_config.json")
    gen = _json(gen_path) if os.path.isfile(gen_path) else None
    cfg = whisper_config.from_hf(cfg_json, os.path.join(path, "config.json"), gen)
    vb = VarBuilder.from_dir(path)
    chosen = dt.as_dtype(dtype) if dtype is not None else choose_dtype(vb, device)
    if chosen is dt.f32 and _stored_dtype(vb) is dt.f16 and _computes_halves(device):
        host = vb.with_device("cpu")
        names = host.keys()  # a VarBuilder lists its names; it is not iterable
        arrays = {name: host.get_unchecked(name).numpy() for name in names}
        return _with_kept_halves(cfg, arrays, path, None)
    return cfg, vb, None


def _stored_dtype(vb):
    return vb.get_unchecked("model.decoder.embed_tokens.weight").dtype


def choose_dtype(vb, device):
    """f16 for an f16 checkpoint on a device that keeps f16 natively, else f32."""
    from ..device import as_device

    info = as_device(device).backend.info if device is not None else {}
    return dt.f16 if info.get("f16") and _stored_dtype(vb) == dt.f16 else dt.f32


def load_whisper(path, device=None, dtype=None):
    """WhisperModel of the directory at `path`, its weights in `dtype` on `device`
    (dtype None: see choose_dtype)."""
    path = os.path.expanduser(os.fspath(path))
    fmt = model_format(path)
    opener = _open_ct2 if fmt == "ctranslate2" else _open_hf
    cfg, vb, layers = opener(path, device, dtype)
    if dtype is None:
        dtype = choose_dtype(vb, device)
    vb = vb.with_dtype(dtype).with_device(device)
    model = WhisperModel(cfg, vb, layers)
    model.path = path
    model.format = fmt
    return model
