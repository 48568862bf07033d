"""Whisper's log-mel spectrogram as ember ops, on any device.

The short-time Fourier transform is a matmul of the frames (an `unfold` view of the
reflect-padded signal: 400 samples every 160) with a Hann-windowed DFT basis [400, 2 x 201]
(cosines, then sines), so no FFT kernel is needed; the power spectrum goes through the mel
filterbank as a second matmul. Then Whisper's log: log10 clamped at 1e-10, floored 8
decades below the window's maximum, and mapped by (x + 4) / 4.
"""

import math

import numpy as np

from ..errors import InvalidArgument
from ..tensor import cat, tensor
from .mel_filters import mel_filters

N_FFT = 400
HOP = 160
SAMPLE_RATE = 16000
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000: every window is padded to 30 s
N_FRAMES = N_SAMPLES // HOP  # 3000


def _dft_basis():
    """float64 [N_FFT, 2 * (N_FFT // 2 + 1)]: periodic-Hann-windowed cos and -sin."""
    n = np.arange(N_FFT)
    k = np.arange(N_FFT // 2 + 1)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)  # periodic, as torch.hann_window
    angle = 2 * np.pi * np.outer(n, k) / N_FFT
    return np.concatenate([window[:, None] * np.cos(angle), -window[:, None] * np.sin(angle)], 1)


class LogMel:
    """The spectrogram for one device and mel count; its bases are uploaded once."""

    def __init__(self, n_mels=80, device=None):
        if n_mels not in (80, 128):
            raise InvalidArgument(f"log_mel: n_mels must be 80 or 128 (Whisper's), got {n_mels}")
        self.n_mels = n_mels
        self.device = device
        self.basis = tensor(_dft_basis().astype(np.float32), device=device)
        self.filters_t = tensor(mel_filters(n_mels).T.astype(np.float32), device=device)
        bins = N_FFT // 2 + 1
        self._bins = bins

    def __call__(self, samples, n_samples=N_SAMPLES):
        """Tensor f32 [n_mels, n_samples // 160] of `samples` (16 kHz mono floats),
        zero-padded (or cut) to `n_samples`."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)[:n_samples]
        padded = np.zeros(n_samples, np.float32)
        padded[: len(samples)] = samples
        x = tensor(padded, device=self.device)
        half = N_FFT // 2
        # reflect padding (the edge sample itself is not repeated), as torch.stft(center=True)
        left = x.index_select(0, tensor(list(range(half, 0, -1)), device=self.device))
        right_ids = list(range(n_samples - 2, n_samples - 2 - half, -1))
        right = x.index_select(0, tensor(right_ids, device=self.device))
        frames = cat([left, x, right]).unfold(0, N_FFT, HOP)  # [n_frames + 1, 400]
        spec = frames.matmul(self.basis)
        re, im = spec.narrow(1, 0, self._bins), spec.narrow(1, self._bins, self._bins)
        power = re * re + im * im
        mel = power.narrow(0, 0, n_samples // HOP).matmul(self.filters_t)  # drops the last frame
        log = mel.clamp(min=1e-10).log() * (1.0 / math.log(10.0))
        log = log.maximum(log.max() - 8.0)
        return ((log + 4.0) * 0.25).transpose(0, 1).contiguous()


def log_mel(samples, n_mels=80, device=None, n_samples=N_SAMPLES):
    """Whisper's input features for `samples`: Tensor f32 [n_mels, n_samples // 160]."""
    return LogMel(n_mels, device)(samples, n_samples)
