"""Any weights file ember reads, as one list of tensor entries (for inspect/convert).

`open_weights(path)` recognises the format by its first bytes (never by the name alone):
safetensors (a file, or a directory of shards with an index), GGUF, npz/npy, CTranslate2
`model.bin` and PyTorch checkpoints (zip or legacy, through the restricted unpickler).
Each entry reads its tensor only when asked, so walking a model holds one tensor at a
time. `dtype` is a safetensors dtype name (F32, BF16, I64, ...) or, for GGUF, the ggml
type name (Q4_K, ...).
"""

import contextlib
import json
import mmap
import os
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ..errors import FormatError
from .quant import GGMLType, dequantize

FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
_NUMPY = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "BF16": "<u2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "BOOL": "u1",
    "U16": "<u2",
    "U32": "<u4",
    "U64": "<u8",
}


@dataclass
class Entry:
    name: str
    shape: tuple
    dtype: str
    nbytes: int
    read: object = field(repr=False)  # () -> numpy array (BF16 as uint16, ggml blocks as uint8)
    # () -> None: hand the read pages back to the OS (a memory-mapped input's RSS would
    # otherwise grow to the whole model as a conversion walks it)
    release: object = field(default=lambda: None, repr=False)

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= int(d)
        return n

    @property
    def is_float(self):
        return self.dtype in FLOAT_DTYPES or (
            self.dtype in GGMLType.__members__ and self.dtype not in ("I8", "I16", "I32", "I64")
        )


@dataclass
class Weights:
    path: str
    format: str
    entries: list
    metadata: dict
    closers: list = field(default_factory=list, repr=False)

    def close(self):
        for close in self.closers:
            close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def to_f32(entry, array):
    """The entry's values as float32 (quantized blocks dequantized)."""
    if entry.dtype == "F32":
        return array
    if entry.dtype == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    if entry.dtype in ("F16", "F64"):
        return array.astype(np.float32)
    if entry.dtype in GGMLType.__members__:
        return dequantize(array, GGMLType[entry.dtype], entry.shape)
    raise FormatError(
        f"{entry.name}: dtype {entry.dtype} is not a floating-point type", tensor=entry.name
    )


def detect(path):
    """'safetensors', 'gguf', 'npz', 'npy', 'ctranslate2' or 'torch'; FormatError otherwise."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return "safetensors-dir"
    with open(path, "rb") as fh:
        head = fh.read(16)
    if not head:
        raise FormatError(f"{path}: the file is empty; no weights format recognised", path=path)
    if head[:4] == b"GGUF":
        return "gguf"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    if head[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        raise FormatError(
            f"{path}: a zip archive that is neither a PyTorch checkpoint nor an npz", path=path
        )
    if len(head) >= 9 and head[8:9] == b"{":
        return "safetensors"
    if head[:2] in (b"\x80\x02", b"\x80\x04", b"\x80\x05"):
        return "torch"  # the legacy format starts with a pickle
    if len(head) >= 6 and head[:4] == b"\x06\0\0\0":
        return "ctranslate2"
    raise FormatError(
        f"{path}: unknown weights format (first bytes {head[:8].hex()}); ember "
        "reads safetensors, GGUF, npz/npy, CTranslate2 model.bin and PyTorch "
        "checkpoints",
        path=path,
    )


def open_weights(path):
    path = os.fspath(path)
    kind = detect(path)
    return {
        "safetensors": _safetensors,
        "safetensors-dir": _safetensors_dir,
        "gguf": _gguf,
        "npz": _npz,
        "npy": _npz,
        "ctranslate2": _ct2,
        "torch": _torch,
    }[kind](path)


def _mapped(path):
    with open(path, "rb") as fh:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def _dropper(mm, begin, end):
    from .ctranslate2 import _drop_pages

    return lambda: _drop_pages(mm, begin, end)


def _safetensors_entries(path):
    from .safetensors import SafetensorsFile

    with SafetensorsFile(path) as f:
        meta = f.metadata or {}
        infos = [f.info(name) for name in f]
    mm = _mapped(path)

    def reader(info):
        begin, _ = info.file_offsets
        return lambda: np.frombuffer(
            mm, dtype=_NUMPY[info.file_dtype], count=info.numel, offset=begin
        ).reshape(info.shape)

    for info in infos:
        if info.file_dtype not in _NUMPY:
            raise FormatError(
                f"{path}: tensor {info.name!r} has dtype {info.file_dtype}, "
                "which ember cannot convert",
                path=path,
                tensor=info.name,
            )
    entries = [
        Entry(
            i.name, tuple(i.shape), i.file_dtype, i.nbytes, reader(i), _dropper(mm, *i.file_offsets)
        )
        for i in infos
    ]
    return entries, meta, mm


def _safetensors(path):
    entries, meta, mm = _safetensors_entries(path)
    return Weights(path, "safetensors", entries, dict(meta), [lambda: _close(mm)])


def _safetensors_dir(path):
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as fh:
            weight_map = json.load(fh).get("weight_map", {})
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    if not files:
        raise FormatError(f"{path}: a directory without safetensors files", path=path)
    entries, meta, maps = [], {}, []
    for name in files:
        full = os.path.realpath(os.path.join(path, name))
        if os.path.dirname(full) != os.path.realpath(path):
            raise FormatError(f"{index}: shard {name!r} lies outside the directory", path=index)
        e, m, mm = _safetensors_entries(full)
        entries += e
        meta.update(m)
        maps.append(mm)
    return Weights(path, "safetensors", entries, meta, [lambda: [_close(m) for m in maps]])


def _close(mm):
    # arrays may still view it; it unmaps when they go
    with contextlib.suppress(BufferError):
        mm.close()


def _gguf(path):
    from .gguf import GGUFFile

    f = GGUFFile(path)
    plain = {
        GGMLType.F32: "<f4",
        GGMLType.F16: "<f2",
        GGMLType.BF16: "<u2",
        GGMLType.I8: "i1",
        GGMLType.I16: "<i2",
        GGMLType.I32: "<i4",
        GGMLType.I64: "<i8",
        GGMLType.F64: "<f8",
    }

    mm = _mapped(path)  # our own map of the tensor data, whose pages we may drop

    def reader(info):
        def raw():
            return np.frombuffer(mm, np.uint8, count=info.nbytes, offset=info.offset)

        if info.ggml_type in plain:
            return lambda: raw().view(plain[info.ggml_type]).reshape(info.shape)
        return raw

    entries = [
        Entry(
            i.name,
            tuple(i.shape),
            i.ggml_type.name,
            i.nbytes,
            reader(i),
            _dropper(mm, i.offset, i.offset + i.nbytes),
        )
        for i in f.tensors.values()
    ]
    meta = dict(f.metadata)
    f.close()
    w = Weights(path, "gguf", entries, meta, [lambda: _close(mm)])
    w.gguf_types = dict(f.metadata_types)
    return w


def _npy_header(fh):
    """(shape, dtype) from an .npy stream's header, without reading its data."""
    version = np.lib.format.read_magic(fh)
    shape, _fortran, dtype = (
        np.lib.format.read_array_header_1_0(fh)
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0(fh)
    )
    return tuple(shape), dtype


