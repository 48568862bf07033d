"""safetensors: pure-Python header parsing, zero-copy CPU tensors, streaming uploads.

File layout (all little-endian):

    header length n: u64 | n bytes of UTF-8 JSON (padded with spaces) | data section

The JSON object maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
(offsets relative to the data section) and may hold "__metadata__": {str: str}. The
tensors' byte ranges must tile the data section exactly: no gap, no overlap, no
trailing bytes (the reference library refuses those files too).

On the CPU a tensor's storage is a numpy view of the file's read-only `mmap`: nothing
is read until it is used, and the mapping lives as long as any tensor references it.
Other devices get each tensor uploaded straight from the mapped (or given) bytes, one at
a time, so peak host memory stays near one tensor, not the whole file. Loading from an
in-memory buffer (`load_safetensors_bytes`, what a browser has after `fetch`) needs no
numpy unless the target device is the CPU.

Every number read from the file is checked against the file's size before it is used,
so a malformed file raises `FormatError` naming the file, the tensor and the field; it
never makes the reader allocate without bound, loop, or crash.
"""

import contextlib
import json
import os
import struct
import sys

from .. import dtype as dt
from ..errors import FormatError, UnsupportedDType, fmt_shape
from .files import open_regular

# The reference library refuses headers above 100 MB; a header length beyond the file
# is refused before anything is read, so a corrupt length never allocates.
MAX_HEADER_BYTES = 100_000_000
ALIGNMENT = 8  # the header is padded so the data section starts 8-byte aligned
# numpy's limits, which every CPU tensor meets: at most 64 dimensions, and a size in bytes
# (counting a zero dimension as one, as numpy does) below 2^63.
MAX_DIMS = 64
MAX_ARRAY_BYTES = (1 << 63) - 1

# Every safetensors dtype, with its size in bits (sub-byte float formats exist).
FILE_DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

if sys.byteorder != "little":  # pragma: no cover - every platform ember targets is LE
    raise ImportError("ember.io.safetensors maps files directly and needs a little-endian host")


class UnsupportedFileDType(FormatError, UnsupportedDType):
    """A valid safetensors dtype that ember has no dtype for (I16, U64, F8_*...)."""


class TensorInfo:
    """Where one tensor lives in the file, as its header entry says."""

    __slots__ = ("name", "file_dtype", "dtype", "shape", "data_offsets", "data_start")

    def __init__(self, name, file_dtype, dtype, shape, data_offsets, data_start):
        self.name = name
        self.file_dtype = file_dtype  # the header's name, e.g. "BOOL"
        self.dtype = dtype  # the ember dtype, or None when ember has none
        self.shape = shape
        self.data_offsets = data_offsets  # (begin, end) relative to the data section
        self.data_start = data_start  # absolute offset of the data section

    @property
    def file_offsets(self):
        """(begin, end) as absolute byte offsets in the file."""
        return (self.data_start + self.data_offsets[0], self.data_start + self.data_offsets[1])

    @property
    def nbytes(self):
        return self.data_offsets[1] - self.data_offsets[0]

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __repr__(self):
        return (
            f"TensorInfo({self.name!r}, dtype={self.file_dtype}, shape={fmt_shape(self.shape)}, "
            f"data_offsets={list(self.data_offsets)})"
        )


class Header:
    __slots__ = ("tensors", "metadata", "data_start", "data_size")

    def __init__(self, tensors, metadata, data_start, data_size):
        self.tensors = tensors  # name -> TensorInfo, in the file's order
        self.metadata = metadata  # dict of str -> str, or None
        self.data_start = data_start
        self.data_size = data_size


def _fail(source, what, tensor=None, field=None, cls=FormatError):
    where = f"safetensors file {source!r}"
    if tensor is not None:
        where += f", tensor {tensor!r}"
    if field is not None:
        where += f", field {field!r}"
    return cls(f"{where}: {what}", path=source, tensor=tensor, field=field)


