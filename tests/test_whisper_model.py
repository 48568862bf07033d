"""Whisper against transformers on tiny random WhisperForConditionalGeneration configs (80 and
128 mel bins, English-only and multilingual): encoder output, decoder logits (whole and
step by step through the caches), greedy tokens and segments against `generate`, and the
same weights converted to CTranslate2's model.bin by ctranslate2's own converter."""

import copy
import json
import os

import numpy as np
import pytest

import ember
from ember.models.whisper_decoding import DecodeOptions, greedy, split_segments
from ember.models.whisper_load import load_whisper
from ember.models.whisper_tokens import WhisperTokens
from ember.nn import VarBuilder
from helpers import record_attention_steps, require
from whisper_random import FRAMES, LANGS, TEXT_TOKENS, tiny_whisper_config

SUPPRESS = (3, 5, 7)
BLANK = (9,)


def _tol(device):
    return 1e-4 if device.kind == "cpu" else 1e-3


@pytest.fixture(scope="module", params=[(80, False), (128, True)], ids=["80-en", "128-multi"])
def tiny(request, tmp_path_factory):
    torch = require("torch")
    transformers = require("transformers")
    n_mels, multilingual = request.param
    tokens = WhisperTokens.by_layout(TEXT_TOKENS, LANGS, multilingual=multilingual)
    torch.manual_seed(n_mels)
    cfg = tiny_whisper_config(transformers, tokens, n_mels)
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    # an English-only model has the language tokens but is never prompted with them
    languages = {}
    if multilingual:
        languages["lang_to_id"] = {f"<|{c}|>": i for c, i in tokens.languages.items()}
        languages["task_to_id"] = {"transcribe": tokens.transcribe, "translate": tokens.translate}
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=tokens.sot,
        eos_token_id=tokens.eot,
        pad_token_id=tokens.eot,
        bos_token_id=tokens.eot,
        no_timestamps_token_id=tokens.no_timestamps,
        is_multilingual=multilingual,
        **languages,
        # real checkpoints list the control tokens among suppress_tokens; ember always does
        suppress_tokens=list(SUPPRESS) + list(tokens.specials()),
        begin_suppress_tokens=list(BLANK) + [tokens.eot],
        max_initial_timestamp_index=50,
        max_length=64,
    )
    path = tmp_path_factory.mktemp(f"whisper-{n_mels}")
    model.save_pretrained(path)
    features = torch.randn(2, n_mels, FRAMES, generator=torch.Generator().manual_seed(1))
    return model, path, tokens, features


