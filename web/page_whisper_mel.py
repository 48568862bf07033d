"""Whisper's log-mel spectrogram in a page: ember.audio.log_mel's ops, with its two tables
(the Hann-windowed DFT basis and the Slaney mel filterbank) computed in plain Python,
since that module and ember.audio import numpy, which Pyodide's core has not.

The ops are ember.audio.log_mel.LogMel's, on the device: reflect padding by index_select,
frames as an unfold view, the STFT as a matmul with the basis, the power spectrum through
the filterbank as a second matmul, then Whisper's log10 clamp, 8-decade floor and
(x + 4) / 4. tests/test_page_whisper.py holds the two equal on the CPU and on wgpu.

The tables go to the device transposed, each bin count padded with zero bins to a multiple
of 4 (N_BINS_4): so both matmuls have the weight-transposed operand and strides the
device's tiled matmul_nt kernel takes. With the natural [400, 402] and [201, n_mels]
tables (402 and 201 not multiples of 4) WebGPU fell back to its generic matmul kernel:
22 of the page's 28 s of log-mel on SwiftShader. The padded bins are exact zeros.
"""

import math
from array import array

from ember import dtype as dt
from ember.errors import InvalidArgument
from ember.layout import Layout
from ember.tensor import Tensor, cat, tensor

N_FFT = 400
HOP = 160
SAMPLE_RATE = 16000
N_SAMPLES = 30 * SAMPLE_RATE  # every window is padded to 30 s
N_FRAMES = N_SAMPLES // HOP
N_BINS = N_FFT // 2 + 1
N_BINS_4 = -(-N_BINS // 4) * 4  # 204: the bins padded with zero bins on the device

# Slaney's mel scale: linear below 1 kHz, logarithmic above (as ember.audio.mel_filters)
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = math.log(6.4) / 27.0


def _hz_to_mel(hz):
    if hz >= _MIN_LOG_HZ:
        return _MIN_LOG_MEL + math.log(hz / _MIN_LOG_HZ) / _LOGSTEP
    return hz / _F_SP


def _mel_to_hz(mel):
    if mel >= _MIN_LOG_MEL:
        return _MIN_LOG_HZ * math.exp(_LOGSTEP * (mel - _MIN_LOG_MEL))
    return mel * _F_SP


def _linspace(a, b, n):
    step = (b - a) / (n - 1)
    return [a + i * step for i in range(n - 1)] + [b]


def mel_filters_t(n_mels):
    """array('f') [N_BINS x n_mels], row-major: the filterbank transposed (bins first),
    triangles normalized to equal area."""
    bins = _linspace(0.0, SAMPLE_RATE / 2, N_BINS)
    edges = [_mel_to_hz(m) for m in _linspace(0.0, _hz_to_mel(SAMPLE_RATE / 2), n_mels + 2)]
    out = array("f", bytes(4 * N_BINS * n_mels))
    for m in range(n_mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        scale = 2.0 / (hi - lo)
        for j, f in enumerate(bins):
            rising = (f - lo) / (mid - lo)
            falling = (hi - f) / (hi - mid)
            out[j * n_mels + m] = max(0.0, min(rising, falling)) * scale
    return out


def dft_basis():
    """array('f') [N_FFT x 2 * N_BINS], row-major: periodic-Hann-windowed cosines, then
    negated sines."""
    out = array("f", bytes(4 * N_FFT * 2 * N_BINS))
    for n in range(N_FFT):
        window = 0.5 - 0.5 * math.cos(2 * math.pi * n / N_FFT)
        row = n * 2 * N_BINS
        for k in range(N_BINS):
            angle = 2 * math.pi * (n * k) / N_FFT
            out[row + k] = window * math.cos(angle)
            out[row + N_BINS + k] = -window * math.sin(angle)
    return out


def _padded_rows(table, rows, cols, padded_rows):
    """array('f') [cols x padded_rows] of the row-major [rows x cols] `table` transposed,
    each row padded with zeros from `rows` to `padded_rows`."""
    out = array("f", bytes(4 * cols * padded_rows))
    for r in range(rows):
        out[r : cols * padded_rows : padded_rows] = table[r * cols : (r + 1) * cols]
    return out


def device_tables(n_mels):
    """(basis_t, filters) as they go to the device: basis_t array('f') [2 * N_BINS_4 x
    N_FFT], N_BINS_4 cosine rows then N_BINS_4 sine rows (those of bins past N_BINS zero);
    filters array('f') [n_mels x N_BINS_4] (columns past N_BINS zero)."""
    basis = dft_basis()
    cos = array("f")
    sin = array("f")
    for n in range(N_FFT):
        row = n * 2 * N_BINS
        cos.extend(basis[row : row + N_BINS])
        sin.extend(basis[row + N_BINS : row + 2 * N_BINS])
    basis_t = _padded_rows(cos, N_FFT, N_BINS, N_FFT)
    basis_t.extend(array("f", bytes(4 * (N_BINS_4 - N_BINS) * N_FFT)))
    basis_t.extend(_padded_rows(sin, N_FFT, N_BINS, N_FFT))
    basis_t.extend(array("f", bytes(4 * (N_BINS_4 - N_BINS) * N_FFT)))
    filters = _padded_rows(mel_filters_t(n_mels), N_BINS, n_mels, N_BINS_4)
    return basis_t, filters


def _upload(values, shape, device):
    storage = device.backend.from_host(values.tobytes(), dt.f32, shape)
    return Tensor(storage, Layout(shape), dt.f32, device)


class PageLogMel:
    """The spectrogram for one device and mel count; its tables are uploaded once."""

    def __init__(self, n_mels, device):
        if n_mels not in (80, 128):
            raise InvalidArgument(f"log_mel: n_mels must be 80 or 128 (Whisper's), got {n_mels}")
        self.n_mels, self.device = n_mels, device
        basis_t, filters = device_tables(n_mels)
        # used as their transposes: the weight-transposed operand of matmul_nt
        self.basis = _upload(basis_t, (2 * N_BINS_4, N_FFT), device).transpose(0, 1)
        self.filters_t = _upload(filters, (n_mels, N_BINS_4), device).transpose(0, 1)
        half = N_FFT // 2
        self.left_ids = tensor(list(range(half, 0, -1)), device=device)
        self.right_ids = tensor(list(range(N_SAMPLES - 2, N_SAMPLES - 2 - half, -1)), device=device)

    def __call__(self, samples):
        """Tensor f32 [n_mels, N_FRAMES] of `samples` (array('f'), 16 kHz mono), zero-padded
        (or cut) to 30 s."""
        window = array("f", samples[:N_SAMPLES])
        window.extend(array("f", bytes(4 * (N_SAMPLES - len(window)))))
        x = _upload(window, (N_SAMPLES,), self.device)
        # reflect padding (the edge sample itself is not repeated), as torch.stft(center=True)
        left, right = x.index_select(0, self.left_ids), x.index_select(0, self.right_ids)
        frames = cat([left, x, right]).unfold(0, N_FFT, HOP)  # [N_FRAMES + 1, 400]
        spec = frames.matmul(self.basis)  # [N_FRAMES + 1, 2 * N_BINS_4]
        re, im = spec.narrow(1, 0, N_BINS_4), spec.narrow(1, N_BINS_4, N_BINS_4)
        power = re * re + im * im  # the padded bins are 0
        mel = power.narrow(0, 0, N_FRAMES).matmul(self.filters_t)  # drops the last frame
        log = mel.clamp(min=1e-10).log() * (1.0 / math.log(10.0))
        log = log.maximum(log.max() - 8.0)
        return ((log + 4.0) * 0.25).transpose(0, 1).contiguous()
