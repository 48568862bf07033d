"""A pure-Python GGUF reader over a read-only memory map.

Layout (little-endian; versions 2 and 3):

    magic "GGUF" | version u32 | tensor_count u64 | metadata_kv_count u64
    metadata_kv_count x (key: string, value_type: u32, value)
    tensor_count x (name: string, n_dims: u32, ne: u64[n_dims], ggml_type: u32, offset: u64)
    padding to `general.alignment` (default 32)
    tensor data; each tensor at data_start + offset, offset a multiple of the alignment

A string is a u64 byte length then UTF-8 bytes; an array is element value_type
u32, count u64, then the elements (which may be strings or arrays again).

Everything read from the file is checked against the file before it is used:
every count is bounded by the bytes left (each element takes at least one
byte), so a malformed file raises ``FormatError`` naming the file and field,
and never makes the reader loop or allocate without end.
"""

import contextlib
import enum
import mmap
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError
from ..intmath import ceil_div
from .files import open_regular
from .quant import BLOCK_SIZES, GGMLType, QTensor
from .quant import dequantize as _dequantize

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 64  # arrays of arrays nest at most this deep
_I64_MAX = (1 << 63) - 1
# Top-level metadata arrays of at least this many elements are checked when the file
# opens but read into Python objects only when asked for (GGUFMetadata): a tokenizer's
# token and merge lists are ~10^5 strings, ~9 MiB as Python objects, which loading the
# model alone never needs.
LAZY_ARRAY_MIN = 1024


class GGUFValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# fixed-size value types: little-endian numpy dtype
_SCALAR = {
    GGUFValueType.UINT8: np.dtype("u1"),
    GGUFValueType.INT8: np.dtype("i1"),
    GGUFValueType.UINT16: np.dtype("<u2"),
    GGUFValueType.INT16: np.dtype("<i2"),
    GGUFValueType.UINT32: np.dtype("<u4"),
    GGUFValueType.INT32: np.dtype("<i4"),
    GGUFValueType.FLOAT32: np.dtype("<f4"),
    GGUFValueType.BOOL: np.dtype("u1"),
    GGUFValueType.UINT64: np.dtype("<u8"),
    GGUFValueType.INT64: np.dtype("<i8"),
    GGUFValueType.FLOAT64: np.dtype("<f8"),
}
_STRUCT = {
    GGUFValueType.UINT8: struct.Struct("<B"),
    GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"),
    GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"),
    GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"),
    GGUFValueType.BOOL: struct.Struct("<B"),
    GGUFValueType.UINT64: struct.Struct("<Q"),
    GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}