def test_encoder_and_logits_match_transformers(device, tiny):
    torch = require("torch")
    model, path, _, features = tiny
    ids = torch.randint(0, TEXT_TOKENS, (2, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        enc = model.model.encoder(features).last_hidden_state.numpy()
        logits = model(input_features=features, decoder_input_ids=ids).logits.numpy()
    em = load_whisper(path, device=device)
    assert em.format == "huggingface"
    e = em.encoder(ember.tensor(features.numpy(), device=device))
    np.testing.assert_allclose(e.numpy(), enc, rtol=0, atol=_tol(device))
    whole = em.decoder(ember.tensor(ids.numpy(), device=device), em.decoder.new_cache(e), False)
    np.testing.assert_allclose(whole.numpy(), logits, rtol=0, atol=_tol(device))
    # the same logits from a prompt of 3 and then one token at a time through the caches
    cache = em.decoder.new_cache(e)
    steps = [em.decoder(ember.tensor(ids.numpy()[:, :3], device=device), cache, False)]
    steps += [
        em.decoder(ember.tensor(ids.numpy()[:, i : i + 1], device=device), cache)
        for i in range(3, 7)
    ]
    assert cache.length == 7
    np.testing.assert_allclose(
        np.concatenate([s.numpy() for s in steps], 1), logits, rtol=0, atol=_tol(device)
    )


@pytest.mark.parametrize("timestamps", [False, True])
def test_greedy_tokens_match_transformers_generate(device, tiny, timestamps):
    model, path, tokens, features = tiny
    language = "de" if tokens.multilingual else None
    kwargs = {"language": language, "task": "transcribe"} if tokens.multilingual else {}
    one = features[:1]
    out = model.generate(
        one,
        return_timestamps=timestamps,
        max_new_tokens=20,
        do_sample=False,
        num_beams=1,
        return_dict_in_generate=True,
        **kwargs,
    )
    em = load_whisper(path, device=device)
    opts = DecodeOptions(
        language=language,
        timestamps=timestamps,
        suppress_tokens=SUPPRESS,
        suppress_blank=BLANK + (tokens.eot,),
        max_new_tokens=20,
    )
    got = greedy(em, em.encoder(ember.tensor(one.numpy(), device=device)), tokens, opts)
    prompt = tokens.prompt(language, timestamps=timestamps)
    if not timestamps:
        expected = out["sequences"][0].tolist()
        assert expected[: len(prompt)] == prompt
        assert got.tokens == [t for t in expected[len(prompt) :] if t != tokens.eot]
        return
    # with timestamps transformers returns the segments; the raw sequence is in each one
    segs = out["segments"][0]
    raw = segs[0]["result"]["sequences"].tolist()
    assert raw[: len(prompt)] == prompt
    assert got.tokens == [t for t in raw[len(prompt) :] if t != tokens.eot]
    assert any(t >= tokens.timestamp_begin for t in got.tokens)  # the rules were exercised
    mine, _ = split_segments(got.tokens, tokens, 0.0, 30.0)
    assert [(round(s.start, 2), round(s.end, 2)) for s in mine] == [
        (round(float(s["start"]), 2), round(float(s["end"]), 2)) for s in segs
    ]


def test_decode_steps_through_the_fused_self_attention_keep_the_general_paths_bits(
    device, tiny, monkeypatch
):
    """A decode step's self-attention goes through attention_step (one backend call), in
    the decoder's own steps and in greedy decoding's batch; the logits, tokens and
    log-probabilities are those of the separate steps, bit for bit."""
    from ember.models.whisper import Attention

    model, path, tokens, features = tiny
    em = load_whisper(path, device=device)
    enc = em.encoder(ember.tensor(features.numpy()[:1], device=device))
    ids = np.array([[tokens.sot, 11, 12, 13, 14, 15]])
    opts = DecodeOptions(timestamps=True, suppress_tokens=SUPPRESS, max_new_tokens=12)
    steps = record_attention_steps(monkeypatch, em.device.backend)

    def run():
        cache = em.decoder.new_cache(enc)
        logits = [em.decoder(ember.tensor(ids[:, :3], device=device), cache, False).numpy()]
        logits += [em.decoder(ember.tensor(ids[:, i : i + 1], device=device), cache).numpy()
                   for i in range(3, 6)]
        got = greedy(em, enc, tokens, opts)
        return np.concatenate(logits, 1), got.tokens, got.avg_logprob

    fused = run()
    layers = em.cfg.decoder_layers
    assert steps[: 3 * layers] == [p for p in (3, 4, 5) for _ in range(layers)]
    assert len(steps) > 3 * layers  # greedy's steps too
    monkeypatch.setattr(Attention, "fuses_step", lambda self: False)
    taken = len(steps)
    general = run()
    assert len(steps) == taken
    np.testing.assert_array_equal(fused[0], general[0])
    assert fused[1:] == general[1:]


def test_ctranslate2_model_bin_loads_the_same_weights(cpu, tiny, tmp_path):
    ctranslate2 = require("ctranslate2")
    torch = require("torch")
    model, path, _, features = tiny
    out = tmp_path / "ct2"
    ctranslate2.converters.TransformersConverter(str(path)).convert(str(out))
    em = load_whisper(out, device=cpu)
    assert em.format == "ctranslate2"
    ids = torch.randint(0, TEXT_TOKENS, (2, 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = model(input_features=features, decoder_input_ids=ids).logits.numpy()
    e = em.encoder(ember.tensor(features.numpy()))
    got = em.decoder(ember.tensor(ids.numpy()), em.decoder.new_cache(e), False).numpy()
    np.testing.assert_allclose(got, logits, rtol=0, atol=1e-4)


def _f16_model_bin_and_rounded_logits(tiny, tmp_path, seed):
    """(model.bin directory in f16, decoder ids, transformers' logits with every weight
    rounded to f16): the values an f16 checkpoint holds, computed in f32."""
    ctranslate2 = require("ctranslate2")
    torch = require("torch")
    model, path, _, features = tiny
    out = tmp_path / "ct2-f16"
    ctranslate2.converters.TransformersConverter(str(path)).convert(
        str(out), quantization="float16"
    )
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.half().float())
    ids = torch.randint(0, TEXT_TOKENS, (2, 5), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        logits = rounded(input_features=features, decoder_input_ids=ids).logits.numpy()
    return out, ids.numpy(), logits


def _logits(em, features, ids, last_only=False):
    e = em.encoder(ember.tensor(features.numpy()))
    return em.decoder(ember.tensor(ids), em.decoder.new_cache(e), last_only).numpy()


def test_ctranslate2_f16_model_bin_widens_exactly(cpu, tiny, tmp_path, monkeypatch):
    """An f16 model.bin (as the packaged tiny.en and base are) loads, where the CPU does
    not compute with f16 weights (no jit extra), as the f16 values widened exactly: the
    logits are transformers' with every weight rounded to f16, the decoder's tied
    embedding held transposed (its storage [d, vocab]: see whisper_load)."""
    from ember.models import whisper_load

    monkeypatch.setattr(whisper_load, "_computes_halves", lambda device: False)
    out, ids, logits = _f16_model_bin_and_rounded_logits(tiny, tmp_path, 5)
    em = load_whisper(out, device=cpu)
    w = em.decoder.embed_tokens.weight
    assert w.dtype == ember.f32 and w.layout.strides == (1, w.shape[0])
    np.testing.assert_allclose(_logits(em, tiny[3], ids), logits, rtol=0, atol=1e-4)


def test_ctranslate2_f16_model_bin_keeps_its_halves_where_the_cpu_computes_with_them(
    cpu, tiny, tmp_path
):
    """With the jit extra the CPU's qmatmul computes with f16 weights as stored
    (Backend.computes_quantized): every linear layer and the token table stay F16 QTensors
    over the file's bytes (the self-attention's q/k/v one view of CTranslate2's fused
    matrix), and the logits, whole and step by step, are still the f16-rounded model's."""
    require("llvmlite")
    from ember.io.quant import GGMLType
    from ember.models.quant_layers import AdjacentStack, QuantEmbedding, QuantLinear

    if not cpu.backend.computes_quantized(GGMLType.F16):
        pytest.skip("EMBER_JIT=0: the CPU widens f16 weights (tested above)")
    out, ids, logits = _f16_model_bin_and_rounded_logits(tiny, tmp_path, 6)
    em = load_whisper(out, device=cpu)
    assert isinstance(em.decoder.embed_tokens, QuantEmbedding)
    linears = [m for _, m in em.named_modules() if isinstance(m, QuantLinear)]
    assert linears and all(m.weight.ggml_type == GGMLType.F16 for m in linears)
    assert em.dtype == ember.f32
    np.testing.assert_allclose(_logits(em, tiny[3], ids), logits, rtol=0, atol=1e-4)
    assert isinstance(em.encoder.layers[0].self_attn._qkv.weight, AdjacentStack)
    # one token at a time through the caches: the decode steps' fused kernels
    e = em.encoder(ember.tensor(tiny[3].numpy()))
    cache = em.decoder.new_cache(e)
    steps = [em.decoder(ember.tensor(ids[:, i : i + 1]), cache).numpy() for i in range(5)]
    np.testing.assert_allclose(np.concatenate(steps, 1), logits, rtol=0, atol=1e-4)


def test_hugging_face_f16_checkpoint_keeps_its_halves_where_the_cpu_computes_with_them(
    cpu, tiny, tmp_path
):
    """A Hugging Face directory saved in f16 takes the same path as an f16 model.bin: its
    linear weights and token table F16 QTensors over the safetensors' bytes, the logits
    the f16-rounded model's."""
    require("llvmlite")
    torch = require("torch")
    from ember.io.quant import GGMLType
    from ember.models.quant_layers import QuantEmbedding, QuantLinear

    if not cpu.backend.computes_quantized(GGMLType.F16):
        pytest.skip("EMBER_JIT=0: the CPU widens f16 weights")
    model, _, _, features = tiny
    half = copy.deepcopy(model).half()
    half.save_pretrained(tmp_path / "hf-f16")
    rounded = half.float()
    ids = torch.randint(0, TEXT_TOKENS, (2, 5), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits = rounded(input_features=features, decoder_input_ids=ids).logits.numpy()
    em = load_whisper(tmp_path / "hf-f16", device=cpu)
    assert em.format == "huggingface" and em.dtype == ember.f32
    assert isinstance(em.decoder.embed_tokens, QuantEmbedding)
    assert all(m.weight.ggml_type == GGMLType.F16 for _, m in em.named_modules()
               if isinstance(m, QuantLinear))
    np.testing.assert_allclose(_logits(em, features, ids.numpy()), logits, rtol=0, atol=1e-4)


def _resident_kib(path):
    """KiB of this process's memory maps of `path` now resident (Linux's smaps)."""
    total, mine = 0, False
    with open("/proc/self/smaps", encoding="utf-8") as fh:
        for line in fh:
            head = line.split()
            if "-" in head[0] and len(head) >= 5:  # a mapping's first line
                mine = len(head) >= 6 and head[5] == str(path)
            elif mine and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's smaps")
def test_a_widened_tensors_file_pages_leave_the_process(tiny, tmp_path):
    """After widening, load_whisper hands each f16 tensor's pages of model.bin back
    (CTranslate2File.release_view), so the file and the f32 model are not resident
    together; the view still reads the same values (the pages fault back in)."""
    ctranslate2 = require("ctranslate2")
    from ember.io.ctranslate2 import CTranslate2File

    _, path, _, _ = tiny
    out = tmp_path / "ct2-f16"
    ctranslate2.converters.TransformersConverter(str(path)).convert(
        str(out), quantization="float16"
    )
    bin_path = (out / "model.bin").resolve()
    with CTranslate2File(bin_path) as f:
        a = f.array("decoder/embeddings/weight")
        values = a.copy()  # every page of it resident now
        held = _resident_kib(bin_path)
        f.release_view(a)
        assert held - _resident_kib(bin_path) >= a.nbytes // 1024 - 8  # all but 2 edge pages
        np.testing.assert_array_equal(a, values)
        f.release_view(values)  # not a view of the file: nothing happens
        np.testing.assert_array_equal(a, values)


def test_bad_model_directories_name_what_is_wrong(tiny, tmp_path):
    _, path, _, _ = tiny
    with pytest.raises(ember.FormatError, match="neither a CTranslate2"):
        load_whisper(tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    del cfg["num_mel_bins"]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps(cfg))
    (broken / "model.safetensors").write_bytes((path / "model.safetensors").read_bytes())
    with pytest.raises(ember.FormatError, match="num_mel_bins") as info:
        load_whisper(broken)
    assert str(broken) in str(info.value)
    em = load_whisper(path)
    with pytest.raises(ember.ShapeMismatch, match="frames"):
        em.encoder(ember.zeros(1, em.cfg.num_mel_bins, FRAMES + 2))


def test_temperature_fallback_and_no_speech_skip(cpu, tiny):
    from ember.models.whisper_decoding import decode_with_fallback, is_silence

    _, path, tokens, features = tiny
    em = load_whisper(path, device=cpu)
    enc = em.encoder(ember.tensor(features.numpy()[:1]))
    language = "de" if tokens.multilingual else None

    def run(seed=0, **kw):
        opts = DecodeOptions(
            language=language, max_new_tokens=12, temperatures=(0.0, 0.5, 1.0), **kw
        )
        text_of = lambda ids: " ".join(map(str, ids))  # noqa: E731
        rng = np.random.default_rng(seed)
        return decode_with_fallback(em, enc, tokens, opts, text_of, rng=rng), opts

    # a random model's text is unlikely (log-probability far below -1): every temperature
    # is tried and the last one kept
    greedy_only, _ = run(logprob_threshold=None, compression_ratio_threshold=None)
    assert greedy_only.temperature == 0.0 and greedy_only.avg_logprob < -1.0
    sampled, opts = run()
    assert sampled.temperature == 1.0 and sampled.tokens != greedy_only.tokens
    assert run()[0].tokens == sampled.tokens  # seeded: the same samples again
    assert not is_silence(sampled, opts)
    # <|nospeech|> above a threshold of 0 with unlikely text: silence, no fallback, skipped
    silent, opts = run(no_speech_threshold=0.0)
    assert silent.temperature == 0.0 and 0.0 < silent.no_speech_prob < 1.0
    assert is_silence(silent, opts)


def test_beam_search_of_width_one_is_greedy(cpu, tiny):
    import dataclasses

    from ember.models.whisper_decoding import beam_search

    _, path, tokens, features = tiny
    em = load_whisper(path, device=cpu)
    enc = em.encoder(ember.tensor(features.numpy()[:1]))
    opts = DecodeOptions(
        language="de" if tokens.multilingual else None, suppress_blank=BLANK, max_new_tokens=16
    )
    expected = greedy(em, enc, tokens, opts).tokens
    assert beam_search(em, enc, tokens, dataclasses.replace(opts, beam_size=1)).tokens == expected
    wide = beam_search(em, enc, tokens, dataclasses.replace(opts, beam_size=4))
    assert 0 < len(wide.tokens) <= 16 and wide.tokens[0] >= tokens.timestamp_begin


def test_suppress_lists_null_empty_or_bad(tiny, tmp_path):
    """CTranslate2's converter writes null suppress lists for a model without them; a list
    holding a non-id or a token past the vocabulary is refused naming the field."""
    from ember.models.whisper_config import from_hf
    _, path, _, _ = tiny
    cfg = json.loads((path / "config.json").read_text())
    assert from_hf(dict(cfg, suppress_tokens=None), str(path), {"begin_suppress_tokens": None}).suppress_tokens == ()
    with pytest.raises(ember.FormatError, match="suppress_tokens must be a list of token ids"):
        from_hf(dict(cfg), str(path), {"suppress_tokens": [1, "x"]})
    with pytest.raises(ember.FormatError, match=f"begin_suppress_tokens holds token {cfg['vocab_size']}, outside"):
        from_hf(dict(cfg), str(path), {"begin_suppress_tokens": [cfg["vocab_size"]]})


def test_fused_projections_follow_load_and_to(cpu, tiny, tmp_path):
    """The self-attention's fused q/k/v is derived from the three weights: after `load` of
    another model's weights (and after `to`) the outputs are that model's, not stale."""
    torch = require("torch")
    transformers = require("transformers")
    model, path, _, features = tiny
    torch.manual_seed(99)
    other = transformers.WhisperForConditionalGeneration(model.config).eval()
    other.save_pretrained(tmp_path)
    ids = torch.randint(0, TEXT_TOKENS, (2, 5), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        enc = other.model.encoder(features).last_hidden_state.numpy()
        logits = other(input_features=features, decoder_input_ids=ids).logits.numpy()
    em = load_whisper(path, device=cpu)
    x = ember.tensor(features.numpy())
    em.encoder(x)  # the fused weights in use before the load
    em.load(VarBuilder.from_dir(str(tmp_path)).pp("model"))
    for _ in range(2):  # after load, then after a move
        e = em.encoder(x)
        np.testing.assert_allclose(e.numpy(), enc, rtol=0, atol=1e-4)
        got = em.decoder(ember.tensor(ids.numpy()), em.decoder.new_cache(e), False)
        np.testing.assert_allclose(got.numpy(), logits, rtol=0, atol=1e-4)
        em.to(cpu)
