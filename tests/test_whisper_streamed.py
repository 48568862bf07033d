"""The transcriber reads WAV files as it decodes them (ember.audio.open_samples): a long
file's windows come from the file 30 s at a time, so what is held stays one window and a
block however long the file is, and every file is closed when the transcription ends,
stops early or fails. A tiny random Whisper (whisper_random.py) decodes the windows."""

import tracemalloc
import wave

import numpy as np
import pytest

from ember.audio.stream import BLOCK_SECONDS, StreamedSamples
from ember.models.whisper_load import load_whisper
from ember.models.whisper_transcriber import WhisperTranscriber
from whisper_random import IdsTokenizer, fixed_log_mel, random_whisper  # noqa: F401

RATE = 16000
WINDOW = 30 * RATE


def _wav(path, seconds, seed=0):
    noise = np.random.default_rng(seed).uniform(-0.3, 0.3, seconds * RATE)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(np.round(noise * 32767).astype("<i2").tobytes())
    return str(path)


@pytest.fixture
def transcriber(cpu, random_whisper):  # noqa: F811
    _, path, tokens, features = random_whisper
    em = load_whisper(path, device=cpu)
    t = WhisperTranscriber(em, IdsTokenizer(), tokens)
    t.log_mel = fixed_log_mel(em, features.numpy()[0])  # the random encoder's 60 frames
    return t


def _run(t, paths):
    run = t.transcribe_many(paths, language="de", fallback=False)
    streamed = [f.samples for f in run._state]
    assert all(isinstance(s, StreamedSamples) for s in streamed)
    return run, streamed


def _closed(streamed):
    return [s._wav._fh.closed for s in streamed]


def test_files_are_closed_when_the_transcription_stops_early_or_fails(transcriber, tmp_path):
    paths = [_wav(tmp_path / "a.wav", 70, 1), _wav(tmp_path / "b.wav", 95, 2)]
    run, streamed = _run(transcriber, paths)
    events = iter(run)
    next(events)
    assert _closed(streamed) == [False, False]  # both still being read
    events.close()  # the caller stops early
    assert _closed(streamed) == [True, True]

    fixed, windows = transcriber.log_mel, []

    def failing(window):
        windows.append(window)
        if len(windows) == 3:  # in the second round
            raise RuntimeError("device lost")
        return fixed(window)

    transcriber.log_mel = failing
    run, streamed = _run(transcriber, paths)
    with pytest.raises(RuntimeError, match="device lost"):
        list(run)
    assert _closed(streamed) == [True, True]


def _peak(t, path):
    """Transcribes the file at `path`; the peak of memory allocated meanwhile, in bytes."""
    run, streamed = _run(t, [path])
    tracemalloc.start()
    try:
        for event in run:  # not kept: only what the transcription holds counts
            seconds = event.seconds
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert run.files[0].done and seconds == pytest.approx(run.files[0].duration)
    assert _closed(streamed) == [True]
    return peak


def test_a_long_file_is_held_a_window_and_a_block_at_a_time(transcriber, tmp_path, monkeypatch):
    seconds = 240
    held, reads = [], []
    getitem = StreamedSamples.__getitem__

    def watched(self, key):
        window = getitem(self, key)
        held.append(len(self._held))
        reads.append((key.start, self._wav._fh.tell()))
        return window

    monkeypatch.setattr(StreamedSamples, "__getitem__", watched)
    peak = _peak(transcriber, _wav(tmp_path / "long.wav", seconds))
    assert len(held) >= seconds // 30  # every window came from the file
    assert max(held) <= WINDOW + BLOCK_SECONDS * RATE
    header, block_bytes = 44, BLOCK_SECONDS * RATE * 2
    for start, tell in reads:  # never read further than one block past the window
        assert tell <= header + (start + WINDOW) * 2 + block_bytes
    # flat: three minutes more audio adds next to nothing (measured 0.4 MB, the peak
    # moving with where the blocks fall), where holding it would add 11.5 MB of float32
    short = _peak(transcriber, _wav(tmp_path / "short.wav", seconds - 180))
    assert peak < short + 3_000_000, f"peak {peak / 1e6:.1f} MB against {short / 1e6:.1f} MB"
