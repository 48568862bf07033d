"""Formats other than WAV (mp3, flac, ogg, ...) through an optional native decoder:
`soundfile` (libsndfile) first, then PyAV (FFmpeg's libraries), then an `ffmpeg` program
on PATH. None is a dependency of ember; the error names all three when none is there.
"""

import importlib
import os
import shutil

import numpy as np

from ..errors import EmberError, FormatError


class NoDecoder(EmberError):
    """No optional audio decoder is installed for a non-WAV file."""


def _soundfile(path):
    sf = importlib.import_module("soundfile")
    data, rate = sf.read(path, dtype="float32", always_2d=True)
    return data, rate


def _pyav(path):
    av = importlib.import_module("av")
    with av.open(path) as container:
        stream = container.streams.audio[0]
        rate = stream.rate
        chunks = []
        for frame in container.decode(stream):
            arr = frame.to_ndarray().astype(np.float32)
            # planar frames are (channels, n); packed ones interleave the channels
            planar = frame.format.is_planar
            arr = arr.T if planar else arr.reshape(-1, len(frame.layout.channels))
            if frame.format.name.startswith("s16"):
                arr /= 32768.0
            elif frame.format.name.startswith("s32"):
                arr /= 2147483648.0
            chunks.append(arr)
    if not chunks:
        raise FormatError(f"{path}: no audio frames decoded", path=path, field="data")
    return np.concatenate(chunks), rate


def _ffmpeg(path, program):
    # ffmpeg resamples itself here: mono float32 at 16 kHz on stdout, no file written
    cmd = [program, "-nostdin", "-v", "error", "-i", path, "-f", "f32le", "-ac", "1"]
    cmd += ["-ar", "16000", "-"]
    import subprocess  # here: its import is 19 ms of a cold start that reads a WAV

    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise FormatError(
            f"{path}: ffmpeg could not decode it: {why[-1] if why else done.returncode}",
            path=path,
            field="data",
        )
    return np.frombuffer(done.stdout, "<f4").reshape(-1, 1).copy(), 16000


def available():
    """The names of the decoders found here, in the order they are tried."""
    found = []
    for name, module in (("soundfile", "soundfile"), ("PyAV", "av")):
        try:
            importlib.import_module(module)
            found.append(name)
        except ImportError:
            pass
    if shutil.which("ffmpeg"):
        found.append("ffmpeg")
    return found


def decode(path):
    """(samples float32 [frames, channels], rate, decoder name) for a non-WAV file."""
    path = os.fspath(path)
    for name in available():
        try:
            if name == "soundfile":
                data, rate = _soundfile(path)
            elif name == "PyAV":
                data, rate = _pyav(path)
            else:
                data, rate = _ffmpeg(path, shutil.which("ffmpeg"))
        except (EmberError, ImportError):
            raise
        except Exception as exc:  # the decoder's own error: the file is not audio it reads
            raise FormatError(
                f"{path}: {name} could not decode it ({exc.__class__.__name__}: {exc})",
                path=path,
                field="data",
            ) from None
        return data, rate, name
    ext = os.path.splitext(path)[1] or "(no extension)"
    raise NoDecoder(
        f"{path}: not a WAV file, and reading {ext} audio needs an optional decoder, none "
        f"of which is installed: `pip install soundfile` (libsndfile: flac, ogg, mp3), "
        f"`pip install av` (PyAV, FFmpeg's libraries) or an `ffmpeg` program on PATH",
        path=path,
    )
