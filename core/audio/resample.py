"""Band-limited resampling by a rational factor: a Kaiser-windowed sinc evaluated per
output phase (polyphase), with its cutoff at the lower of the two Nyquist frequencies so
that downsampling does not alias.

For sample rates `src` -> `dst` with g = gcd, the output sample n sits at input time
t = n * (src/g) / (dst/g); its fractional part takes one of dst/g values (the phases), so
the filter is tabulated once per phase and applied to the input window around floor(t).
"""

import math

import numpy as np

ZERO_CROSSINGS = 32  # sinc lobes on each side: more is a sharper transition band
KAISER_BETA = 9.0  # stop-band attenuation around 90 dB
ROLLOFF = 0.945  # cutoff as a fraction of the lower Nyquist: the transition band fits below it
_CHUNK = 1 << 13  # output samples computed per step, so memory stays bounded


def _phase_filters(up, down):
    """(taps [up, 2H], first tap offset -H+1): filters[p, j] weighs input base+j-H+1 for an
    output at phase p (input time base + p/up)."""
    cutoff = min(1.0, up / down) * ROLLOFF
    half = math.ceil(ZERO_CROSSINGS / cutoff)
    j = np.arange(-half + 1, half + 1, dtype=np.float64)  # input offsets from floor(t)
    frac = np.arange(up, dtype=np.float64)[:, None] / up
    d = frac - j[None, :]  # t - k for every phase and tap
    window = np.i0(KAISER_BETA * np.sqrt(np.clip(1.0 - (d / half) ** 2, 0.0, None)))
    window /= np.i0(KAISER_BETA)
    taps = cutoff * np.sinc(cutoff * d) * window
    taps /= taps.sum(axis=1, keepdims=True)  # unit gain at DC on every phase
    return taps, -half + 1


def resample(samples, src, dst):
    """float32 [n] at `src` Hz -> float32 [ceil(n * dst / src)] at `dst` Hz."""
    samples = np.asarray(samples, dtype=np.float32)
    if src == dst:
        return samples
    g = math.gcd(int(src), int(dst))
    up, down = int(dst) // g, int(src) // g
    taps, first = _phase_filters(up, down)
    width = taps.shape[1]
    n_out = -(-len(samples) * up // down)
    # zero padding on both sides so every window reads inside the array
    padded = np.concatenate(
        [np.zeros(-first, np.float64), samples.astype(np.float64), np.zeros(width, np.float64)]
    )
    out = np.empty(n_out, np.float32)
    offsets = np.arange(width)
    for start in range(0, n_out, _CHUNK):
        n = np.arange(start, min(start + _CHUNK, n_out), dtype=np.int64)
        base, phase = np.divmod(n * down, up)
        windows = padded[base[:, None] + offsets[None, :]]  # base + first is index base in padded
        out[start : start + len(n)] = np.einsum("ij,ij->i", windows, taps[phase])
    return out
