"""Whisper's mel filterbank, computed: Slaney's mel scale (linear below 1 kHz, logarithmic
above) with triangles normalized to equal area, as librosa's `mel(htk=False,
norm="slaney")` that openai-whisper's mel_filters.npz was made with. Pure numpy, host only.
"""

import math

import numpy as np

_F_SP = 200.0 / 3  # Hz per mel on the linear part
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def hz_to_mel(hz):
    hz = np.asarray(hz, dtype=np.float64)
    mel = hz / _F_SP
    log_part = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOGSTEP
    return np.where(hz >= _MIN_LOG_HZ, log_part, mel)


def mel_to_hz(mel):
    mel = np.asarray(mel, dtype=np.float64)
    hz = mel * _F_SP
    log_part = _MIN_LOG_HZ * np.exp(_LOGSTEP * (np.maximum(mel, _MIN_LOG_MEL) - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, log_part, hz)


def mel_filters(n_mels, n_fft=400, sample_rate=16000, fmax=None):
    """float64 [n_mels, n_fft // 2 + 1]: weight of each FFT bin in each mel band."""
    fmax = sample_rate / 2 if fmax is None else fmax
    bins = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(fmax), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]
