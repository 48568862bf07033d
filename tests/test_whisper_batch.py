"""Batched decoding: several windows through the encoder and decoder at once, each row
with its own prompt (so its own positions), its own stop, and the tokens it gets alone;
segments given as soon as they are decoded; the CLI's order of output and progress bar.
A tiny random model on every device; real tiny.en on three clips of different lengths."""

import dataclasses
import io
import json

import numpy as np
import pytest

import ember
import ember.audio
from ember.cli import main
from ember.models import whisper_batch
from ember.models.whisper_batch import finish, greedy_batch
from ember.models.whisper_decoding import DecodeOptions, Segment, greedy
from ember.models.whisper_load import load_whisper
from ember.models.whisper_transcriber import WhisperTranscriber
from ember.models.whisper_windows import FileTranscript, Transcription
from packaged_fixtures import alsa_sounds_dir, jfk_wav, whisper_tiny_en_dir  # noqa: F401
from whisper_random import IdsTokenizer, fixed_log_mel, random_whisper  # noqa: F401


def test_rows_with_their_own_prompt_lengths_and_stops_get_their_tokens_alone(
    device, random_whisper
):
    _, path, tokens, features = random_whisper
    em = load_whisper(path, device=device)
    enc = em.encoder(ember.tensor(features.numpy(), device=device))
    opts = DecodeOptions(max_new_tokens=12)
    # prompts of 3, 21 and 56 tokens: the last one's room (64 - 56) stops it at 8
    prefixes = [[], [tokens.sot_prev, *range(1, 18)], [tokens.sot_prev, *range(20, 72)]]
    languages = ["de", "en", "fr"]
    prompts = [p + tokens.prompt(lang) for p, lang in zip(prefixes, languages, strict=True)]
    row_opts = [dataclasses.replace(opts, language=lang) for lang in languages]
    got = finish(greedy_batch(em, enc, tokens, opts, prompts, [len(p) for p in prefixes]))
    tol = 1e-4 if device.kind == "cpu" else 1e-3
    for i in range(3):
        alone = greedy(em, enc.narrow(0, i, 1), tokens, row_opts[i], prefix=prefixes[i])
        assert got[i].tokens == alone.tokens
        assert got[i].ended == alone.ended
        assert abs(got[i].avg_logprob - alone.avg_logprob) < tol
        assert abs(got[i].no_speech_prob - alone.no_speech_prob) < tol
    assert len(got[2].tokens) == 8 and len({len(r.tokens) for r in got}) > 1
    assert any(t >= tokens.timestamp_begin for r in got for t in r.tokens[1:])


def _counting_steps(monkeypatch):
    calls = []
    forward = whisper_batch._Rows.forward

    def counted(self, *args):
        calls.append(1)
        return forward(self, *args)

    monkeypatch.setattr(whisper_batch._Rows, "forward", counted)
    return calls


@pytest.mark.parametrize("fallback", [False, True])
def test_segments_come_as_they_close_unless_the_window_may_be_decoded_again(
    cpu, random_whisper, monkeypatch, fallback
):
    _, path, tokens, features = random_whisper
    em = load_whisper(path, device=cpu)
    temperatures = (0.0, 0.5) if fallback else (0.0,)
    opts = DecodeOptions(language="de", max_new_tokens=30, temperatures=temperatures)
    # a random model's text is unlikely: with fallback the window is decoded again
    steps = _counting_steps(monkeypatch)
    audio = np.random.default_rng(0).standard_normal(16000 * 20).astype(np.float32) * 0.1
    run = Transcription(
        em, IdsTokenizer(), tokens, [audio], fixed_log_mel(em, features.numpy()[0]), opts
    )
    events = [(len(steps), e.segment) for e in run]
    seen = [(n, seg) for n, seg in events if seg is not None]
    assert seen, "the random model gave no segment"
    # each segment against the decoder passes run when its window ended (its progress)
    ends = [
        next(m for m, later in events[k:] if later is None)
        for k, (_, seg) in enumerate(events)
        if seg is not None
    ]
    if fallback:  # given only after the window's decoding
        assert [n for n, _ in seen] == ends
    else:  # the first given while its window was still decoding
        assert seen[0][0] < ends[0]
    assert run.files[0].done and run.files[0].segments == [s for _, s in seen]
    assert all(s.avg_logprob < 0 for _, s in seen)  # the window's figure, set at its end


