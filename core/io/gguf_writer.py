"""Writing GGUF files (version 3, little-endian), one tensor at a time.

The layout is the one `gguf.py` reads: header, typed metadata, tensor infos, padding to
the alignment, then each tensor's bytes at an aligned offset. Every tensor's type and
shape are known before its bytes are, so the header is written first and each tensor's
data is produced (read, converted, quantized) only when its turn comes: peak memory is
about one tensor.
"""

import struct
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, fmt_shape
from ..intmath import ceil_div
from .gguf import DEFAULT_ALIGNMENT, GGUFValueType
from .quant import tensor_nbytes

VERSION = 3

_SCALARS = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<B",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
_ARRAYS = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "<u1",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}


@dataclass(frozen=True)
class Typed:
    """A metadata value with its GGUF type; for arrays, `element` is the element type."""

    type: GGUFValueType
    value: object
    element: GGUFValueType = None


@dataclass
class PlannedTensor:
    """One tensor to write: `produce()` returns its bytes (exactly nbytes) when called."""

    name: str
    shape: tuple  # numpy order; ggml's ne is this reversed
    ggml_type: object
    produce: object
    written: object = None  # called once the bytes are in the file (to drop input pages)

    @property
    def nbytes(self):
        return tensor_nbytes(self.ggml_type, self.shape)


def infer(value):
    """The GGUF type llama.cpp's writer gives a plain Python value."""
    if isinstance(value, Typed):
        return value
    if isinstance(value, bool):
        return Typed(GGUFValueType.BOOL, value)
    if isinstance(value, int):
        return Typed(GGUFValueType.UINT32 if 0 <= value < 1 << 32 else GGUFValueType.INT64, value)
    if isinstance(value, float):
        return Typed(GGUFValueType.FLOAT32, value)
    if isinstance(value, (str, bytes)):
        return Typed(GGUFValueType.STRING, value)
    if isinstance(value, (list, tuple)):
        first = infer(value[0]).type if value else GGUFValueType.UINT8
        if first == GGUFValueType.UINT32 and any(isinstance(v, int) and v < 0 for v in value):
            first = GGUFValueType.INT32
        return Typed(GGUFValueType.ARRAY, list(value), first)
    raise TypeError(f"GGUF metadata: cannot store a {type(value).__name__} ({value!r})")


def _string(s):
    b = s if isinstance(s, bytes) else s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(t, value, element=None):
    if t in _SCALARS:
        return struct.pack(_SCALARS[t], value)
    if t == GGUFValueType.STRING:
        return _string(value)
    if t != GGUFValueType.ARRAY:
        raise TypeError(f"GGUF metadata: unknown value type {t!r}")
    head = struct.pack("<IQ", int(element), len(value))
    if element in _ARRAYS:
        return head + np.asarray(value, dtype=_ARRAYS[element]).tobytes()
    if element == GGUFValueType.STRING:
        return head + b"".join(_string(v) for v in value)
    return head + b"".join(_value(*_element_of(v)) for v in value)


def _element_of(v):
    typed = infer(v)
    return typed.type, typed.value, typed.element


def _align(n, alignment):
    return ceil_div(n, alignment) * alignment


def write_gguf(fh, metadata, tensors, alignment=DEFAULT_ALIGNMENT, progress=None):
    """Write a GGUF file to the open binary file `fh`.

    `metadata`: key -> value (a `Typed`, or a plain value typed by `infer`);
    `tensors`: PlannedTensor list, written in order; `progress(i, planned)` is called
    before each tensor's bytes are produced."""
    metadata = dict(metadata)
    if alignment != DEFAULT_ALIGNMENT:
        metadata["general.alignment"] = Typed(GGUFValueType.UINT32, alignment)
    names = set()
    for t in tensors:
        if t.name in names:
            raise FormatError(f"GGUF output: tensor {t.name!r} is planned twice", tensor=t.name)
        names.add(t.name)
    out = [b"GGUF", struct.pack("<IQQ", VERSION, len(tensors), len(metadata))]
    for key, value in metadata.items():
        typed = infer(value)
        out.append(
            _string(key)
            + struct.pack("<I", int(typed.type))
            + _value(typed.type, typed.value, typed.element)
        )
    offset = 0
    for t in tensors:
        ne = tuple(reversed([int(d) for d in t.shape])) or (1,)
        out.append(
            _string(t.name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, int(t.ggml_type), offset)
        )
        offset = _align(offset + t.nbytes, alignment)
    head = b"".join(out)
    fh.write(head + b"\0" * (_align(len(head), alignment) - len(head)))
    for i, t in enumerate(tensors):
        if progress is not None:
            progress(i, t)
        data = memoryview(t.produce()).cast("B")
        if data.nbytes != t.nbytes:
            raise FormatError(
                f"GGUF output: tensor {t.name!r} ({fmt_shape(t.shape)}) produced "
                f"{data.nbytes} bytes, expected {t.nbytes}",
                tensor=t.name,
            )
        fh.write(data)
        del data
        if t.written is not None:
            t.written()
        fh.write(b"\0" * (_align(t.nbytes, alignment) - t.nbytes))


__all__ = ["VERSION", "PlannedTensor", "Typed", "infer", "write_gguf"]