assert all(_STRUCT[t].size == d.itemsize for t, d in _SCALAR.items())
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
# the fewest bytes one element of each kind can take: bounds counts before loops
_MIN_STRING = 8
_MIN_ARRAY = 4 + 8
_MIN_KV = _MIN_STRING + 4 + 1
_MIN_TENSOR_INFO = _MIN_STRING + 4 + 4 + 8


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One tensor of a GGUF file.

    ``shape`` is in numpy/PyTorch order: ggml's ``ne`` reversed, so the last
    axis is ggml's contiguous ``ne0``. ``offset`` is the absolute byte offset of
    the tensor's data in the file (the data section's start plus the offset the
    file stores); ``nbytes`` is its size in bytes.
    """

    name: str
    shape: tuple
    ggml_type: GGMLType
    offset: int
    nbytes: int

    @property
    def n_elements(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


class _Reader:
    """A bounds-checked cursor over the file's bytes."""

    def __init__(self, buf, size, path):
        self.buf = buf
        self.size = size
        self.path = path
        self.pos = 0

    def fail(self, field, problem, **details):
        raise FormatError(
            f"{self.path}: GGUF {field}: {problem}", path=self.path, field=field, **details
        )

    def need(self, n, field):
        if n > self.size - self.pos:
            self.fail(
                field,
                f"file truncated: needs {n} bytes at offset {self.pos}, "
                f"but the file ends at {self.size}",
                offset=self.pos,
            )

    def u32(self, field):
        self.need(4, field)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self, field):
        self.need(8, field)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return v

    def count(self, field, min_each, what):
        """A u64 element count, checked against what the rest of the file can hold."""
        at = self.pos
        n = self.u64(field)
        left = self.size - self.pos
        if n * min_each > left:
            self.fail(
                field,
                f"{what} count {n} (at offset {at}) is impossible: the {left} bytes left "
                f"in the file hold at most {left // min_each}",
                offset=at,
                count=n,
            )
        return n

    def bytes_(self, field):
        at = self.pos
        n = self.u64(field + " length")
        if n > self.size - self.pos:
            self.fail(
                field,
                f"string length {n} (at offset {at}) runs past the end of the file "
                f"({self.size - self.pos} bytes left)",
                offset=at,
                length=n,
            )
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b

    def strings(self, n, field):
        """``n`` strings in a row (token lists run to 10^5 and more: kept tight)."""
        out = []
        self._walk_strings(n, field, out.append)
        return out

    def skip_strings(self, n, field):
        """Check the lengths of ``n`` strings in a row against the file and step over them
        without decoding (GGUFMetadata decodes them when asked)."""
        self._walk_strings(n, field, None)

    def _walk_strings(self, n, field, append):
        """Step over ``n`` length-prefixed strings, each checked against the file; each one
        decoded (UTF-8, else its bytes) and handed to ``append`` unless that is None."""
        buf, size, pos = self.buf, self.size, self.pos
        unpack = _U64.unpack_from
        for i in range(n):
            if size - pos < 8:
                self.pos = pos
                self.need(8, f"{field}[{i}] length")
            (k,) = unpack(buf, pos)
            pos += 8
            if k > size - pos:
                self.pos = pos - 8
                self.fail(
                    f"{field}[{i}]",
                    f"string length {k} (at offset {pos - 8}) runs past the end "
                    f"of the file ({size - pos} bytes left)",
                    offset=pos - 8,
                    length=k,
                )
            if append is not None:
                b = buf[pos : pos + k]
                try:
                    append(b.decode("utf-8"))
                except UnicodeDecodeError:
                    append(b)
            pos += k
        self.pos = pos

    def text(self, field):
        """A string that must be UTF-8 (keys, tensor names)."""
        at = self.pos
        b = self.bytes_(field)
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError as e:
            self.fail(field, f"string at offset {at} is not valid UTF-8 ({e.reason})", offset=at)

    def scalars(self, et, n):
        """``n`` values of the fixed-size type ``et`` in a row (checked by the caller), as
        a list."""
        arr = np.frombuffer(self.buf, dtype=_SCALAR[et], count=n, offset=self.pos)
        self.pos += n * _SCALAR[et].itemsize
        return (arr != 0).tolist() if et == GGUFValueType.BOOL else arr.tolist()

    def value_type(self, field):
        at = self.pos
        t = self.u32(field)
        try:
            return GGUFValueType(t)
        except ValueError:
            self.fail(
                field,
                f"unknown value type {t} at offset {at} (known: 0..{max(GGUFValueType)})",
                offset=at,
                value_type=t,
            )

    def value(self, t, field, depth=0, lazy=False):
        """One value of type ``t``: python scalar, str (bytes when not UTF-8), or list.
        With ``lazy``, an array of scalars or strings of at least LAZY_ARRAY_MIN elements
        is checked and stepped over, and a _Deferred returned in its place."""
        if t in _STRUCT:
            s = _STRUCT[t]
            self.need(s.size, field)
            (v,) = s.unpack_from(self.buf, self.pos)
            self.pos += s.size
            return bool(v) if t == GGUFValueType.BOOL else v
        if t == GGUFValueType.STRING:
            b = self.bytes_(field)
            try:
                return b.decode("utf-8")
            except UnicodeDecodeError:
                return b
        # ARRAY
        if depth >= MAX_ARRAY_DEPTH:
            self.fail(field, f"arrays nested deeper than {MAX_ARRAY_DEPTH} levels", offset=self.pos)
        et = self.value_type(field + " element type")
        if et in _SCALAR:
            dt = _SCALAR[et]
            n = self.count(field + " count", dt.itemsize, "array element")
            if lazy and n >= LAZY_ARRAY_MIN:
                at, self.pos = self.pos, self.pos + n * dt.itemsize
                return _Deferred(et, n, at, field)
            return self.scalars(et, n)
        if et == GGUFValueType.STRING:
            n = self.count(field + " count", _MIN_STRING, "array element")
            if lazy and n >= LAZY_ARRAY_MIN:
                at = self.pos
                self.skip_strings(n, field)
                return _Deferred(et, n, at, field)
            return self.strings(n, field)
        n = self.count(field + " count", _MIN_ARRAY, "array element")
        out = []
        for i in range(n):
            sub = f"{field}[{i}]"
            out.append(self.value(GGUFValueType.ARRAY, sub, depth + 1))
        return out


@dataclass(frozen=True)
class _Deferred:
    """Where a long metadata array lies: n elements of type ``et`` from offset ``at``
    (bounds already checked)."""

    et: GGUFValueType
    n: int
    at: int
    field: str


