"""Real Whisper tiny.en (CTranslate2 files) on jfk.wav: ember's transcript, the same tokens
as faster-whisper on the same model files (greedy, no temperature fallback), and the CLI."""

import dataclasses
import json
import re

import numpy as np

import ember
import ember.audio
from ember.cli import main
from ember.models.whisper_decoding import beam_search, greedy, split_segments
from ember.models.whisper_transcriber import WhisperTranscriber
from helpers import require
from packaged_fixtures import jfk_wav, whisper_tiny_en_dir  # noqa: F401

JFK = (
    "And so my fellow Americans ask not what your country can do for you ask what you can "
    "do for your country"
)


def _words(text):
    return re.sub(r"[^a-z ]", "", text.lower()).split()


def test_tiny_en_on_jfk_matches_the_text_and_faster_whisper(
    whisper_tiny_en_dir,
    jfk_wav,
    capsys,  # noqa: F811
):
    fw = require("faster_whisper")
    t = WhisperTranscriber.from_dir(whisper_tiny_en_dir, device=ember.Device.cpu())
    segments = list(t.transcribe(jfk_wav))  # with temperature fallback, as by default
    assert _words(" ".join(s.text for s in segments)) == _words(JFK)
    assert segments[0].start == 0.0 and 10.0 < segments[-1].end <= 11.0
    # digital silence, alone and after the speech: no invented text
    assert list(t.transcribe(np.zeros(5 * 16000, np.float32))) == []
    samples = ember.audio.load(jfk_wav)
    padded = np.concatenate([samples, np.zeros(40 * 16000, np.float32)])
    assert [s.text for s in t.transcribe(padded)] == [s.text for s in segments]

    # faster-whisper on the same files, greedy without fallback
    peer = fw.WhisperModel(whisper_tiny_en_dir, device="cpu", compute_type="float32")
    peer_segments, _ = peer.transcribe(
        jfk_wav, beam_size=1, temperature=0.0, language="en", vad_filter=False
    )
    peer_tokens = [s.tokens for s in peer_segments]
    # Its features differ from openai-whisper's by design (the log-mel of the unpadded
    # audio, cut to the content and padded with zeros in the log domain), so ember's model
    # and decoder are given those very features to compare the tokens they produce.
    from faster_whisper.audio import decode_audio, pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor

    feats = FeatureExtractor(feature_size=t.model.cfg.num_mel_bins)(decode_audio(jfk_wav))
    content = feats.shape[-1] - 1  # faster-whisper's content frames
    window = pad_or_trim(feats[:, :content])[None].astype(np.float32)
    opts = t.options(fallback=False)
    result = greedy(t.model, t.model.encoder(ember.tensor(window)), t.tokens, opts)
    mine, _ = split_segments(result.tokens, t.tokens, 0.0, content / 100)
    assert [s.tokens for s in mine] == peer_tokens
    # and beam search of width 5, both sides at temperature 0 only
    peer_beam, _ = peer.transcribe(
        jfk_wav, beam_size=5, temperature=0.0, language="en", vad_filter=False
    )
    beam_opts = dataclasses.replace(opts, beam_size=5)
    beam = beam_search(t.model, t.model.encoder(ember.tensor(window)), t.tokens, beam_opts)
    mine, _ = split_segments(beam.tokens, t.tokens, 0.0, content / 100)
    assert [s.tokens for s in mine] == [s.tokens for s in peer_beam]

    # the CLI prints the same transcript
    assert (
        main(["transcribe", jfk_wav, "--model", whisper_tiny_en_dir, "--output-format", "json"])
        == 0
    )
    printed = json.loads(capsys.readouterr().out)[jfk_wav]["segments"]
    assert [s["text"] for s in printed] == [s.text.strip() for s in segments]
