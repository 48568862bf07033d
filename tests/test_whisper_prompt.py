"""The initial prompt and condition_on_previous_text against faster-whisper on real tiny.en:
the <|startofprev|> prompt tokens faster-whisper builds (leading space, the last
max_length // 2 - 1 tokens of a long prompt), and the same tokens decoded on jfk.wav
with a prompt, and on jfk.wav three times over (two windows, the second after the first
window's text, or not) with faster-whisper's defaults for the rest."""

import numpy as np
import pytest

import ember
from ember.models.whisper_transcriber import WhisperTranscriber
from ember.models.whisper_windows import Transcription, _File
from helpers import require
from packaged_fixtures import jfk_wav, whisper_tiny_en_dir  # noqa: F401
from whisper_peer import SameInputsOnce, peer_audio, peer_log_mel

PROMPT = "  Glossary: JFK; Americans. Transcript in lower case, no punctuation:"
LONG = " ".join(f"word{i}" for i in range(300))  # far more than 223 tokens


@pytest.fixture(scope="module")
def pair(whisper_tiny_en_dir):  # noqa: F811
    fw = require("faster_whisper")
    t = WhisperTranscriber.from_dir(whisper_tiny_en_dir, device=ember.Device.cpu())
    t.model.encoder = SameInputsOnce(t.model.encoder)
    return t, fw.WhisperModel(whisper_tiny_en_dir, device="cpu", compute_type="float32")


def test_prompt_tokens_are_faster_whispers(pair):
    from faster_whisper.tokenizer import Tokenizer

    t, peer = pair
    fw_tok = Tokenizer(peer.hf_tokenizer, False)
    for text in (PROMPT, LONG):
        f = _File(0, np.zeros(16000, np.float32), t.prompt_tokens(text), None, 0)
        mine = f.prefix(t.tokens, t.model.cfg.max_target_positions) + t.tokens.prompt("en")
        # faster-whisper's own: " " + the stripped text, encoded, then its get_prompt
        expected = peer.get_prompt(fw_tok, fw_tok.encode(" " + text.strip()))
        assert mine == expected
    assert len(mine) == 1 + 223 + 1  # <|startofprev|>, the last 223 tokens, <|sot|>
    assert t.prompt_tokens([5, 6]) == [5, 6]
    with pytest.raises(
        ember.InvalidArgument, match=f"initial_prompt token {t.tokens.eot} is not a text token"
    ):
        t.prompt_tokens([5, t.tokens.eot])


def _ember(t, samples, feats, content, **kw):
    opts = t.options(fallback=False, condition_on_previous_text=kw.pop("condition", True))
    run = Transcription(
        t.model,
        t.tokenizer,
        t.tokens,
        [samples],
        peer_log_mel(samples, feats, content),
        opts,
        t.prompt_tokens(kw.pop("initial_prompt", None)),
    )
    return [e.segment.tokens for e in run if e.segment is not None]


def _peer(peer, audio, **kw):
    segments, _ = peer.transcribe(
        audio, beam_size=1, temperature=0.0, language="en", vad_filter=False, **kw
    )
    return [s.tokens for s in segments]


def test_an_initial_prompt_decodes_as_in_faster_whisper(pair, jfk_wav):  # noqa: F811
    t, peer = pair
    samples, feats, content = peer_audio(jfk_wav, t.model.cfg.num_mel_bins)
    decoded = {}
    for text in (None, PROMPT, LONG):
        decoded[text] = _ember(t, samples, feats, content, initial_prompt=text)
        assert decoded[text] == _peer(peer, jfk_wav, initial_prompt=text)
    assert decoded[PROMPT] != decoded[None]  # the prompt mattered


@pytest.mark.parametrize("condition", [True, False])
def test_windows_after_the_previous_text_as_in_faster_whisper(pair, jfk_wav, condition):  # noqa: F811
    t, peer = pair
    from faster_whisper.audio import decode_audio

    three = np.ascontiguousarray(np.tile(decode_audio(jfk_wav), 3), dtype=np.float32)
    samples, feats, content = peer_audio(three, t.model.cfg.num_mel_bins)
    mine = _ember(t, samples, feats, content, condition=condition, initial_prompt=PROMPT)
    theirs = _peer(peer, three, condition_on_previous_text=condition, initial_prompt=PROMPT)
    assert mine == theirs and len(mine) >= 2


def test_the_cli_takes_an_initial_prompt(pair, whisper_tiny_en_dir, jfk_wav, capsys):  # noqa: F811
    import json

    from ember.cli import main

    t, _ = pair
    argv = ["transcribe", jfk_wav, "--model", whisper_tiny_en_dir, "--no-fallback"]
    assert main([*argv, "--initial-prompt", PROMPT, "--output-format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)[jfk_wav]["segments"]
    api = t.transcribe(jfk_wav, fallback=False, initial_prompt=PROMPT)
    assert [s["tokens"] for s in printed] == [s.tokens for s in api]
