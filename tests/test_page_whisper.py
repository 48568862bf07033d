"""The transcription page's Python, run natively on the CPU (these parts need no browser):
the pure-Python log-mel tables and spectrogram equal ember.audio's, the pure-Python logit
rules equal whisper_decoding's, the page's decoding loop gives whisper_windows' segments
(tokens, text, times) on a tiny random Whisper with each segment handed out as soon as it
is final, and the build's tensor table points at the bytes ember's CTranslate2 reader
maps. Real tiny.en in the page is compared with native ember in
tests/browser/test_transcribe_page.py."""
import asyncio
import importlib.util
import json
from array import array
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.audio.log_mel import LogMel, _dft_basis
from ember.audio.mel_filters import mel_filters
from ember.io.ctranslate2 import CTranslate2File, whisper_hf_tensors
from ember.models import whisper_config
from ember.models.whisper_decoding import DecodeOptions, LogitRules
from ember.models.whisper_load import load_whisper
from ember.models.whisper_tokens import WhisperTokens
from ember.models.whisper_windows import Transcription
from ember.web import page_whisper_decode
from ember.web.page_whisper_decode import PageDecodeOptions, PageLogitRules
from ember.profiler import profile
from ember.web.page_whisper_mel import N_BINS_4, PageLogMel, device_tables, dft_basis, mel_filters_t
from helpers import require
from packaged_fixtures import whisper_tiny_en_dir  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("n_mels", [80, 128])
def test_tables_equal_ember_audio(n_mels):
    basis = np.frombuffer(dft_basis(), np.float32).reshape(400, 402)
    np.testing.assert_array_equal(basis, _dft_basis().astype(np.float32))
    filters = np.frombuffer(mel_filters_t(n_mels), np.float32).reshape(201, n_mels)
    np.testing.assert_allclose(filters, mel_filters(n_mels).T.astype(np.float32), rtol=1e-6, atol=1e-9)


def test_log_mel_equals_ember_audio():
    cpu = ember.Device.cpu()
    rng = np.random.default_rng(7)
    samples = (0.3 * np.sin(np.arange(50_000) * 0.05) + 0.05 * rng.standard_normal(50_000)).astype(np.float32)
    got = PageLogMel(80, cpu)(array("f", samples.tobytes())).numpy()
    want = LogMel(80, cpu)(samples).numpy()
    assert got.shape == want.shape == (80, 3000)
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_device_tables_are_ember_audios_transposed_with_zero_bins(n_mels):
    basis_t, filters = device_tables(n_mels)
    basis_t = np.frombuffer(basis_t, np.float32).reshape(2, N_BINS_4, 400)
    want = _dft_basis().astype(np.float32).reshape(400, 2, 201).transpose(1, 2, 0)
    np.testing.assert_array_equal(basis_t[:, :201], want)
    assert not basis_t[:, 201:].any()
    filters = np.frombuffer(filters, np.float32).reshape(n_mels, N_BINS_4)
    np.testing.assert_allclose(filters[:, :201], mel_filters(n_mels).astype(np.float32), rtol=1e-6, atol=1e-9)
    assert not filters[:, 201:].any()


def test_log_mel_on_the_device_equals_ember_audio_through_tiled_matmuls(device):
    rng = np.random.default_rng(11)
    samples = (0.2 * np.sin(np.arange(70_000) * 0.03) + 0.05 * rng.standard_normal(70_000)).astype(np.float32)
    page_mel = PageLogMel(80, device)
    with profile() as prof:
        got = page_mel(array("f", samples.tobytes())).numpy()
    want = LogMel(80, ember.Device.cpu())(samples).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    # the generic kernel (strides the tiled ones do not take) ran 22 of 28 s in a page
    labels = [k[1] for k in prof.kernels()]
    assert not [name for name in labels if name.startswith("matmul:")], labels
    if device.kind == "wgpu":
        assert any(name.startswith("matmul_nt") for name in labels), labels


def _tokens():
    return WhisperTokens.by_layout(50, languages=("en", "de"))


@pytest.mark.parametrize("case", range(8))
def test_logit_rules_equal_whisper_decodings(case):
    t = _tokens()
    tb = t.timestamp_begin
    vocab = tb + 1501
    rng = np.random.default_rng(case)
    logits = rng.standard_normal(vocab).astype(np.float32)
    if case % 2:   # timestamps likely enough together to outweigh the best text token
        logits[tb:] += 3.0
    text = [3, 17, 40]
    sampled = [[], [tb], [tb, *text], [tb, *text, tb + 60], [tb, *text, tb + 60, tb + 60],
               [tb, *text, tb + 60, tb + 60, 9], [tb + 5, 8, tb + 20, tb + 20, 11, 12],
               [tb, *text, tb + 700]][case]
    opts = PageDecodeOptions(suppress_tokens=(1, 4, 9999, vocab + 3), suppress_blank=(2, t.eot))
    want = LogitRules(t, opts, vocab).apply(logits, sampled)
    got = PageLogitRules(t, opts, vocab).apply(array("f", logits.tobytes()), sampled)
    np.testing.assert_array_equal(np.frombuffer(got, np.float32), want)
    assert np.isfinite(want).any()


