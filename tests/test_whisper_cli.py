"""`ember transcribe`: output formats, and bad input answered with a message, never a
traceback (the real-weight run is in test_whisper_real.py)."""

import subprocess
import sys
import wave

import pytest

from ember.cli.transcribe import format_segment
from ember.models.whisper_decoding import Segment


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "ember.cli", "transcribe", *map(str, args)],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "fmt,expected",
    [
        ("txt", "[00:01:02.500 --> 01:00:00.020] hello there"),
        ("srt", "3\n00:01:02,500 --> 01:00:00,020\nhello there\n"),
        ("vtt", "00:01:02.500 --> 01:00:00.020\nhello there\n"),
    ],
)
def test_segment_formats(fmt, expected):
    seg = Segment(62.5, 3600.02, [1, 2], text=" hello there")
    assert format_segment(fmt, 3, seg) == expected


def test_missing_file_fails_before_the_model_loads(tmp_path):
    done = _cli(tmp_path / "nope.wav", "--model", tmp_path)
    assert done.returncode == 1
    assert "nope.wav: no such audio file" in done.stderr and "Traceback" not in done.stderr


def test_a_directory_that_is_no_whisper_model_is_named(tmp_path):
    audio = tmp_path / "a.wav"
    with wave.open(str(audio), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\x00\x00" * 1600)
    model = tmp_path / "empty-model"
    model.mkdir()
    done = _cli(audio, "--model", model)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert str(model) in done.stderr and "neither a CTranslate2" in done.stderr


def test_a_beam_size_below_one_is_refused(tmp_path):
    done = _cli(tmp_path / "a.wav", "--beam-size", "0", "--model", tmp_path)
    assert done.returncode == 1 and "--beam-size 0" in done.stderr