class GGUFMetadata(Mapping):
    """A GGUF file's metadata, key -> Python value (arrays as lists), in file order.

    Long arrays (LAZY_ARRAY_MIN elements or more: a tokenizer's tokens, merges, scores)
    were checked against the file when it opened, but are read into Python objects only
    when first asked for, and kept until ``release_arrays()``; the rest is read at
    open. Everything else behaves as the dict it was."""

    def __init__(self, values, reader):
        self._values = values
        self._reader = reader  # a _Reader over the memory map (None once closed)
        self._read = {}  # key -> list read from a _Deferred

    def __getitem__(self, key):
        value = self._values[key]
        if not isinstance(value, _Deferred):
            return value
        got = self._read.get(key)
        if got is None:  # (GGUFFile.close reads every one first: the reader is open here)
            r = self._reader
            r.pos = value.at
            if value.et == GGUFValueType.STRING:
                got = r.strings(value.n, value.field)
            else:
                got = r.scalars(value.et, value.n)
            self._read[key] = got
        return got

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def __repr__(self):
        return repr(dict(self))

    def release_arrays(self):
        """Drop the long arrays read so far (they are read again when asked for)."""
        self._read.clear()

    def _read_all(self):
        """Read every long array now (before the memory map closes)."""
        for key, value in self._values.items():
            if isinstance(value, _Deferred):
                self._values[key] = self[key]
        self._read.clear()
        self._reader = None


