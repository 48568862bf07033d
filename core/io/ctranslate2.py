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

    def close(self):
        with contextlib.suppress(BufferError):
            self._mm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["CT2Variable", "CTranslate2File"]