def _reject_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def parse_header(buf, size, source):
    """Parse and validate the header of `buf` (an mmap or a memoryview of `size` bytes)."""
    if size < 8:
        raise _fail(
            source,
            f"file is {size} bytes, shorter than the 8-byte header length",
            field="header_length",
        )
    (n,) = struct.unpack("<Q", bytes(buf[0:8]))
    if n > size - 8:
        raise _fail(
            source,
            f"header length {n} runs beyond the file ({size} bytes, so at "
            f"most {size - 8} header bytes); the file is truncated or corrupt",
            field="header_length",
        )
    if n > MAX_HEADER_BYTES:
        raise _fail(
            source,
            f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit",
            field="header_length",
        )
    raw = bytes(buf[8 : 8 + n])
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
    except UnicodeDecodeError as exc:
        raise _fail(source, f"header is not UTF-8 ({exc})", field="header") from None
    except (ValueError, RecursionError) as exc:
        raise _fail(source, f"header is not valid JSON ({exc})", field="header") from None
    if not isinstance(header, dict):
        raise _fail(
            source, f"header is a JSON {type(header).__name__}, not an object", field="header"
        )

    data_start = 8 + n
    data_size = size - data_start
    metadata = header.pop("__metadata__", None)
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        raise _fail(source, "must be an object of string values", field="__metadata__")

    tensors = {}
    for name, entry in header.items():
        tensors[name] = _parse_entry(source, name, entry, data_start)
    _check_tiling(source, tensors, data_size)
    return Header(tensors, metadata, data_start, data_size)


def _parse_entry(source, name, entry, data_start):
    if not isinstance(entry, dict):
        raise _fail(source, f"entry is a JSON {type(entry).__name__}, not an object", name)
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            raise _fail(source, "missing", name, field)
    file_dtype = entry["dtype"]
    if not isinstance(file_dtype, str) or file_dtype not in FILE_DTYPE_BITS:
        raise _fail(
            source,
            f"unknown dtype {file_dtype!r} (safetensors knows {', '.join(FILE_DTYPE_BITS)})",
            name,
            "dtype",
        )
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
        raise _fail(source, f"must be a list of integers, got {shape!r}", name, "shape")
    if len(shape) > MAX_DIMS:
        raise _fail(
            source,
            f"{len(shape)} dimensions, more than the {MAX_DIMS} a tensor may have",
            name,
            "shape",
        )
    if any(d < 0 for d in shape):
        raise _fail(source, f"negative dimension in {shape}", name, "shape")
    offsets = entry["data_offsets"]
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        raise _fail(
            source, f"must be a list of two integers, got {offsets!r}", name, "data_offsets"
        )
    begin, end = offsets
    if begin < 0 or end < begin:
        raise _fail(source, f"[{begin}, {end}] is not a valid byte range", name, "data_offsets")
    numel = 1
    for d in shape:
        numel *= d
    bits = FILE_DTYPE_BITS[file_dtype]
    extent = 1
    for d in shape:
        extent *= max(d, 1)
    if extent * bits > MAX_ARRAY_BYTES * 8:
        raise _fail(
            source,
            f"shape {fmt_shape(shape)} of {file_dtype} is too large to address "
            "(its dimensions, a zero counted as one, exceed 2^63 bytes)",
            name,
            "shape",
        )
    if numel * bits != (end - begin) * 8:
        raise _fail(
            source,
            f"shape {fmt_shape(shape)} of {file_dtype} needs "
            f"{numel * bits / 8:g} bytes but data_offsets [{begin}, {end}] "
            f"hold {end - begin}",
            name,
            "data_offsets",
        )
    return TensorInfo(
        name, file_dtype, dt.from_safetensors(file_dtype), tuple(shape), (begin, end), data_start
    )


def _check_tiling(source, tensors, data_size):
    """The byte ranges must cover the data section exactly once, in any order."""
    for info in tensors.values():
        if info.data_offsets[1] > data_size:
            raise _fail(
                source,
                f"[{info.data_offsets[0]}, {info.data_offsets[1]}] lies outside "
                f"the data section of {data_size} bytes (file truncated?)",
                info.name,
                "data_offsets",
            )
    ordered = sorted(tensors.values(), key=lambda i: i.data_offsets)
    covered, previous = 0, None
    for info in ordered:
        begin, end = info.data_offsets
        if begin < covered:
            raise _fail(
                source,
                f"[{begin}, {end}] overlaps tensor {previous.name!r} {list(previous.data_offsets)}",
                info.name,
                "data_offsets",
            )
        if begin > covered:
            raise _fail(
                source,
                f"[{begin}, {end}] leaves bytes [{covered}, {begin}] of the data "
                f"section to no tensor",
                info.name,
                "data_offsets",
            )
        covered, previous = end, info
    if covered != data_size:
        raise _fail(
            source,
            f"the tensors cover {covered} bytes but the data section holds "
            f"{data_size}: {data_size - covered} trailing bytes belong to no tensor",
            field="data_offsets",
        )


# --- turning header entries into tensors ------------------------------------------------------
def _device(device):
    from ..tensor import _device as resolve

    return resolve(device)


