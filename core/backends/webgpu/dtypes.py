"""How each ember dtype lives in a WebGPU buffer (WGSL has only f32, f16, i32 and u32).

- f32, i32, u32: native.
- f16: native `f16` storage where the adapter has `shader-f16` (math still in f32, the
  result rounded on store); otherwise stored widened as f32 and rounded to f16 on every
  store, so results match a real f16 tensor.
- bf16: stored widened as f32 holding exactly the bf16 value (every store rounds to
  nearest even); uploads are widened and readbacks packed by kernels, never in Python.
- i64: stored as i32. Uploads are range-checked on the host (values outside
  [-2**31, 2**31) raise); arithmetic wraps at 32 bits on the device; readback
  sign-extends to 64 bits in a kernel.
- u8: stored widened as u32 (one element per word; stores wrap to 8 bits), because
  WGSL cannot address single bytes and packed read-modify-write would race.
- f64: not supported (WGSL has no f64).
"""

from ... import dtype as dt
from ...errors import UnsupportedDType


class DeviceType:
    __slots__ = (
        "dtype",
        "storage",
        "compute",
        "size",
        "round",
        "param",
        "unpack",
        "pack",
        "host_size",
    )

    def __init__(self, dtype, storage, compute, size, round="", param="pf", unpack=None, pack=None):
        self.dtype = dtype
        self.storage = storage  # WGSL element type of the buffer
        self.compute = compute  # WGSL type the math runs in
        self.size = size  # bytes per element on the device
        self.round = round  # WGSL function applied to a stored compute value
        self.param = param  # reader of a scalar parameter from the uniform block
        self.unpack = unpack  # upload: expression in word(k), i; None = bytes as-is
        self.pack = pack  # readback: expression in x(k), j; None = bytes as-is
        self.host_size = dtype.itemsize

    @property
    def packed(self):
        return self.pack is not None


def device_types(has_f16):
    table = {
        "f32": DeviceType(dt.f32, "f32", "f32", 4),
        "bf16": DeviceType(
            dt.bf16,
            "f32",
            "f32",
            4,
            "round_bf16",
            unpack="bitcast<f32>(((word(i / 2u) >> (16u * (i % 2u))) & 0xffffu) << 16u)",
            pack="(bitcast<u32>(x(2u * j)) >> 16u) | (bitcast<u32>(x(2u * j + 1u)) & 0xffff0000u)",
        ),
        "i64": DeviceType(
            dt.i64,
            "i32",
            "i32",
            4,
            param="pi",
            unpack="bitcast<i32>(word(2u * i))",
            pack="select(bitcast<u32>(x(j / 2u)), select(0u, 0xffffffffu, x(j / 2u) < 0i), "
            "(j % 2u) == 1u)",
        ),
        "i32": DeviceType(dt.i32, "i32", "i32", 4, param="pi"),
        "u32": DeviceType(dt.u32, "u32", "u32", 4, param="p"),
        "u8": DeviceType(
            dt.u8,
            "u32",
            "u32",
            4,
            "wrap_u8",
            param="p",
            unpack="(word(i / 4u) >> (8u * (i % 4u))) & 0xffu",
            pack="x(4u * j) | (x(4u * j + 1u) << 8u) | (x(4u * j + 2u) << 16u) | "
            "(x(4u * j + 3u) << 24u)",
        ),
    }
    if has_f16:
        table["f16"] = DeviceType(dt.f16, "f16", "f32", 2)
    else:
        table["f16"] = DeviceType(
            dt.f16,
            "f32",
            "f32",
            4,
            "round_f16",
            unpack="unpack2x16float(word(i / 2u))[i % 2u]",
            pack="f16_bits(x(2u * j)) | (f16_bits(x(2u * j + 1u)) << 16u)",
        )
    return table


def host_words(dtype, n):
    """Number of 32-bit words of n host elements."""
    return (n * dtype.itemsize + 3) // 4


def unsupported(op, dtype):
    return UnsupportedDType(
        f"{op}: dtype {dtype.name} is not supported on WebGPU (WGSL has no 64-bit floats); "
        f"convert with .to(ember.f32) first",
        op=op,
        dtype=dtype,
    )


def convert_expr(src, dst):
    """WGSL converting a value `x` of src's compute type into dst's stored value."""
    s, d = src.compute, dst.compute
    if s == d:
        expr = "x"
    elif d == "f32":
        expr = "f32(x)"
    elif s == "f32" and d == "u32":
        # numpy wraps negative floats into unsigned types; WGSL's u32() would clamp.
        expr = "select(u32(x), bitcast<u32>(i32(x)), x < 0.0)"
    elif s == "f32":
        expr = f"{d}(x)"
    else:
        expr = f"bitcast<{d}>(x)"
    if dst.round:
        expr = f"{dst.round}({expr})"
    return expr