@pytest.fixture(scope="module")
def tiny_random(tmp_path_factory):
    """A tiny random Whisper with the real window (3000 frames, 1500 positions) and a
    short decoder (32 new tokens a window), so decoding runs the whole loop fast."""
    torch = require("torch")
    transformers = require("transformers")
    tokens = WhisperTokens.by_layout(100, ("en", "de"), multilingual=False)
    torch.manual_seed(3)
    cfg = transformers.WhisperConfig(
        vocab_size=tokens.timestamp_begin + 1501, d_model=32, encoder_layers=1,
        encoder_attention_heads=2, decoder_layers=2, decoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=1500,
        max_target_positions=64, num_mel_bins=80, pad_token_id=tokens.eot,
        bos_token_id=tokens.eot, eos_token_id=tokens.eot, decoder_start_token_id=tokens.sot,
        suppress_tokens=[3, 5, 7], begin_suppress_tokens=[9, tokens.eot])
    path = tmp_path_factory.mktemp("whisper-page-random")
    transformers.WhisperForConditionalGeneration(cfg).save_pretrained(path)
    return load_whisper(path, device=ember.Device.cpu()), tokens


class _Ids:
    """A tokenizer stand-in: a segment's text is its token ids."""

    def decode(self, ids):
        return " ".join(map(str, ids))


def test_page_decoding_gives_whisper_decodings_segments(tiny_random, monkeypatch):
    """Noise, 35 s of digital silence, noise: windows that seek on their last timestamp,
    conditioned on the previous text, and a silent stretch skipped; the same segments
    (tokens, text, times) from both. Each segment is handed out as soon as it is final:
    counted in decoder calls, at least one before its window's last step."""
    model, tokens = tiny_random
    rng = np.random.default_rng(5)
    noise = lambda s: (0.1 * rng.standard_normal(s * 16000)).astype(np.float32)  # noqa: E731
    samples = np.concatenate([noise(40), np.zeros(35 * 16000, np.float32), noise(12)])
    suppress, blank = (3, 5, 7), (9, tokens.eot)
    native = DecodeOptions(suppress_tokens=suppress, suppress_blank=blank)
    native_run = Transcription(model, _Ids(), tokens, [samples], LogMel(80, model.device), native)
    want = [event.segment for event in native_run if event.segment is not None]

    calls, at = [], []   # cache length at each decoder call; calls made at each segment
    decoder = type(model.decoder)
    forward = decoder.forward
    monkeypatch.setattr(decoder, "forward",
                        lambda self, x, cache, **k: (calls.append(cache.length), forward(self, x, cache, **k))[1])
    opts = PageDecodeOptions(suppress_tokens=suppress, suppress_blank=blank)
    got = asyncio.run(page_whisper_decode.transcribe(
        model, _Ids(), tokens, array("f", samples.tobytes()), PageLogMel(80, model.device), opts,
        on_segment=lambda seg: at.append(len(calls))))
    assert _fields(got) == _fields(want)
    assert len(want) >= 3 and want[-1].start >= 70   # the last window, after the silence
    # a window's first decoder call starts from an empty cache: a segment handed out
    # before a call that does not is one its window's decoding went on after
    early = [a < len(calls) and calls[a] != 0 for a in at]
    assert len(at) == len(got) and any(early), (at, calls)


def _fields(segments):
    return [(s.tokens, s.text, round(s.start, 6), round(s.end, 6)) for s in segments]


def _sidecar_module():
    spec = importlib.util.spec_from_file_location(
        "page_whisper_sidecar", ROOT / "build_scripts" / "page_whisper_sidecar.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sidecar_points_at_the_tensors_bytes(whisper_tiny_en_dir, tmp_path):  # noqa: F811
    assert _sidecar_module().write(whisper_tiny_en_dir, tmp_path) == ["page-model.json"]
    sidecar = json.loads((tmp_path / "page-model.json").read_text())
    model_bin = Path(whisper_tiny_en_dir, "model.bin")
    raw = model_bin.read_bytes()
    with CTranslate2File(model_bin) as f:
        tensors = whisper_hf_tensors(f)
        assert sorted(sidecar["tensors"]) == sorted(tensors)
        for name, info in sidecar["tensors"].items():
            want = tensors[name]
            got = np.frombuffer(raw, {"F16": "<f2", "F32": "<f4"}[info["dtype"]],
                                count=want.size, offset=info["offset"]).reshape(info["shape"])
            assert info["nbytes"] == want.nbytes
            np.testing.assert_array_equal(got, want, err_msg=name)
        cfg = whisper_config.from_ct2(f, tensors, json.loads(Path(whisper_tiny_en_dir, "config.json").read_text()),
                                      str(model_bin))
        del tensors, want
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in sidecar["config"].items()}
    assert whisper_config.WhisperConfig(**fields, source=cfg.source) == cfg
    assert sidecar["multilingual"] is False and sidecar["model"] == "model.bin"


def test_the_page_modules_import_without_numpy():
    import subprocess
    import sys
    code = ("import sys; sys.modules['numpy'] = None\n"
            "from ember.web import page_whisper, page_whisper_decode, page_whisper_mel\n"
            "print(len(page_whisper_mel.mel_filters_t(80)), 'numpy' in sys.modules and sys.modules['numpy'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(201 * 80), "None"]
