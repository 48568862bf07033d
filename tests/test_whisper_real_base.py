"""Real Whisper tiny.en and base (multilingual; CTranslate2 files) on jfk.wav and three of
the nine alsa-utils clips, against faster-whisper on the same model files with the same
options: the language base detects and its probability, and the same tokens greedy
without fallback and then with beam 5. ember is given faster-whisper's own features (see
whisper_peer.py), all the clips' windows through its encoder as one batch and through its
batched greedy decoder; base on jfk.wav end to end (ember's own audio and features)
detects English too, and reads the JFK words as faster-whisper does; with word timestamps,
base on two files batched through the CLI gives each file's language and the words each
file gets alone, jfk.wav's words are faster-whisper's, and on faster-whisper's features
their alignment is CTranslate2's."""

import dataclasses
import json
import os
import re

import numpy as np
import pytest

import ember
from ember.cli import main
from ember.models import whisper_words
from ember.models.whisper_batch import finish, greedy_batch
from ember.models.whisper_decoding import beam_search, is_silence, split_segments
from ember.models.whisper_language import best_language, language_probs
from ember.models.whisper_transcriber import WhisperTranscriber
from helpers import require
from packaged_fixtures import alsa_sounds_dir, jfk_wav, whisper_base_dir, whisper_tiny_en_dir  # noqa: F401

# three of the nine (each window costs an encoder pass of each model): two spoken, and
# the one of noise; the other six are alike
ALSA = ("Front_Center.wav", "Noise.wav", "Rear_Right.wav")
# On the same window, ember's language probability and faster-whisper's detect_language
# agree within SAME_WINDOW_TOL. faster-whisper's transcribe detects on its window plus the
# one frame past the content that its feature extractor adds (its decoding drops it), so
# its info.language_probability is within INFO_TOL of ember's (2.2e-3 seen on
# Front_Center.wav).
SAME_WINDOW_TOL = 1e-4
INFO_TOL = 1e-2
# End to end, ember's features are the log-mel of the window padded with silence (as
# openai-whisper's), faster-whisper's the log-mel of the content padded in the log
# domain: on jfk.wav base's probability of English is 0.9590 and 0.9452
END_TO_END_TOL = 3e-2


@pytest.fixture(scope="module")
def clips(jfk_wav, alsa_sounds_dir):  # noqa: F811
    return [jfk_wav] + [os.path.join(alsa_sounds_dir, name) for name in ALSA]


# base is the family's second real model: `make acceptance` (make test keeps tiny.en)
@pytest.fixture(scope="module", params=["tiny.en", pytest.param("base", marks=pytest.mark.acceptance)])
def models(request):
    fw = require("faster_whisper")
    path = request.getfixturevalue(
        "whisper_tiny_en_dir" if request.param == "tiny.en" else "whisper_base_dir"
    )
    t = WhisperTranscriber.from_dir(path, device=ember.Device.cpu())
    peer = fw.WhisperModel(path, device="cpu", compute_type="float32")
    return t, peer


def _faster_whisper_window(path, n_mels):
    """faster-whisper's first (and for these clips only) window: its features of its own
    16 kHz decoding of the file, cut to the content frames and padded to 30 s."""
    from faster_whisper.audio import decode_audio, pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor

    feats = FeatureExtractor(feature_size=n_mels)(decode_audio(path))
    content = feats.shape[-1] - 1
    return pad_or_trim(feats[:, :content]).astype(np.float32), content / 100


def _segments(t, result, opts, seconds):
    """The segments faster-whisper would give for one window's result: none for a window
    of no speech, none that are instantaneous or without text."""
    if is_silence(result, opts):
        return []
    segments, _ = split_segments(result.tokens, t.tokens, 0.0, seconds)
    return [
        s.tokens
        for s in segments
        if s.start != s.end
        and t.tokenizer.decode([i for i in s.tokens if i < t.tokens.eot]).strip()
    ]


def test_the_same_language_and_tokens_as_faster_whisper(models, clips):
    t, peer = models
    windows = [_faster_whisper_window(p, t.model.cfg.num_mel_bins) for p in clips]
    enc = t.model.encoder(ember.tensor(np.stack([w for w, _ in windows])))
    if t.tokens.multilingual:
        detected = [best_language(row) for row in language_probs(t.model, enc, t.tokens)]
    else:
        detected = [("en", 1.0)] * len(clips)
    opts = [t.options(lang, fallback=False) for lang, _ in detected]
    prompts = [t.tokens.prompt(lang) for lang, _ in detected]
    greedy = finish(greedy_batch(t.model, enc, t.tokens, opts[0], prompts, [0] * len(clips)))
    report = []
    for i, path in enumerate(clips):
        name = os.path.basename(path)
        lang, prob = detected[i]
        peer_segments, info = peer.transcribe(
            path,
            beam_size=1,
            temperature=0.0,
            vad_filter=False,
            language=None if t.tokens.multilingual else "en",
        )
        peer_greedy = [s.tokens for s in peer_segments]
        report.append((name, lang, prob, info.language, info.language_probability))
        assert (name, lang) == (name, info.language)
        assert abs(prob - info.language_probability) < INFO_TOL, name
        if t.tokens.multilingual:
            same_lang, same_prob, _ = peer.detect_language(features=windows[i][0])
            report[-1] += (same_prob,)
            assert same_lang == lang and abs(prob - same_prob) < SAME_WINDOW_TOL, name
        seconds = windows[i][1]
        # the batched greedy rows were decoded with the first row's options: the same
        # but for the language, which only the prompt carries
        assert (name, _segments(t, greedy[i], opts[i], seconds)) == (name, peer_greedy)
        peer_beam, _ = peer.transcribe(
            path, beam_size=5, temperature=0.0, vad_filter=False, language=info.language
        )
        beam = beam_search(
            t.model, enc.narrow(0, i, 1), t.tokens, dataclasses.replace(opts[i], beam_size=5)
        )
        assert (name, _segments(t, beam, opts[i], seconds)) == (name, [s.tokens for s in peer_beam])
    print("\n".join(" ".join(map(str, row)) for row in report))