def _printed(events, files, fmt="txt", paths=("a.wav", "b.wav")):
    from ember.cli.transcribe import _Printer
    from ember.cli.transcribe_progress import AudioProgress

    out, err = io.StringIO(), io.StringIO()
    args = type(
        "Args",
        (),
        {
            "output_format": fmt,
            "files": list(paths),
            "language": None,
            "max_words_per_line": None,
            "highlight_words": False,
        },
    )
    transcription = type("T", (), {"files": files})
    printer = _Printer(args, transcription, out, err, AudioProgress(err, 10.0))
    for i, seg, done in events:
        if seg is not None:
            files[i].segments.append(seg)
            printer.segment(i, seg)
        files[i].done = done
        printer.advance()
    return out.getvalue(), err.getvalue()


def test_the_cli_prints_files_in_order_the_first_as_it_is_decoded():
    files = [FileTranscript(5.0), FileTranscript(5.0, "de", 0.9, {"de": 0.9, "en": 0.1})]
    b1, a1, a2 = (
        Segment(0, 1, [1], " b one"),
        Segment(0, 2, [2], " a one"),
        Segment(2, 3, [3], " a two"),
    )
    out, err = _printed([(1, b1, False), (0, a1, False), (0, a2, True), (1, None, True)], files)
    assert out.splitlines() == [
        "==> a.wav <==",
        "[00:00:00.000 --> 00:00:02.000] a one",
        "[00:00:02.000 --> 00:00:03.000] a two",
        "==> b.wav <==",
        "[00:00:00.000 --> 00:00:01.000] b one",
    ]
    assert err == "b.wav: language de (probability 0.900, detected)\n"  # no bar: not a tty
    files = [FileTranscript(5.0), FileTranscript(5.0)]
    out, _ = _printed([(1, b1, True), (0, a1, False), (0, a2, True)], files, fmt="srt")
    assert out.split("\n\n")[2].startswith("1\n00:00:00,000 --> 00:00:01,000\nb one")


def test_the_progress_bar_draws_on_a_terminal_only():
    from ember.cli.transcribe_progress import AudioProgress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    quiet, tty = io.StringIO(), Tty()
    for stream in (quiet, tty):
        bar = AudioProgress(stream, 20.0)
        bar.update(0, 5.0)
        bar.update(1, 5.0)
        bar.close()
    assert quiet.getvalue() == ""
    last = tty.getvalue().rstrip("\n").split("\r")[-1]
    assert last.startswith("[" + "#" * 12 + " " * 12 + "] 10.0/20.0 s of audio")


CLIPS = ("Front_Center.wav",)


def test_real_files_batched_give_each_files_tokens_alone(
    whisper_tiny_en_dir,
    jfk_wav,
    alsa_sounds_dir,
    capsys,  # noqa: F811
):
    import os

    paths = [jfk_wav] + [os.path.join(alsa_sounds_dir, c) for c in CLIPS]
    t = WhisperTranscriber.from_dir(whisper_tiny_en_dir, device=ember.Device.cpu())
    alone = [[s.tokens for s in t.transcribe(p, fallback=False)] for p in paths]
    assert all(alone) and len({len(ember.audio.load(p)) for p in paths}) == len(paths)
    argv = ["transcribe", *paths, "--model", whisper_tiny_en_dir, "--no-fallback"]
    assert main([*argv, "--output-format", "json"]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert [[s["tokens"] for s in printed[p]["segments"]] for p in paths] == alone
    assert [printed[p]["language"] for p in paths] == ["en"] * len(paths)
    assert "\r" not in captured.err  # no progress bar when stderr is not a terminal
