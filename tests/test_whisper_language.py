"""Language detection (the decoder's logits after <|startoftranscript|>, softmaxed over the
language tokens) on a tiny random multilingual model against transformers, on every
device; a given language skips it; English-only models refuse other languages by name.
The real base model against faster-whisper is in test_whisper_real_base.py."""

import numpy as np
import pytest

import ember
from ember.models.whisper_decoding import DecodeOptions
from ember.models.whisper_language import best_language, language_probs
from ember.models.whisper_load import load_whisper
from ember.models.whisper_tokens import WhisperTokens
from ember.models.whisper_windows import Transcription
from helpers import require
from packaged_fixtures import jfk_wav, whisper_tiny_en_dir  # noqa: F401
from whisper_random import FRAMES, LANGS, TEXT_TOKENS, IdsTokenizer, fixed_log_mel, random_whisper  # noqa: F401


def test_language_probabilities_match_transformers(device, random_whisper):
    torch = require("torch")
    transformers = require("transformers")
    model, path, tokens, features = random_whisper
    ids = [tokens.languages[c] for c in LANGS]
    with torch.no_grad():
        sot = torch.full((3, 1), tokens.sot)
        logits = model(input_features=features, decoder_input_ids=sot).logits[:, 0]
    expected = torch.softmax(logits[:, ids].double(), -1).numpy()
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=tokens.sot,
        lang_to_id={f"<|{c}|>": tokens.languages[c] for c in LANGS},
    )
    picked = model.detect_language(input_features=features, num_segment_frames=FRAMES).tolist()

    em = load_whisper(path, device=device)
    got = language_probs(em, em.encoder(ember.tensor(features.numpy(), device=device)), tokens)
    assert [list(row) for row in got] == [list(LANGS)] * 3
    tol = 1e-5 if device.kind == "cpu" else 1e-4
    np.testing.assert_allclose([[row[c] for c in LANGS] for row in got], expected, atol=tol)
    assert [tokens.languages[best_language(row)[0]] for row in got] == picked
    assert all(abs(sum(row.values()) - 1) < 1e-9 for row in got)


def _transcription(em, tokens, features, language):
    audio = np.full(16000 * 2, 0.1, np.float32)  # not silence; the features are fixed
    opts = DecodeOptions(language=language, max_new_tokens=4, temperatures=(0.0,))
    return Transcription(em, IdsTokenizer(), tokens, [audio], fixed_log_mel(em, features), opts)


def test_the_language_is_detected_on_the_first_window_unless_given(cpu, random_whisper):
    _, path, tokens, features = random_whisper
    em = load_whisper(path, device=cpu)
    row = features.numpy()[1]
    run = _transcription(em, tokens, row, None)
    assert run.files[0].language is None  # not known before the first window
    list(run)
    f = run.files[0]
    expected = language_probs(em, em.encoder(ember.tensor(row[None])), tokens)[0]
    assert (f.language, f.language_probability) == best_language(expected)
    assert f.language_probs == expected
    given = "fr" if f.language != "fr" else "de"
    run = _transcription(em, tokens, row, given)
    list(run)
    f = run.files[0]
    assert (f.language, f.language_probability, f.language_probs) == (given, 1.0, None)


def test_english_only_models_refuse_other_languages_by_name():
    english = WhisperTokens.by_layout(TEXT_TOKENS, LANGS, multilingual=False)
    assert english.prompt("en") == english.prompt(None) == [english.sot]
    with pytest.raises(ember.InvalidArgument, match="English-only.*not 'de'.*multilingual"):
        english.prompt("de")
    with pytest.raises(ember.InvalidArgument, match="English-only: it cannot translate"):
        english.prompt(None, task="translate")
    multi = WhisperTokens.by_layout(TEXT_TOKENS, LANGS)
    with pytest.raises(
        ember.InvalidArgument, match="unknown language 'xx'; this model knows de, en, fr"
    ):
        multi.prompt("xx")


def test_the_cli_refuses_another_language_for_an_english_only_model(
    whisper_tiny_en_dir,
    jfk_wav,
    capsys,  # noqa: F811
):
    from ember.cli import main

    argv = ["transcribe", jfk_wav, "--model", whisper_tiny_en_dir, "--language", "de"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "English-only" in err and "not 'de'" in err and "Traceback" not in err