def _check_supported(source, info):
    if info.dtype is None:
        raise _fail(
            source,
            f"dtype {info.file_dtype} has no ember dtype (ember has "
            f"{', '.join(d.safetensors_name for d in dt.ALL)}, BOOL)",
            info.name,
            "dtype",
            cls=UnsupportedFileDType,
        )


def _make_tensor(buf, info, device, dtype, source, after_upload=None):
    """A tensor of `info` read from `buf` (an mmap or a byte memoryview).

    On the CPU the storage is a numpy view of `buf`. Elsewhere the bytes go to the
    backend's `from_host` without numpy; `after_upload(begin, end)` then may drop them."""
    from ..layout import Layout
    from ..tensor import Tensor

    begin, end = info.file_offsets
    dtype = None if dtype is None else dt.as_dtype(dtype)
    convert = dtype is not None and info.dtype.is_float and dtype is not info.dtype
    if device.kind == "cpu":
        import numpy

        storage = numpy.frombuffer(buf, dtype=info.dtype.numpy_name, count=info.numel, offset=begin)
    else:
        # No `with` on the slice: a backend may keep a view of it, and releasing an
        # exported memoryview raises; dropping our reference is enough.
        piece = memoryview(buf)[begin:end]
        try:
            storage = device.backend.from_host(piece, info.dtype, info.shape)
        except UnsupportedDType as exc:
            if not convert:
                hint = "; pass dtype= to convert it while loading" if info.dtype.is_float else ""
                raise _fail(
                    source, f"{exc}{hint}", info.name, "dtype", cls=UnsupportedDType
                ) from None
            # The device lacks the file's dtype (f64 on WebGPU): convert on the host.
            host = _make_tensor(buf, info, _device("cpu"), dtype, source)
            return host.to(device)
        finally:
            del piece
            if after_upload is not None:
                after_upload(begin, end)
    t = Tensor(storage, Layout(info.shape), info.dtype, device)
    return t.to(dtype) if convert else t


class SafetensorsFile:
    """A lazily read safetensors file: the header is parsed on open, tensors on `get`.

        with ember.io.SafetensorsFile("model.safetensors") as f:
            for name in f.keys():
                w = f.get(name, device=dev, dtype=ember.f32)

    CPU tensors are views of the file's mapping and stay valid after `close()`: the
    mapping is released when the last of them is garbage-collected.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        source = self.path
        # A missing file raises MissingFile (a FileNotFoundError); a directory or FIFO
        # FormatError, without blocking on the FIFO.
        with open_regular(self.path, "safetensors file") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 8:
                raise _fail(
                    source,
                    f"file is {size} bytes, shorter than the 8-byte header length",
                    field="header_length",
                )
            import mmap  # here, not at the top: `import ember` must work where it is missing

            try:
                # The mapping keeps its own reference to the file; the handle can close.
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise _fail(source, f"cannot map the file ({exc})") from None
        try:
            self._header = parse_header(self._map, size, source)
        except BaseException:
            self._map.close()
            raise
        self._source = source

    # --- reading ------------------------------------------------------------------------------
    @property
    def metadata(self):
        """The `__metadata__` object (str -> str), or None when the file has none."""
        return None if self._header.metadata is None else dict(self._header.metadata)

    def keys(self):
        """Tensor names, sorted (as the reference library's `safe_open.keys()`)."""
        return sorted(self._header.tensors)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self):
        return len(self._header.tensors)

    def __contains__(self, name):
        return name in self._header.tensors

    def info(self, name):
        """The header entry of `name`: dtype, shape, data_offsets (a TensorInfo)."""
        self._check_name(name)
        return self._header.tensors[name]

    def get(self, name, device=None, dtype=None):
        """Tensor `name` on `device` (default: ember's default device). `dtype` converts
        floating-point tensors (bf16 to f32 is exact); integer tensors keep their dtype."""
        self._check_open()
        info = self.info(name)
        _check_supported(self._source, info)
        device = _device(device)
        return _make_tensor(self._map, info, device, dtype, self._source, self._drop_pages)

    def load(self, device=None, dtype=None):
        """Every tensor, in the file's order, as a dict."""
        self._check_open()
        for info in self._header.tensors.values():
            _check_supported(self._source, info)
        device = _device(device)
        return {
            name: _make_tensor(self._map, info, device, dtype, self._source, self._drop_pages)
            for name, info in self._header.tensors.items()
        }

    def _drop_pages(self, begin, end):
        # After an upload to another device the host pages are dead weight: hand them
        # back so peak RSS stays near one tensor while a large model streams out.
        import mmap

        madvise = getattr(self._map, "madvise", None)
        if madvise is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        start = begin - begin % mmap.PAGESIZE
        if end > start:
            madvise(mmap.MADV_DONTNEED, start, end - start)

    def _check_open(self):
        if self._map is None:
            raise ValueError(f"safetensors file {self._source}: used after close()")

    def _check_name(self, name):
        if name not in self._header.tensors:
            known = self.keys()
            shown = ", ".join(repr(k) for k in known[:8]) + (" ..." if len(known) > 8 else "")
            raise KeyError(
                f"safetensors file {self._source}: no tensor {name!r} "
                f"({len(known)} tensors: {shown})"
            )

    # --- lifetime -----------------------------------------------------------------------------
    def close(self):
        if self._map is None:
            return
        # CPU tensors may still view the mapping; it unmaps when the last one dies
        with contextlib.suppress(BufferError):
            self._map.close()
        self._map = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self._map is None else f"{len(self)} tensors"
        return f"SafetensorsFile({self.path!r}, {state})"


