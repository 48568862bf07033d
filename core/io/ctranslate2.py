"""CTranslate2 model files (`model.bin`): the variables of a converted model, read-only.

Layout (little-endian), as CTranslate2 writes it (binary version 6):

    version u32 | spec name: string | spec revision u32 | variable count u32
    per variable: name string | rank u8 | dims u32[rank] | dtype u8 | byte count u32 | bytes
    alias count u32 | per alias: alias name string | target variable name string

A string is a u16 byte length then that many bytes, the last one a NUL. Variable bytes
are memory-mapped; every count and length is checked against the file first, so a
malformed file raises FormatError naming the file and field.
"""

import contextlib
import mmap
import os
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError

SUPPORTED_VERSIONS = (6,)
# CTranslate2's DataType codes -> (safetensors dtype name, numpy dtype)
DTYPES = {
    0: ("F32", "<f4"),
    1: ("I8", "i1"),
    2: ("I16", "<i2"),
    3: ("I32", "<i4"),
    4: ("F16", "<f2"),
    5: ("BF16", "<u2"),
}


@dataclass(frozen=True)
class CT2Variable:
    name: str
    dtype: str  # safetensors name
    shape: tuple
    offset: int  # absolute byte offset of the data
    nbytes: int


def _drop_pages(mm, begin, end):
    if mm.closed or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = begin - begin % mmap.PAGESIZE
    if end > start:
        mm.madvise(mmap.MADV_DONTNEED, start, end - start)


class CTranslate2File:
    """`version`, `spec`, `revision`, `variables` (name -> CT2Variable, file order),
    `aliases` (alias -> variable name), `array(name)`."""

    def __init__(self, path):
        self.path = os.fspath(path)
        with open(self.path, "rb") as fh:
            self.size = os.fstat(fh.fileno()).st_size
            if self.size == 0:
                raise FormatError(
                    f"{self.path}: CTranslate2 header: the file is empty",
                    path=self.path,
                    field="version",
                )
            self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._pos = 0
            self._parse()
        except BaseException:
            self._mm.close()
            raise

    def _fail(self, field, what):
        raise FormatError(f"{self.path}: CTranslate2 {field}: {what}", path=self.path, field=field)

    def _take(self, n, field):
        if n > self.size - self._pos:
            self._fail(
                field,
                f"needs {n} bytes at offset {self._pos}, but the file ends at "
                f"{self.size} (truncated?)",
            )
        at = self._pos
        self._pos += n
        return at

    def _int(self, fmt, field):
        at = self._take(struct.calcsize(fmt), field)
        return struct.unpack_from(fmt, self._mm, at)[0]

    def _string(self, field):
        n = self._int("<H", field + " length")
        at = self._take(n, field)
        raw = bytes(self._mm[at : at + n])
        if not raw.endswith(b"\0"):
            self._fail(field, f"string at offset {at} is not NUL-terminated")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            self._fail(field, f"string at offset {at} is not UTF-8")

    def _parse(self):
        self.version = self._int("<I", "version")
        if self.version not in SUPPORTED_VERSIONS:
            self._fail(
                "version",
                f"binary version {self.version} is not supported (ember reads "
                f"{', '.join(map(str, SUPPORTED_VERSIONS))}); is this a "
                "CTranslate2 model.bin?",
            )
        self.spec = self._string("spec name")
        self.revision = self._int("<I", "spec revision")
        count = self._int("<I", "variable count")
        if count * 8 > self.size - self._pos:
            self._fail(
                "variable count",
                f"{count} variables cannot fit in the {self.size - self._pos} bytes left",
            )
        self.variables = {}
        for i in range(count):
            name = self._string(f"variables[{i}].name")
            field = f"variable {name!r}"
            if name in self.variables:
                self._fail(field, "appears twice")
            rank = self._int("<B", field + " rank")
            at = self._take(4 * rank, field + " dims")
            shape = struct.unpack_from(f"<{rank}I", self._mm, at)
            code = self._int("<B", field + " dtype")
            if code not in DTYPES:
                self._fail(
                    field + " dtype",
                    f"unknown data type code {code} (known: "
                    f"{', '.join(f'{k}={v[0]}' for k, v in DTYPES.items())})",
                )
            dtype, np_dtype = DTYPES[code]
            nbytes = self._int("<I", field + " byte count")
            numel = 1
            for d in shape:
                numel *= d
            if numel * np.dtype(np_dtype).itemsize != nbytes:
                self._fail(
                    field + " byte count",
                    f"{nbytes} bytes do not hold shape {list(shape)} of {dtype}",
                )
            offset = self._take(nbytes, field + " data")
            self.variables[name] = CT2Variable(name, dtype, tuple(shape), offset, nbytes)
        self.aliases = {}
        if self._pos < self.size:
            for i in range(self._int("<I", "alias count")):
                alias = self._string(f"aliases[{i}].name")
                target = self._string(f"aliases[{i}].variable")
                if target not in self.variables:
                    self._fail(f"alias {alias!r}", f"names no variable ({target!r})")
                self.aliases[alias] = target
        if self._pos != self.size:
            self._fail("end", f"{self.size - self._pos} trailing bytes after the aliases")

    def array(self, name):
        """Variable `name` (or an alias of one) as a read-only numpy view of the file."""
        v = self.variables[self.aliases.get(name, name)]
        np_dtype = next(d[1] for d in DTYPES.values() if d[0] == v.dtype)
        return np.frombuffer(
            self._mm, dtype=np_dtype, count=v.nbytes // np.dtype(np_dtype).itemsize, offset=v.offset
        ).reshape(v.shape)

    def release(self, name):
        """Hand the pages of variable `name` back to the OS (after it was converted)."""
        v = self.variables[self.aliases.get(name, name)]
        _drop_pages(self._mm, v.offset, v.offset + v.nbytes)

    def release_view(self, array):
        """Hand the pages under `array` back to the OS: a C-contiguous view of this file
        (array() or a row block of one) whose values were copied. Reading it again faults
        them back in from the page cache; anything else is left alone."""
        if self._mm.closed or not array.flags.c_contiguous:
            return
        start = array.ctypes.data - np.frombuffer(self._mm, np.uint8, count=1).ctypes.data
        if start >= 0 and start + array.nbytes <= self.size:
            _drop_pages(self._mm, start, start + array.nbytes)

    def close(self):
        with contextlib.suppress(BufferError):
            self._mm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# --- Whisper (spec "WhisperSpec"): CTranslate2 variable names -> Hugging Face's ---------------
