"""Host scalars as the 32-bit words WebGPU kernels read (pure Python)."""

import struct

from ... import dtype as dt
from ...errors import UnsupportedDType

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def param_bits(value, t, dtype, op, saturate=False):
    """`value` as the bits of device type `t` (f32, i32 or u32). An integer outside what
    the device holds is refused, never wrapped: i64 lives in 32 bits here. A bound
    (`saturate`, clamp's) is moved to the nearest held value instead, which is exact:
    every element lies inside that range."""
    if t.compute == "f32":
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    v = int(value)
    lo, hi = (I32_MIN, I32_MAX) if t.compute == "i32" else (0, 2**32 - 1)
    if saturate:
        v = max(lo, min(hi, v))
    elif not lo <= v <= hi:
        raise UnsupportedDType(
            f"{op}: the scalar {v} does not fit the 32 bits ({t.compute}, {lo}..{hi}) the "
            f"WebGPU backend holds {dtype.name} in (WGSL has no 64-bit integers)",
            op=op,
            dtype=dtype,
        )
    return v & 0xFFFFFFFF


def host_round(value, dtype):
    """A fill value as the dtype holds it (the device keeps bf16/f16 widened)."""
    if dtype is dt.bf16:
        from ...hostdata import pack, unpack

        return unpack(pack([float(value)], dtype), dtype, (1,))[0]
    if dtype is dt.f16:
        return struct.unpack("<e", struct.pack("<e", float(value)))[0]
    return value


def int_range(data, raw, dtype):
    """(min, max) of integer host data, in C: numpy's own methods when `data` is an
    array, else builtins over a typed memoryview."""
    if hasattr(data, "min") and hasattr(data, "max"):
        return int(data.min()), int(data.max())
    code = {"i64": "q", "i32": "i", "u32": "I", "u8": "B"}[dtype.name]
    values = raw.cast(code)
    return min(values), max(values)