def _words(text):
    return re.sub(r"[^a-z ]", "", text.lower()).split()


@pytest.mark.acceptance
def test_base_on_jfk_end_to_end_detects_english_and_reads_the_text(whisper_base_dir, jfk_wav):  # noqa: F811
    fw = require("faster_whisper")
    t = WhisperTranscriber.from_dir(whisper_base_dir, device=ember.Device.cpu())
    result = t.transcribe(jfk_wav, fallback=False)
    segments = list(result)
    peer_segments, info = fw.WhisperModel(
        whisper_base_dir, device="cpu", compute_type="float32"
    ).transcribe(jfk_wav, beam_size=1, temperature=0.0, vad_filter=False)
    assert result.language == info.language == "en"
    print("jfk.wav base end to end:", result.language_probability, info.language_probability)
    assert abs(result.language_probability - info.language_probability) < END_TO_END_TOL
    assert _words(" ".join(s.text for s in segments)) == _words(
        "And so my fellow Americans ask not what your country can do for you ask what you "
        "can do for your country"
    )
    # the words of faster-whisper's transcript; not its punctuation, which the different
    # features move (ember: "Americans ask", faster-whisper: "Americans, ask")
    assert _words(" ".join(s.text for s in segments)) == _words(
        " ".join(s.text for s in peer_segments)
    )


@pytest.mark.acceptance
def test_base_word_timestamps_on_several_files_with_detection(
    whisper_base_dir,  # noqa: F811
    jfk_wav,  # noqa: F811
    alsa_sounds_dir,  # noqa: F811
    capsys,
):
    fw = require("faster_whisper")
    paths = [jfk_wav, os.path.join(alsa_sounds_dir, "Front_Center.wav")]
    argv = ["transcribe", *paths, "--model", whisper_base_dir, "--no-fallback"]
    assert main([*argv, "--word-timestamps", "--output-format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    for p in paths:  # each file's language detected (a given one has probability 1)
        assert printed[p]["language"] == "en"
        assert 0.5 < printed[p]["language_probability"] < 1.0
    t = WhisperTranscriber.from_dir(whisper_base_dir, device=ember.Device.cpu())
    alone = {p: list(t.transcribe(p, fallback=False, word_timestamps=True)) for p in paths}
    for p in paths:
        batched = [w for s in printed[p]["segments"] for w in s["words"]]
        mine = [w for s in alone[p] for w in s.words]
        assert [(w["word"], w["start"], w["end"]) for w in batched] == [
            (w.word, w.start, w.end) for w in mine
        ]
        np.testing.assert_allclose(
            [w["probability"] for w in batched], [w.probability for w in mine], atol=1e-4
        )
    # end to end the features differ by design, and so does the punctuation of the text
    # (ember: "Americans ask", faster-whisper: "Americans, ask"), which moves the words
    # around the pauses: the same words are compared as text only ...
    peer = fw.WhisperModel(whisper_base_dir, device="cpu", compute_type="float32")
    theirs, _ = peer.transcribe(
        jfk_wav, beam_size=1, temperature=0.0, vad_filter=False, word_timestamps=True
    )
    mine = [w for s in alone[jfk_wav] for w in s.words]
    assert [_words(w.word) for w in mine] == [_words(w.word) for s in theirs for w in s.words]
    assert len(mine) == 22  # "And so my fellow Americans ask not what ..." word by word
    # ... and on faster-whisper's own features and this text, the alignment is
    # CTranslate2's: each word starts where its path does, with its tokens' probability
    window, seconds = _faster_whisper_window(jfk_wav, t.model.cfg.num_mel_bins)
    frames = round(seconds * 100)
    text = [i for s in alone[jfk_wav] for i in s.tokens if i < t.tokens.eot]
    sot = t.tokens.prompt("en", "transcribe", timestamps=True)
    ours = whisper_words.align(
        t.model,
        t.tokenizer,
        t.tokens,
        t.model.encoder(ember.tensor(window[None])),
        text,
        frames,
        sot,
        whisper_words.alignment_heads(t.model),
        "en",
    )
    theirs = peer.model.align(peer.encode(window[None]), sot, [text], frames, median_filter_width=7)
    pairs = np.array(theirs[0].alignments)
    their_time = pairs[np.unique(pairs[:, 0], return_index=True)[1], 1] / 50
    bounds = np.cumsum([0] + [len(w["tokens"]) for w in ours[:-1]])
    np.testing.assert_allclose([w["start"] for w in ours], their_time[bounds], atol=0.021)
    probs = np.array(theirs[0].text_token_probs)
    np.testing.assert_allclose(
        [w["probability"] for w in ours],
        [probs[a:b].mean() for a, b in zip(bounds, [*bounds[1:], len(text)], strict=True)],
        atol=2e-3,
    )