class GGUFFile:
    """A GGUF file opened read-only through a memory map.

    Attributes: ``path``, ``version``, ``metadata`` (a GGUFMetadata: key -> python
    value, arrays as lists, long ones read when first asked for), ``metadata_types``
    (key -> GGUFValueType of the stored value),
    ``tensors`` (name -> GGUFTensorInfo, in file order), ``alignment``,
    ``data_offset`` (where the tensor data section starts).
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self._mm = None
        # A missing file raises MissingFile (a FileNotFoundError); a directory or FIFO
        # FormatError, without blocking on the FIFO.
        with open_regular(self.path, "GGUF file") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise FormatError(
                    f"{self.path}: GGUF header.magic: file truncated: the file is empty",
                    path=self.path,
                    field="header.magic",
                )
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse(mm, size)
        except BaseException:
            mm.close()
            raise
        self._mm = mm
        self.size = size

    # --- parsing -----------------------------------------------------------

    def _parse(self, mm, size):
        r = _Reader(mm, size, self.path)
        r.need(4, "header.magic")
        magic = bytes(mm[0:4])
        if magic != GGUF_MAGIC:
            r.fail(
                "header.magic",
                f"expected {GGUF_MAGIC!r}, got {magic!r}: not a GGUF file",
                magic=magic,
            )
        r.pos = 4
        version = r.u32("header.version")
        if version not in SUPPORTED_VERSIONS:
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            if swapped in SUPPORTED_VERSIONS or swapped == 1:
                r.fail(
                    "header.version",
                    f"version {swapped} in big-endian byte order: "
                    f"big-endian GGUF files are not supported",
                    version=version,
                )
            r.fail(
                "header.version",
                f"unsupported version {version} "
                f"(supported: {', '.join(map(str, SUPPORTED_VERSIONS))})",
                version=version,
            )
        self.version = version

        at = r.pos
        n_tensors = r.u64("header.tensor_count")
        n_kv = r.u64("header.metadata_kv_count")
        left = size - r.pos
        if n_tensors * _MIN_TENSOR_INFO > left:
            r.fail(
                "header.tensor_count",
                f"tensor_count {n_tensors} (at offset {at}) is impossible: "
                f"the {left} bytes left hold at most {left // _MIN_TENSOR_INFO} "
                f"tensor infos",
                count=n_tensors,
            )
        if n_kv * _MIN_KV + n_tensors * _MIN_TENSOR_INFO > left:
            r.fail(
                "header.metadata_kv_count",
                f"metadata_kv_count {n_kv} (at offset {at + 8}) is impossible: "
                f"with {n_tensors} tensor infos, the {left} bytes left hold at "
                f"most {(left - n_tensors * _MIN_TENSOR_INFO) // _MIN_KV} "
                f"key-value pairs",
                count=n_kv,
            )

        metadata, types = {}, {}
        for i in range(n_kv):
            key_at = r.pos
            key = r.text(f"metadata[{i}].key")
            if key in metadata:
                r.fail(f"metadata[{i}].key", f"duplicate key {key!r} at offset {key_at}", key=key)
            field = f"metadata[{key!r}]"
            t = r.value_type(field + ".value_type")
            metadata[key] = r.value(t, field + ".value", lazy=True)
            types[key] = t
        self.metadata = GGUFMetadata(metadata, _Reader(mm, size, self.path))
        self.metadata_types = types

        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if "general.alignment" in metadata:
            t = types["general.alignment"]
            if t != GGUFValueType.UINT32:
                r.fail(
                    "general.alignment",
                    f"must be of type UINT32, got {t.name}",
                    alignment=alignment,
                )
            if alignment == 0 or alignment & (alignment - 1):
                r.fail(
                    "general.alignment",
                    f"must be a non-zero power of two, got {alignment}",
                    alignment=alignment,
                )
        self.alignment = alignment

        infos = []
        names = set()
        for i in range(n_tensors):
            name = r.text(f"tensor_infos[{i}].name")
            field = f"tensors[{name!r}]"
            if name in names:
                r.fail(field + ".name", f"duplicate tensor name {name!r}", name=name)
            names.add(name)
            at = r.pos
            n_dims = r.u32(field + ".n_dims")
            if n_dims > MAX_DIMS:
                r.fail(
                    field + ".n_dims",
                    f"n_dims {n_dims} (at offset {at}) exceeds the maximum {MAX_DIMS}",
                    n_dims=n_dims,
                )
            ne = []
            for d in range(n_dims):
                at = r.pos
                v = r.u64(f"{field}.dims[{d}]")
                if v > _I64_MAX:
                    r.fail(
                        f"{field}.dims[{d}]",
                        f"dimension {v} (at offset {at}) is out of range",
                        dim=v,
                    )
                ne.append(v)
            at = r.pos
            code = r.u32(field + ".ggml_type")
            try:
                gt = GGMLType(code)
            except ValueError:
                r.fail(
                    field + ".ggml_type",
                    f"unknown ggml type {code} (at offset {at})",
                    ggml_type=code,
                )
            block, tsize = BLOCK_SIZES[gt]
            row = ne[0] if ne else 1
            if row % block:
                r.fail(
                    field + ".dims[0]",
                    f"row length {row} is not a multiple of the {gt.name} block size {block}",
                    dim=row,
                )
            n = 1
            for v in ne:
                n *= v
            at = r.pos
            off = r.u64(field + ".offset")
            if off % alignment:
                r.fail(
                    field + ".offset",
                    f"offset {off} (at offset {at}) is not a multiple of the alignment {alignment}",
                    offset=off,
                )
            infos.append((name, tuple(reversed(ne)), gt, off, n // block * tsize, field))

        data_offset = ceil_div(r.pos, alignment) * alignment
        self.data_offset = data_offset
        tensors = {}
        for name, shape, gt, off, nbytes, field in infos:
            start = data_offset + off
            if start + nbytes > size:
                r.fail(
                    field + ".offset",
                    f"tensor data [{start}, {start + nbytes}) lies outside the file: its data "
                    f"ends at offset {size} (truncated, or joined from too few parts?)",
                    offset=off,
                    nbytes=nbytes,
                )
            tensors[name] = GGUFTensorInfo(name, shape, gt, start, nbytes)
        self.tensors = tensors

    # --- access ------------------------------------------------------------

    def _info(self, name):
        if self._mm is None:
            raise ValueError(f"{self.path}: GGUF file is closed")
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor named {name!r}") from None

    def raw(self, name):
        """The tensor's bytes: a read-only uint8 view of the memory map (no copy)."""
        info = self._info(name)
        return np.frombuffer(self._mm, dtype=np.uint8, count=info.nbytes, offset=info.offset)

    def dequantize(self, name):
        """The tensor as a new float32 array of its shape."""
        info = self._info(name)
        return _dequantize(self.raw(name), info.ggml_type, info.shape)

    def qtensor(self, name):
        """The tensor as a QTensor over the memory map (no copy)."""
        info = self._info(name)
        return QTensor(self.raw(name), info.ggml_type, info.shape)

    def release_header_pages(self):
        """Take the memory map's pages before the tensor data (the metadata, mostly a
        tokenizer's strings: 1.7 MiB of SmolLM2's file) out of this process's memory once
        they have been read: a model over the file needs only its tensors. Reading the
        metadata again faults them back in from the file. Does nothing where the
        platform has no madvise."""
        dontneed = getattr(mmap, "MADV_DONTNEED", None)
        length = self.data_offset // mmap.PAGESIZE * mmap.PAGESIZE
        if self._mm is None or dontneed is None or not hasattr(self._mm, "madvise") or not length:
            return
        self._mm.madvise(dontneed, 0, length)

    def close(self):
        """Release the memory map. Arrays still viewing it keep it mapped until they are
        freed; the metadata's long arrays are read first, so it stays whole."""
        mm, self._mm = self._mm, None
        if mm is not None:
            self.metadata._read_all()
            # views from raw() may be alive; the map goes when they do
            with contextlib.suppress(BufferError):
                mm.close()

    @property
    def closed(self):
        return self._mm is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self.tensors)} tensors"
        return f"GGUFFile({self.path!r}, v{getattr(self, 'version', '?')}, {state})"