_LN = {"gamma": "weight", "beta": "bias"}


def _split(array, parts):
    """Equal row blocks of a fused weight or bias (views of the file, no copy)."""
    n = array.shape[0] // parts
    return [array[i * n : (i + 1) * n] for i in range(parts)]


def _whisper_attention(f, ct2, hf, names, out, fused_rows):
    """One attention block: `names` are the HF projections the fused linears hold, in
    order (`fused_rows` HF names per CT2 linear); the k bias, which Whisper does not have,
    is left out (CTranslate2 stores zeros there)."""
    layer = 0
    i = 0
    while i < len(names):
        group = names[i : i + fused_rows[layer]]
        w = f.array(f"{ct2}/linear_{layer}/weight")
        b = f.array(f"{ct2}/linear_{layer}/bias")
        for name, wpart, bpart in zip(
            group, _split(w, len(group)), _split(b, len(group)), strict=False
        ):
            out[f"{hf}.{name}.weight"] = wpart
            if name != "k_proj":
                out[f"{hf}.{name}.bias"] = bpart
        i += len(group)
        layer += 1


def whisper_hf_tensors(f):
    """{Hugging Face Whisper name: numpy view} for a CTranslate2 Whisper model.bin, so the
    model loads one set of names whichever format it came in:

    self-attention `linear_0` is q/k/v fused and `linear_1` the output; cross-attention
    (`attention`) `linear_0` is q, `linear_1` k/v fused, `linear_2` the output; the
    feed-forward's `linear_0`/`linear_1` are fc1/fc2; layer norms keep gamma/beta;
    `decoder/projection` aliases the embeddings (the tied proj_out)."""
    if f.spec != "WhisperSpec":
        raise FormatError(
            f"{f.path}: CTranslate2 spec is {f.spec!r}, not a Whisper model (WhisperSpec)",
            path=f.path,
            field="spec name",
        )
    out = {}

    def norm(ct2, hf):
        for k, v in _LN.items():
            out[f"{hf}.{v}"] = f.array(f"{ct2}/{k}")

    def ffn(ct2, hf):
        norm(f"{ct2}/layer_norm", f"{hf}.final_layer_norm")
        for i, fc in enumerate(("fc1", "fc2")):
            out[f"{hf}.{fc}.weight"] = f.array(f"{ct2}/linear_{i}/weight")
            out[f"{hf}.{fc}.bias"] = f.array(f"{ct2}/linear_{i}/bias")

    qkv_o = ("q_proj", "k_proj", "v_proj", "out_proj")
    for side in ("encoder", "decoder"):
        i = 0
        while f"{side}/layer_{i}/self_attention/linear_0/weight" in f.variables:
            ct2, hf = f"{side}/layer_{i}", f"model.{side}.layers.{i}"
            norm(f"{ct2}/self_attention/layer_norm", f"{hf}.self_attn_layer_norm")
            _whisper_attention(f, f"{ct2}/self_attention", f"{hf}.self_attn", qkv_o, out, (3, 1))
            if side == "decoder":
                norm(f"{ct2}/attention/layer_norm", f"{hf}.encoder_attn_layer_norm")
                _whisper_attention(
                    f, f"{ct2}/attention", f"{hf}.encoder_attn", qkv_o, out, (1, 2, 1)
                )
            ffn(f"{ct2}/ffn", hf)
            i += 1
        norm(f"{side}/layer_norm", f"model.{side}.layer_norm")
        out[f"model.{side}.embed_positions.weight"] = f.array(
            f"{side}/position_encodings/encodings"
        )
    for conv in ("conv1", "conv2"):
        for k in ("weight", "bias"):
            out[f"model.encoder.{conv}.{k}"] = f.array(f"encoder/{conv}/{k}")
    out["model.decoder.embed_tokens.weight"] = f.array("decoder/embeddings/weight")
    return out


def scalar(f, name, default=None):
    """A rank-0 variable (a spec setting such as encoder/num_heads) as a Python int."""
    if name not in f.variables:
        return default
    return int(f.array(name).reshape(()))


__all__ = ["CT2Variable", "CTranslate2File", "scalar", "whisper_hf_tensors"]
