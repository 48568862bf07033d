"""WAV files (RIFF/WAVE): PCM 8/16/24/32-bit, IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE,
any channel count and sample rate, read into float32 samples in [-1, 1].

Every size the header states is checked against the file before a sample is read, so a
zero-length, truncated or lying file raises FormatError naming the file and the field
instead of returning garbage. WavReader reads the samples a block at a time, so a long
file is decoded in windows without being held whole.
"""

import os
import struct

import numpy as np

from ..errors import FormatError

PCM, IEEE_FLOAT, EXTENSIBLE = 1, 3, 0xFFFE
# The 14 bytes every KSDATAFORMAT_SUBTYPE_* GUID ends with; the first two hold the format.
_GUID_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
# the fmt chunk's fields end at byte 40 (WAVE_FORMAT_EXTENSIBLE); the rest is not read
_FMT_READ = 40
_SUPPORTED = {(PCM, 8), (PCM, 16), (PCM, 24), (PCM, 32), (IEEE_FLOAT, 32), (IEEE_FLOAT, 64)}


def _fail(path, field, what):
    raise FormatError(f"{path}: WAV {field}: {what}", path=path, field=field)


def is_wav(head):
    """Whether the first 12 bytes of a file are a RIFF/WAVE header."""
    return len(head) >= 12 and head[:4] == b"RIFF" and head[8:12] == b"WAVE"


def _parse_fmt(path, data, offset, size):
    if size < 16:
        _fail(path, "fmt chunk", f"is {size} bytes, needs at least 16")
    code, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", data, offset)
    if code == EXTENSIBLE:
        if size < 40:
            _fail(path, "fmt chunk", f"WAVE_FORMAT_EXTENSIBLE needs 40 bytes, has {size}")
        guid = bytes(data[offset + 24 : offset + 40])
        if guid[2:] != _GUID_TAIL:
            _fail(path, "fmt SubFormat", f"unknown sub-format GUID {guid.hex()}")
        code = struct.unpack_from("<H", guid)[0]
    if channels == 0:
        _fail(path, "fmt channels", "is 0")
    if rate == 0:
        _fail(path, "fmt sample rate", "is 0")
    if (code, bits) not in _SUPPORTED:
        known = ", ".join(
            f"{'PCM' if c == PCM else 'float'} {b}-bit" for c, b in sorted(_SUPPORTED)
        )
        _fail(
            path,
            "fmt encoding",
            f"format code {code} with {bits} bits is not read (ember reads {known})",
        )
    if block_align != channels * bits // 8:
        _fail(
            path,
            "fmt block align",
            f"is {block_align}, but {channels} channels of {bits} bits need {channels * bits // 8}",
        )
    return code, channels, rate, bits


def _decode(raw, code, bits):
    if code == IEEE_FLOAT:
        return np.frombuffer(raw, "<f4" if bits == 32 else "<f8").astype(np.float32)
    if bits == 8:  # 8-bit PCM is unsigned, centred on 128
        return (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    if bits == 24:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        return v.astype(np.float32) / float(1 << 23)
    kind = {16: "<i2", 32: "<i4"}[bits]
    return (np.frombuffer(raw, kind).astype(np.float64) / float(1 << (bits - 1))).astype(np.float32)


class WavReader:
    """An open WAV file read a block of frames at a time: `rate`, `channels`, `frames`
    (stated by the header and checked against the file's size), `read(n)` -> float32
    [<= n, channels]. Only the chunk headers and the fmt chunk are read on opening."""

    def __init__(self, path):
        self.path = path = os.fspath(path)
        self._fh = open(path, "rb")  # noqa: SIM115 (closed by close() / the with block)
        try:
            self._open()
        except BaseException:
            self._fh.close()
            raise

    def _open(self):
        path, fh = self.path, self._fh
        file_size = os.fstat(fh.fileno()).st_size
        head = fh.read(12)
        if not head:
            _fail(path, "header", "the file is empty (0 bytes)")
        if not is_wav(head):
            _fail(path, "header", "not a WAV file (no RIFF/WAVE header)")
        fmt = audio = None
        pos = 12
        while pos + 8 <= file_size:
            fh.seek(pos)
            cid, size = struct.unpack("<4sI", fh.read(8))
            offset = pos + 8
            if cid == b"fmt ":
                if offset + size > file_size:
                    _fail(path, "fmt chunk", "runs past the end of the file (truncated?)")
                fmt = _parse_fmt(path, fh.read(min(size, _FMT_READ)), 0, size)
            elif cid == b"data":
                audio = (offset, size)
                break
            pos = offset + size + (size & 1)  # chunks are padded to an even size
        if fmt is None:
            _fail(path, "fmt chunk", "missing (or after the data chunk)")
        if audio is None:
            _fail(path, "data chunk", "missing")
        self._code, self.channels, self.rate, self._bits = fmt
        offset, size = audio
        have = file_size - offset
        if size > have:
            _fail(
                path,
                "data size",
                f"the header says {size} bytes of samples but the file holds {have} after the "
                f"header (truncated, or the header lies about its size)",
            )
        if size == 0:
            _fail(path, "data size", "the file holds no samples (zero-length audio)")
        self._frame = self.channels * self._bits // 8
        if size % self._frame:
            _fail(
                path,
                "data size",
                f"{size} bytes is not a whole number of {self._frame}-byte frames "
                f"({self.channels} channels x {self._bits} bits): truncated?",
            )
        self.frames = size // self._frame
        self._left = self.frames
        fh.seek(offset)

    def read(self, n):
        """The next at most `n` frames, float32 [k, channels]; k == 0 at the end."""
        want = min(int(n), self._left)
        raw = self._fh.read(want * self._frame)
        if len(raw) != want * self._frame:  # the file shrank after it was opened
            _fail(self.path, "data", "the file ends before the samples its header states")
        self._left -= want
        samples = _decode(raw, self._code, self._bits).reshape(-1, self.channels)
        if self._code == IEEE_FLOAT and not np.isfinite(samples).all():
            _fail(self.path, "data", "float samples include NaN or infinity")
        return samples

    def close(self):
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_wav(path):
    """(samples float32 [frames, channels], sample_rate) of the WAV file at `path`."""
    with WavReader(path) as wav:
        return wav.read(wav.frames), wav.rate
