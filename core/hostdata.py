"""Host data without numpy: nested Python lists <-> packed little-endian bytes.

The browser has no numpy, so `ember.tensor([[1, 2], [3, 4]])` and `.tolist()` go
through here there. With numpy present the tensor module uses numpy instead, and the
bf16 bit helpers below take that array module as `xp` (this module imports none).
"""

import struct
import sys
from array import array

from . import dtype as dt
from .errors import ShapeMismatch, UnsupportedDType

_ARRAY_CODES = {"f32": "f", "f64": "d", "i32": "i", "u32": "I", "u8": "B", "i64": "q"}


def flatten(data):
    """(shape, flat values) of a scalar or a (possibly nested) list/tuple; ragged lists fail."""
    if isinstance(data, (list, tuple)):
        if not data:
            return (0,), []
        shapes_values = [flatten(item) for item in data]
        first = shapes_values[0][0]
        for i, (shape, _) in enumerate(shapes_values):
            if shape != first:
                raise ShapeMismatch(
                    f"tensor: ragged nested sequence (item 0 has shape {list(first)}, "
                    f"item {i} has shape {list(shape)})",
                    op="tensor",
                )
        flat = []
        for _, values in shapes_values:
            flat.extend(values)
        return (len(data),) + first, flat
    return (), [data]


def infer_dtype(values):
    if any(isinstance(v, float) for v in values):
        return dt.f32
    if values and all(isinstance(v, bool) for v in values):
        return dt.u8
    return dt.i64 if values else dt.f32


def pack(values, dtype):
    """Little-endian bytes of `values` stored as `dtype`."""
    if dtype is dt.f16:
        return struct.pack(f"<{len(values)}e", *[float(v) for v in values])
    if dtype is dt.bf16:
        bits = array("I", struct.pack(f"<{len(values)}f", *[float(v) for v in values]))
        return array("H", [_round_bf16(b) for b in bits]).tobytes()
    code = _ARRAY_CODES.get(dtype.name)
    if code is None:
        raise UnsupportedDType(f"tensor: cannot pack dtype {dtype.name}", dtype=dtype)
    cast = float if dtype.is_float else int
    out = array(code, [cast(v) for v in values])
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def unpack(buf, dtype, shape):
    """Nested lists of the values in `buf` (contiguous, little-endian)."""
    mv = memoryview(buf).cast("B")
    n = len(mv) // dtype.itemsize
    if dtype is dt.f16:
        flat = list(struct.unpack(f"<{n}e", mv))
    elif dtype is dt.bf16:
        halves = array("H", mv.tobytes())
        flat = list(struct.unpack(f"<{n}f", array("I", [h << 16 for h in halves]).tobytes()))
    else:
        out = array(_ARRAY_CODES[dtype.name])
        out.frombytes(mv.tobytes())
        if sys.byteorder != "little":
            out.byteswap()
        flat = out.tolist()
    return nest(flat, shape)


def nest(flat, shape):
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0] if shape[0] else 0
    return [nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


def _round_bf16(bits):
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return (bits >> 16) | 0x40
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_to_f32(xp, bits):
    """Widen raw bf16 bits (a uint16 array of module xp) to f32 exactly."""
    return (bits.astype(xp.uint32) << 16).view(xp.float32)


def f32_to_bf16(xp, x):
    """Round f32 to bf16 bits (uint16), to nearest even, keeping NaN a NaN."""
    x = xp.asarray(x, dtype=xp.float32)
    # ascontiguousarray turns 0-d into 1-d; keep the shape.
    u = xp.ascontiguousarray(x).view(xp.uint32).reshape(x.shape)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    out = xp.where(nan, (u >> 16) | 0x40, rounded)
    return out.astype(xp.uint16)