def _npz(path):
    members = {}
    try:
        if detect(path) == "npy":
            with open(path, "rb") as fh:
                members["arr_0"] = _npy_header(fh)
            data = None
        else:
            with zipfile.ZipFile(path) as zf:
                for member in zf.namelist():
                    with zf.open(member) as fh:
                        members[member[:-4]] = _npy_header(fh)
            data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise FormatError(
            f"{path}: not a readable npz/npy ({type(exc).__name__}: {exc})", path=path
        ) from None

    def read(name):
        try:
            return np.load(path, allow_pickle=False, mmap_mode="r") if data is None else data[name]
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
            raise FormatError(
                f"{path}: array {name!r} cannot be read ({exc})", path=path, tensor=name
            ) from None

    entries = []
    for name, (shape, dtype) in members.items():
        code = {
            "float64": "F64",
            "float32": "F32",
            "float16": "F16",
            "int64": "I64",
            "int32": "I32",
            "int16": "I16",
            "int8": "I8",
            "uint8": "U8",
            "bool": "BOOL",
            "uint16": "U16",
            "uint32": "U32",
            "uint64": "U64",
        }.get(dtype.name)
        if code is None or dtype.byteorder == ">":
            raise FormatError(
                f"{path}: array {name!r} has numpy dtype {dtype}, which ember cannot convert",
                path=path,
                tensor=name,
            )
        n = int(np.prod(shape, dtype=np.int64))
        entries.append(
            Entry(
                name,
                shape,
                code,
                n * dtype.itemsize,
                lambda n=name, b=code == "BOOL": read(n).view(np.uint8) if b else read(n),
            )
        )
    return Weights(path, "npz", entries, {}, [data.close] if data is not None else [])


def _ct2(path):
    from .ctranslate2 import CTranslate2File

    f = CTranslate2File(path)
    entries = [
        Entry(
            v.name,
            v.shape,
            v.dtype,
            v.nbytes,
            lambda n=v.name: f.array(n),
            lambda n=v.name: f.release(n),
        )
        for v in f.variables.values()
    ]
    meta = {
        "ctranslate2.version": f.version,
        "ctranslate2.spec": f.spec,
        "ctranslate2.revision": f.revision,
    }
    meta.update({f"ctranslate2.alias.{a}": t for a, t in f.aliases.items()})
    return Weights(path, "ctranslate2", entries, meta, [f.close])


def _torch(path):
    from .torch_checkpoint import TorchCheckpoint

    c = TorchCheckpoint(path)
    entries = [
        Entry(
            i.name,
            i.shape,
            i.dtype,
            i.nbytes,
            lambda n=i.name: c.array(n),
            lambda n=i.name: c.release(n),
        )
        for i in c.tensors.values()
    ]
    return Weights(path, f"pytorch ({c.format})", entries, {}, [c.close])


__all__ = ["FLOAT_DTYPES", "Entry", "Weights", "detect", "open_weights", "to_f32"]
