"""A WAV file as 16 kHz mono samples read on demand: what the Whisper transcriber slices
its 30 s windows from, so a two-hour file is never held whole.

    samples = StreamedSamples("talk.wav")
    len(samples)                     # 16 kHz samples in the file (from its header)
    window = samples[a : a + 480000] # numpy float32; later slices may not start before `a`

Slices must move forward (each starts at or after the previous one's start, as the
transcriber's windows do); what lies before the latest start is dropped, and the file is
read at most one block past the latest slice's end.
"""

import numpy as np

from ..errors import InvalidArgument
from .resample import Resampler, output_length
from .wav import WavReader

BLOCK_SECONDS = 4  # input read per step: the most that is read past what a slice needs


class StreamedSamples:
    def __init__(self, path, sample_rate=16000):
        self.path = path
        self._wav = WavReader(path)
        self._resampler = None
        self._length = self._wav.frames
        if self._wav.rate != sample_rate:
            self._resampler = Resampler(self._wav.rate, sample_rate)
            self._length = output_length(self._wav.frames, self._resampler.up, self._resampler.down)
        self._block = max(1, self._wav.rate * BLOCK_SECONDS)
        self._held = np.zeros(0, np.float32)
        self._start = 0  # absolute index of _held[0]
        self._done = False

    def __len__(self):
        return self._length

    def _read_block(self):
        frames = self._wav.read(self._block)
        if frames.shape[0] == 0:
            self._done = True
            self._wav.close()
            tail = self._resampler.flush() if self._resampler is not None else None
            return tail
        mono = frames[:, 0] if frames.shape[1] == 1 else frames.mean(axis=1, dtype=np.float32)
        return self._resampler.push(mono) if self._resampler is not None else mono

    def __getitem__(self, key):
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise InvalidArgument(f"{self.path}: streamed samples take a [start:stop] slice")
        start, stop, _ = key.indices(self._length)
        if start < self._start:
            raise InvalidArgument(
                f"{self.path}: streamed samples are read forward: [{start}:...] comes before "
                f"{self._start}, which was already dropped"
            )
        end = self._start + len(self._held)
        parts = [self._held[start - self._start :]] if start < end else []
        while end < stop and not self._done:
            block = self._read_block()
            if block is not None:
                parts.append(block[max(0, start - end) :])
                end += len(block)
        self._held = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        self._start = max(start, end - len(self._held))
        return self._held[: max(0, stop - start)].copy()

    def close(self):
        self._wav.close()
