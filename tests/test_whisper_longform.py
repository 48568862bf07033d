"""Long files through the transcriber: a WAV of pure digital silence over several 30 s
windows (streamed from the file) gives no text at all, with or without word timestamps.

The long-form acceptance against faster-whisper (a 3-minute clip, the same segments up to
0.2 s) takes minutes on a 2-core machine, so it is a script: benchmarks/whisper_longform.py.
"""

import wave

import numpy as np
import pytest

import ember
from ember.models.whisper_transcriber import WhisperTranscriber
from packaged_fixtures import whisper_tiny_en_dir  # noqa: F401

SAMPLE_RATE = 16000


@pytest.fixture(scope="module")
def tiny(whisper_tiny_en_dir):  # noqa: F811
    return WhisperTranscriber.from_dir(whisper_tiny_en_dir, device=ember.Device.cpu())


def test_a_file_of_pure_silence_gives_no_text(tiny, tmp_path):
    path = str(tmp_path / "silence.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(np.zeros(75 * SAMPLE_RATE, "<i2").tobytes())
    assert list(tiny.transcribe(path)) == []
    assert list(tiny.transcribe(path, word_timestamps=True)) == []
