"""Audio in: files to 16 kHz mono float32, and Whisper's log-mel spectrogram.

    samples = ember.audio.load("speech.wav")          # numpy float32, 16 kHz, mono
    mel = ember.audio.log_mel(samples, n_mels=80, device=dev)   # Tensor [80, 3000]

WAV is read by ember itself (wav.py), block by block where it is long (stream.py); other
formats go through an optional decoder (decoders.py).
"""

import os

import numpy as np

from ..errors import FormatError
from . import decoders
from .resample import resample
from .stream import StreamedSamples
from .wav import is_wav, read_wav

SAMPLE_RATE = 16000


def to_mono(samples):
    """[frames, channels] -> [frames], the mean of the channels."""
    return samples[:, 0] if samples.shape[1] == 1 else samples.mean(axis=1, dtype=np.float32)


def _is_wav_file(path):
    """Whether `path` is read as WAV (its header, or its name); FormatError if missing."""
    if not os.path.isfile(path):
        raise FormatError(f"{path}: no such audio file", path=path, field="path")
    with open(path, "rb") as fh:
        head = fh.read(12)
    return is_wav(head) or os.path.splitext(path)[1].lower() in (".wav", ".wave")


def load(path, sample_rate=SAMPLE_RATE):
    """The audio file at `path` as mono float32 samples at `sample_rate` Hz."""
    path = os.fspath(path)
    if _is_wav_file(path):
        samples, rate = read_wav(path)
    elif os.path.getsize(path) == 0:
        raise FormatError(f"{path}: the file is empty (0 bytes)", path=path, field="header")
    else:
        samples, rate, _ = decoders.decode(path)
    if len(samples) == 0:
        raise FormatError(f"{path}: the file holds no samples", path=path, field="data")
    return resample(to_mono(samples), rate, sample_rate)


def open_samples(path, sample_rate=SAMPLE_RATE):
    """The audio file at `path` as something `len()` and forward `[start:stop]` slices
    give mono float32 samples at `sample_rate` Hz of: a WAV file is read block by block
    as the slices move on (StreamedSamples, its header checked now); other formats are
    decoded whole by their decoder."""
    path = os.fspath(path)
    if _is_wav_file(path):
        return StreamedSamples(path, sample_rate)
    return load(path, sample_rate)


__all__ = [
    "SAMPLE_RATE",
    "StreamedSamples",
    "load",
    "open_samples",
    "read_wav",
    "resample",
    "to_mono",
    "decoders",
]
