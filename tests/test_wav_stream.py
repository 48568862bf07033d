"""Long WAV files are read block by block: the streaming resampler gives the samples of
the whole-signal one, StreamedSamples gives the windows of the whole file while reading
at most one block past the window it is asked for, and a file that shrinks while it is
read is an error naming it, not garbage."""

import wave

import numpy as np
import pytest

import ember
from ember import audio
from ember.audio.resample import Resampler
from ember.audio.stream import BLOCK_SECONDS, StreamedSamples

RNG = np.random.default_rng(3)
WINDOW = 30 * 16000  # the transcriber's window, in 16 kHz samples


def _write(path, x, rate):
    """x float in [-1, 1) [frames, channels] as 16-bit PCM."""
    q = np.round(x * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(x.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(q.tobytes())
    return str(path)


@pytest.mark.parametrize("src,dst", [(48000, 16000), (44100, 16000), (8000, 16000), (22050, 16000)])
def test_resampling_in_blocks_equals_resampling_at_once(src, dst):
    x = RNG.uniform(-1, 1, 3 * src + 17).astype(np.float32)
    whole = audio.resample(x, src, dst)
    r, parts, at = Resampler(src, dst), [], 0
    for size in RNG.integers(1, src, 40):  # blocks of every size, some shorter than the filter
        parts.append(r.push(x[at : at + size]))
        at += int(size)
        if at >= len(x):
            break
    parts.append(r.push(x[at:]))
    parts.append(r.flush())
    blocks = np.concatenate(parts)
    assert blocks.shape == whole.shape
    np.testing.assert_allclose(blocks, whole, rtol=0, atol=1e-7)


class CountingFile:
    """A file object that records how far into the file anything was read."""

    def __init__(self, fh):
        self.fh, self.furthest = fh, 0

    def read(self, n=-1):
        data = self.fh.read(n)
        self.furthest = max(self.furthest, self.fh.tell())
        return data

    def __getattr__(self, name):
        return getattr(self.fh, name)


@pytest.mark.parametrize("rate,channels,seconds", [(16000, 1, 70), (22050, 2, 40)])
def test_windows_are_the_whole_files_and_reading_stays_one_block_ahead(
    tmp_path, rate, channels, seconds
):
    x = RNG.uniform(-0.5, 0.5, (seconds * rate, channels))
    path = _write(tmp_path / "long.wav", x, rate)
    whole = audio.load(path)
    samples = audio.open_samples(path)
    assert isinstance(samples, StreamedSamples) and len(samples) == len(whole)
    counting = CountingFile(samples._wav._fh)
    samples._wav._fh = counting
    header = 44
    bytes_per_16k = rate / 16000 * 2 * channels
    block_bytes = rate * BLOCK_SECONDS * 2 * channels
    seek = 0
    while seek < len(whole):
        window = samples[seek : seek + WINDOW]
        np.testing.assert_array_equal(window, whole[seek : seek + WINDOW])
        stop = min(seek + WINDOW, len(whole))
        # read no further than the window's end plus one block (and the filter's reach)
        assert counting.furthest <= header + stop * bytes_per_16k + block_bytes + 1024
        # what is held is the window and at most a block of 16 kHz samples after it
        assert len(samples._held) <= WINDOW + 16000 * BLOCK_SECONDS
        seek += 23 * 16000 + 137  # windows overlap, as when a window seeks back
    with pytest.raises(ember.InvalidArgument, match="read forward"):
        samples[0:10]


def test_a_file_cut_short_while_it_is_read_is_named(tmp_path):
    path = _write(tmp_path / "cut.wav", RNG.uniform(-0.5, 0.5, (60 * 16000, 1)), 16000)
    samples = audio.open_samples(path)
    samples[0:WINDOW]
    with open(path, "r+b") as fh:  # someone truncates the file after it was opened
        fh.truncate(40 * 16000 * 2)
    with pytest.raises(ember.FormatError) as info:
        samples[WINDOW : 2 * WINDOW]
    assert path in str(info.value) and "ends before" in str(info.value)


def test_a_header_that_lies_about_its_size_is_refused_before_any_sample(tmp_path):
    path = _write(tmp_path / "lies.wav", RNG.uniform(-0.5, 0.5, (16000, 1)), 16000)
    data = bytearray(open(path, "rb").read())
    data[40:44] = (10**8).to_bytes(4, "little")  # the data chunk claims 100 MB
    open(path, "wb").write(bytes(data))
    with pytest.raises(ember.FormatError) as info:
        audio.open_samples(path)
    assert path in str(info.value) and "lies about its size" in str(info.value)
