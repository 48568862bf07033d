"""ember.audio: WAV in every common encoding, mono mixing, resampling to 16 kHz, and a
clear error for each kind of bad file."""

import struct

import numpy as np
import pytest

import ember
from ember import audio
from ember.audio import decoders

RNG = np.random.default_rng(13)


def _wav_bytes(payload, code, channels, rate, bits, extensible=False, data_size=None):
    block = channels * bits // 8
    if extensible:
        guid = struct.pack("<H", code) + b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack(
            "<HHIIHHHHI", 0xFFFE, channels, rate, rate * block, block, bits, 22, bits, 0
        )
        fmt += guid
    else:
        fmt = struct.pack("<HHIIHH", code, channels, rate, rate * block, block, bits)
    size = len(payload) if data_size is None else data_size
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"LIST" + struct.pack("<I", 3) + b"abc\x00"  # an odd-sized chunk before the data
    body += b"data" + struct.pack("<I", size) + payload
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _encode(x, code, bits):
    """x in [-1, 1) [frames, channels] -> (little-endian bytes, what a reader must return)."""
    if code == 3:
        arr = x.astype("<f4" if bits == 32 else "<f8")
        return arr.tobytes(), arr.astype(np.float32)
    if bits == 8:
        q = np.clip(np.round(x * 128 + 128), 0, 255).astype(np.uint8)
        return q.tobytes(), (q.astype(np.float32) - 128) / 128
    scale = 2 ** (bits - 1)
    q = np.clip(np.round(x * scale), -scale, scale - 1).astype(np.int64)
    if bits == 24:
        u = q & 0xFFFFFF
        raw = np.stack([u & 0xFF, (u >> 8) & 0xFF, (u >> 16) & 0xFF], -1).astype(np.uint8)
        return raw.tobytes(), (q / scale).astype(np.float32)
    return q.astype({16: "<i2", 32: "<i4"}[bits]).tobytes(), (q / scale).astype(np.float32)


@pytest.mark.parametrize("extensible", [False, True])
@pytest.mark.parametrize("code,bits", [(1, 8), (1, 16), (1, 24), (1, 32), (3, 32), (3, 64)])
def test_every_encoding_reads_its_samples(tmp_path, code, bits, extensible):
    x = RNG.uniform(-1, 1, (257, 3))
    x[0] = [-1.0, 0.0, 0.999]  # the ends of the range
    payload, expected = _encode(x, code, bits)
    path = tmp_path / "a.wav"
    path.write_bytes(_wav_bytes(payload, code, 3, 22050, bits, extensible))
    samples, rate = audio.read_wav(path)
    assert rate == 22050 and samples.shape == (257, 3) and samples.dtype == np.float32
    np.testing.assert_allclose(samples, expected, rtol=0, atol=1e-7)


def test_stdlib_wave_file_reads_as_mono_16k(tmp_path):
    import wave

    x = (RNG.uniform(-0.5, 0.5, (1600, 2)) * 32767).astype("<i2")
    path = tmp_path / "s.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(x.tobytes())
    mono = audio.load(path)
    np.testing.assert_allclose(mono, x.astype(np.float32).mean(1) / 32768, atol=1e-7)


@pytest.mark.parametrize("src", [8000, 22050, 44100, 48000])
def test_resampling_keeps_a_tone_in_band(src):
    t = np.arange(src) / src
    got = audio.resample(np.sin(2 * np.pi * 440 * t), src, 16000)
    assert len(got) == 16000
    ref = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000)
    # away from the edges, where the signal starts from silence
    np.testing.assert_allclose(got[300:-300], ref[300:-300], atol=2e-4)


@pytest.mark.parametrize("src,tone", [(48000, 10000), (44100, 12000), (32000, 15000)])
def test_downsampling_removes_tones_above_the_new_nyquist(src, tone):
    t = np.arange(src) / src
    got = audio.resample(np.sin(2 * np.pi * tone * t), src, 16000)
    assert np.abs(got[300:-300]).max() < 1e-3  # below -60 dB: no alias at 16000 - tone


def test_a_48k_file_loads_at_16k(tmp_path):
    t = np.arange(4800) / 48000
    x = (np.sin(2 * np.pi * 1000 * t) * 0.5)[:, None]
    payload, _ = _encode(x, 3, 32)
    path = tmp_path / "48k.wav"
    path.write_bytes(_wav_bytes(payload, 3, 1, 48000, 32))
    got = audio.load(path)
    assert len(got) == 1600
    ref = 0.5 * np.sin(2 * np.pi * 1000 * np.arange(1600) / 16000)
    np.testing.assert_allclose(got[200:-200], ref[200:-200], atol=2e-4)


def _bad(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_bad_files_name_the_file_and_the_field(tmp_path):
    payload, _ = _encode(RNG.uniform(-1, 1, (100, 1)), 1, 16)
    good = _wav_bytes(payload, 1, 1, 16000, 16)
    cases = {
        "empty.wav": (b"", "empty"),
        "text.wav": (b"hello, this is not audio at all", "not a WAV"),
        "zero.wav": (_wav_bytes(b"", 1, 1, 16000, 16), "no samples"),
        "truncated.wav": (good[:-51], "truncated"),
        "lying.wav": (_wav_bytes(payload, 1, 1, 16000, 16, data_size=10**6), "lies"),
        "odd.wav": (_wav_bytes(payload[:-1], 1, 1, 16000, 16), "whole number"),
        "nofmt.wav": (b"RIFF\x04\x00\x00\x00WAVE", "fmt chunk"),
        "alaw.wav": (_wav_bytes(payload, 6, 1, 16000, 8), "format code 6"),
    }
    for name, (data, words) in cases.items():
        path = _bad(tmp_path, name, data)
        with pytest.raises(ember.FormatError) as info:
            audio.load(path)
        assert str(path) in str(info.value) and words in str(info.value), name


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ember.FormatError, match="no such audio file"):
        audio.load(tmp_path / "nope.wav")


def test_other_formats_without_a_decoder_say_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(decoders, "available", lambda: [])
    path = _bad(tmp_path, "clip.mp3", b"ID3\x03\x00\x00\x00\x00\x00\x00 not really mp3")
    with pytest.raises(decoders.NoDecoder) as info:
        audio.load(path)
    for word in (str(path), ".mp3", "soundfile", "av", "ffmpeg"):
        assert word in str(info.value)


def test_other_formats_go_through_the_first_decoder_found(tmp_path, monkeypatch):
    x = RNG.uniform(-1, 1, (800, 2)).astype(np.float32)
    monkeypatch.setattr(decoders, "available", lambda: ["soundfile"])
    monkeypatch.setattr(decoders, "_soundfile", lambda path: (x, 8000))
    path = _bad(tmp_path, "clip.flac", b"fLaC....")
    got = audio.load(path)
    np.testing.assert_allclose(got, audio.resample(x.mean(1), 8000, 16000), atol=1e-7)
    assert len(got) == 1600