def load_safetensors(path, device=None, dtype=None):
    """All tensors of a safetensors file: a dict name -> Tensor (see SafetensorsFile.get)."""
    with SafetensorsFile(path) as f:
        return f.load(device=device, dtype=dtype)


def load_safetensors_bytes(buf, device=None, dtype=None, name="<bytes>"):
    """All tensors of a safetensors file held in memory (bytes, bytearray, memoryview).

    CPU tensors view `buf` without copying; other devices upload from slices of it, so
    this works without numpy (a browser's fetched ArrayBuffer, for instance)."""
    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    source = name
    header = parse_header(view, len(view), source)
    for info in header.tensors.values():
        _check_supported(source, info)
    device = _device(device)
    return {
        key: _make_tensor(view, info, device, dtype, source) for key, info in header.tensors.items()
    }


def load_safetensors_metadata(path):
    """Only the header: (metadata or None, {name: TensorInfo})."""
    with SafetensorsFile(path) as f:
        return f.metadata, {name: f.info(name) for name in f}


# --- writing ------------------------------------------------------------------------------------
def _plan(tensors, metadata):
    """The header bytes and the tensors in data order."""
    from ..tensor import Tensor

    if not isinstance(tensors, dict):
        raise TypeError(
            f"save_safetensors: expects a dict of name -> Tensor, got {type(tensors).__name__}"
        )
    for key, t in tensors.items():
        if not isinstance(key, str) or key == "__metadata__":
            raise TypeError(
                f"save_safetensors: tensor name {key!r} must be a string other than '__metadata__'"
            )
        if not isinstance(t, Tensor):
            raise TypeError(
                f"save_safetensors: tensor {key!r} is a {type(t).__name__}, not an "
                "ember Tensor (wrap numpy arrays with ember.from_numpy)"
            )
    header = {}
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise TypeError(
                f"save_safetensors: metadata must be a dict of str -> str, got {metadata!r}"
            )
        header["__metadata__"] = dict(metadata)
    # Larger items first, then by name (as the reference writer does): with the 8-byte
    # aligned data section every tensor then starts aligned to its own item size.
    order = sorted(tensors.items(), key=lambda kv: (-kv[1].dtype.itemsize, kv[0]))
    offset = 0
    for key, t in order:
        nbytes = t.numel() * t.dtype.itemsize
        header[key] = {
            "dtype": t.dtype.safetensors_name,
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-(8 + len(text)) % ALIGNMENT)
    return struct.pack("<Q", len(text)) + text, order


def _tensor_bytes(t):
    """The tensor's raw little-endian elements, contiguous, from any device."""
    return t.backend.host_bytes(t.storage, t.layout, t.dtype)


def save_safetensors(tensors, path, metadata=None):
    """Write `tensors` (name -> Tensor, any device, any layout) to `path`, one at a time.

    The file is written beside `path` and renamed into place, so a failure never leaves
    a half-written file under the final name."""
    from ..owned import atomic_file

    head, order = _plan(tensors, metadata)
    with atomic_file(path) as fh:
        fh.write(head)
        for _, t in order:
            fh.write(_tensor_bytes(t))


def save_safetensors_bytes(tensors, metadata=None):
    """The safetensors file of `tensors` as bytes."""
    head, order = _plan(tensors, metadata)
    return b"".join([head] + [bytes(_tensor_bytes(t)) for _, t in order])


__all__ = [
    "SafetensorsFile",
    "TensorInfo",
    "UnsupportedFileDType",
    "load_safetensors",
    "load_safetensors_bytes",
    "load_safetensors_metadata",
    "save_safetensors",
    "save_safetensors_bytes",
]
