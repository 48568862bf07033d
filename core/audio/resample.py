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


class Resampler:
    """`src` Hz -> `dst` Hz a block at a time: `push(block)` returns the output samples
    whose filter windows the input so far covers, `flush()` the rest (the input's end is
    zero-padded). It keeps only the input one filter width back, and gives the same
    samples as resampling the whole signal at once."""

    def __init__(self, src, dst):
        g = math.gcd(int(src), int(dst))
        self.up, self.down = int(dst) // g, int(src) // g
        self.taps, self.first = _phase_filters(self.up, self.down)
        self.width = self.taps.shape[1]
        # input held from absolute index `start` (negative at first: the zeros before)
        self._held = np.zeros(-self.first, np.float64)
        self._start = self.first
        self._received = 0
        self._next = 0  # the next output sample's index

    def _emit(self, stop):
        out = np.empty(max(0, stop - self._next), np.float32)
        offsets = np.arange(self.width)
        for at in range(0, len(out), _CHUNK):
            n = np.arange(self._next + at, self._next + min(at + _CHUNK, len(out)), dtype=np.int64)
            base, phase = np.divmod(n * self.down, self.up)
            windows = self._held[(base + self.first - self._start)[:, None] + offsets[None, :]]
            out[at : at + len(n)] = np.einsum("ij,ij->i", windows, self.taps[phase])
        self._next = max(self._next, stop)
        # drop the input no later output reads (its window starts at base + first)
        keep_from = self._next * self.down // self.up + self.first
        if keep_from > self._start:
            self._held = self._held[keep_from - self._start :]
            self._start = keep_from
        return out

    def push(self, block):
        block = np.asarray(block, dtype=np.float64)
        self._held = np.concatenate([self._held, block])
        self._received += len(block)
        # output n reads inputs up to floor(n * down / up) + first + width - 1
        last_base = self._received - self.first - self.width
        ready = -(-(last_base + 1) * self.up // self.down) if last_base >= 0 else 0
        return self._emit(ready)

    def flush(self):
        self._held = np.concatenate([self._held, np.zeros(self.width, np.float64)])
        return self._emit(output_length(self._received, self.up, self.down))


def output_length(n, up, down):
    """Samples out for `n` in at the ratio up/down: ceil(n * up / down)."""
    return -(-n * up // down)


def resample(samples, src, dst):
    """float32 [n] at `src` Hz -> float32 [ceil(n * dst / src)] at `dst` Hz."""
    samples = np.asarray(samples, dtype=np.float32)
    if src == dst:
        return samples
    r = Resampler(src, dst)
    return np.concatenate([r.push(samples), r.flush()])
