"""ggml block formats on numpy: dequantization and a row-chunked quantized matmul.

Every format here is a sequence of fixed-size blocks; a block holds ``block_size``
weights in ``type_size`` bytes. A tensor's rows (the innermost ggml dimension,
``ne0``, i.e. the last numpy axis) are whole numbers of blocks, so block ``i``
always lies in one row.

Dequantization is fully vectorised: each block layout is a numpy structured
dtype, the raw bytes are viewed through it (no copy), and the arithmetic is
done on whole arrays of blocks in float32. The order and grouping of the float
operations follows ggml's reference dequantizers (and the ``gguf`` Python
package), so results are bit-for-bit identical to them: for example Q4_K is
``(d * sc) * q - (dmin * m)``, rounded to float32 after every operation.
"""

import enum
import itertools

import numpy as np

from ..backends.array_qmatmul import qmatmul_rows
from ..errors import DTypeMismatch, ShapeMismatch, UnsupportedDType, fmt_shape

QK_K = 256  # weights per super-block of the K-quants


class GGMLType(enum.IntEnum):
    """ggml tensor types, with the numbers GGUF files store."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


# (weights per block, bytes per block) for every type a GGUF file may hold;
# raw byte access works for all of them, dequantization for those in _KERNELS.
BLOCK_SIZES = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 2 + 16),
    GGMLType.Q4_1: (32, 2 + 2 + 16),
    GGMLType.Q5_0: (32, 2 + 4 + 16),
    GGMLType.Q5_1: (32, 2 + 2 + 4 + 16),
    GGMLType.Q8_0: (32, 2 + 32),
    GGMLType.Q8_1: (32, 4 + 4 + 32),
    GGMLType.Q2_K: (QK_K, 16 + 64 + 2 + 2),
    GGMLType.Q3_K: (QK_K, 32 + 64 + 12 + 2),
    GGMLType.Q4_K: (QK_K, 2 + 2 + 12 + 128),
    GGMLType.Q5_K: (QK_K, 2 + 2 + 12 + 32 + 128),
    GGMLType.Q6_K: (QK_K, 128 + 64 + 16 + 2),
    GGMLType.Q8_K: (QK_K, 4 + 256 + 32),
    GGMLType.IQ2_XXS: (QK_K, 2 + 64),
    GGMLType.IQ2_XS: (QK_K, 2 + 64 + 8),
    GGMLType.IQ3_XXS: (QK_K, 2 + 96),
    GGMLType.IQ1_S: (QK_K, 2 + 32 + 16),
    GGMLType.IQ4_NL: (32, 2 + 16),
    GGMLType.IQ3_S: (QK_K, 2 + 64 + 8 + 32 + 4),
    GGMLType.IQ2_S: (QK_K, 2 + 64 + 8 + 8),
    GGMLType.IQ4_XS: (QK_K, 2 + 2 + 4 + 128),
    GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4),
    GGMLType.I64: (1, 8),
    GGMLType.F64: (1, 8),
    GGMLType.IQ1_M: (QK_K, 32 + 16 + 8),
    GGMLType.BF16: (1, 2),
    GGMLType.TQ1_0: (QK_K, 48 + 4 + 2),
    GGMLType.TQ2_0: (QK_K, 64 + 2),
    GGMLType.MXFP4: (32, 1 + 16),
}


def as_ggml_type(value):
    """A GGMLType from a GGMLType, its number, or its name ('Q4_K', 'q4_k')."""
    if isinstance(value, GGMLType):
        return value
    if isinstance(value, str):
        try:
            return GGMLType[value.upper()]
        except KeyError:
            pass
    else:
        try:
            return GGMLType(int(value))
        except (ValueError, TypeError):
            pass
    raise UnsupportedDType(f"ggml type: {value!r} is not a known ggml type", ggml_type=value)


def tensor_nbytes(ggml_type, shape):
    """Bytes a tensor of this type and (numpy-order) shape occupies.

    Raises ShapeMismatch when the rows are not whole blocks.
    """
    t = as_ggml_type(ggml_type)
    block, size = BLOCK_SIZES[t]
    n = 1
    for d in shape:
        n *= int(d)
    row = int(shape[-1]) if len(shape) else 1
    if row % block:
        raise ShapeMismatch(
            f"{t.name}: row length {row} of shape {fmt_shape(shape)} is not a multiple of "
            f"the block size {block}",
            shape=tuple(shape),
            ggml_type=t,
        )
    return n // block * size


# --- block layouts ---------------------------------------------------------


def _blocks(*fields):
    return np.dtype(list(fields))


_LAYOUTS = {
    GGMLType.Q4_0: _blocks(("d", "<f2"), ("qs", "u1", (16,))),
    GGMLType.Q4_1: _blocks(("d", "<f2"), ("m", "<f2"), ("qs", "u1", (16,))),
    GGMLType.Q5_0: _blocks(("d", "<f2"), ("qh", "<u4"), ("qs", "u1", (16,))),
    GGMLType.Q5_1: _blocks(("d", "<f2"), ("m", "<f2"), ("qh", "<u4"), ("qs", "u1", (16,))),
    GGMLType.Q8_0: _blocks(("d", "<f2"), ("qs", "i1", (32,))),
    GGMLType.Q2_K: _blocks(
        ("scales", "u1", (16,)), ("qs", "u1", (64,)), ("d", "<f2"), ("dmin", "<f2")
    ),
    GGMLType.Q3_K: _blocks(
        ("hmask", "u1", (32,)), ("qs", "u1", (64,)), ("scales", "u1", (12,)), ("d", "<f2")
    ),
    GGMLType.Q4_K: _blocks(
        ("d", "<f2"), ("dmin", "<f2"), ("scales", "<u4", (3,)), ("qs", "u1", (128,))
    ),
    GGMLType.Q5_K: _blocks(
        ("d", "<f2"),
        ("dmin", "<f2"),
        ("scales", "<u4", (3,)),
        ("qh", "u1", (32,)),
        ("qs", "u1", (128,)),
    ),
    GGMLType.Q6_K: _blocks(
        ("ql", "u1", (128,)), ("qh", "u1", (64,)), ("scales", "i1", (16,)), ("d", "<f2")
    ),
}
for _t, _dt in _LAYOUTS.items():
    assert _dt.itemsize == BLOCK_SIZES[_t][1], _t

_U8 = np.uint8
_I8 = np.int8
_F32 = np.float32
_LE32 = np.dtype("<u4")
_SHIFT2 = np.array([0, 2, 4, 6], dtype=_U8)  # the four 2-bit fields of a byte
_N4 = np.uint8(4)
_M3, _M15 = np.uint8(3), np.uint8(15)

# Notes on speed: numpy pays per inner loop, so bit fiddling runs over whole
# contiguous (n, type_size) byte arrays (one long loop) and the results are then
# copied, or cast-copied to float32, into place; the scale multiplies work in
# place on the output.


def _f16(field):
    """An f16 field of n blocks as an (n, 1) float32 column (exact conversion)."""
    return field.astype(_F32)[:, None]


def _bytes(b):
    """The blocks' bytes, (n, type_size) uint8, without a copy."""
    return b.view(_U8).reshape(len(b), -1)


def _lohi(raw):
    """Low and high nibbles of every byte of ``raw``."""
    return raw & _M15, raw >> _N4


def _bits_le(raw):
    """Bits of bytes (n, k), least significant first: (n, 8 * k) uint8 of 0/1."""
    return np.unpackbits(raw, axis=-1, bitorder="little")


def _deq_q4_0(b, out):
    n = len(b)
    lo, hi = _lohi(_bytes(b))  # (n, 18); bytes 2: hold the weights
    lo, hi = lo.view(_I8), hi.view(_I8)
    np.subtract(lo, _I8(8), out=lo)
    np.subtract(hi, _I8(8), out=hi)
    o = out.reshape(n, 2, 16)
    np.copyto(o[:, 0], lo[:, 2:], casting="unsafe")  # exact int -> f32
    np.copyto(o[:, 1], hi[:, 2:], casting="unsafe")
    np.multiply(out, _f16(b["d"]), out=out)


def _deq_q4_1(b, out):
    n = len(b)
    lo, hi = _lohi(_bytes(b))
    o = out.reshape(n, 2, 16)
    np.copyto(o[:, 0], lo[:, 4:], casting="unsafe")
    np.copyto(o[:, 1], hi[:, 4:], casting="unsafe")
    np.multiply(out, _f16(b["d"]), out=out)
    np.add(out, _f16(b["m"]), out=out)


def _q5_values(b, qs_at):
    """The 5-bit values of Q5_0/Q5_1 blocks, (n, 32) uint8; qh is the 4 bytes before qs."""
    n = len(b)
    raw = _bytes(b)
    lo, hi = _lohi(raw)
    q = np.empty((n, 2, 16), _U8)
    np.copyto(q[:, 0], lo[:, qs_at:])
    np.copyto(q[:, 1], hi[:, qs_at:])
    q = q.reshape(n, 32)
    h = _bits_le(raw[:, qs_at - 4 : qs_at])  # bit j of qh: high bit of weight j
    np.left_shift(h, _N4, out=h)
    np.bitwise_or(q, h, out=q)
    return q


def _deq_q5_0(b, out):
    q = _q5_values(b, 6).view(_I8)
    np.subtract(q, _I8(16), out=q)
    np.multiply(_f16(b["d"]), q, out=out)


def _deq_q5_1(b, out):
    np.multiply(_f16(b["d"]), _q5_values(b, 8), out=out)
    np.add(out, _f16(b["m"]), out=out)


def _deq_q8_0(b, out):
    np.multiply(b["qs"], _f16(b["d"]), out=out)


def _fields(src, width, shift=0):
    """Bit fields of bytes, (n, g, 32) -> (n, g, 8 // width, 32): field f is
    ((x >> width*f) & (2**width - 1)) << shift.

    Each field is shifted straight into place (long loops, no broadcasting),
    then one mask over everything.
    """
    n, g, k = src.shape
    per = 8 // width
    q = np.empty((n, g, per, k), _U8)
    for f in range(per):
        d = width * f - shift
        if d > 0:
            np.right_shift(src, np.uint8(d), out=q[:, :, f])
        elif d < 0:
            np.left_shift(src, np.uint8(-d), out=q[:, :, f])
        else:
            np.copyto(q[:, :, f], src)
    np.bitwise_and(q, np.uint8(((1 << width) - 1) << shift), out=q)
    return q


def _two_bit_fields(qs, shift=0):
    """(n, 64) bytes -> (n, 2, 4, 32) 2-bit values << shift: weight = half*128 + field*32 + j."""
    return _fields(qs.reshape(len(qs), 2, 32), 2, shift)


def _deq_q2_k(b, out):
    n = len(b)
    sc = b["scales"]  # (n, 16): 16 groups of 16
    dl = _f16(b["d"]) * (sc & _M15).astype(_F32)
    ml = _f16(b["dmin"]) * (sc >> _N4).astype(_F32)
    o = out.reshape(n, 16, 16)
    np.copyto(o, _two_bit_fields(b["qs"]).reshape(n, 16, 16), casting="unsafe")
    np.multiply(o, dl[:, :, None], out=o)
    np.subtract(o, ml[:, :, None], out=o)


def _deq_q3_k(b, out):
    n = len(b)
    s = b["scales"]  # 16 6-bit scales in 12 bytes
    lo = np.empty((n, 2, 8), _U8)  # low 4 bits of scale i
    np.bitwise_and(s[:, :8], _M15, out=lo[:, 0])
    np.right_shift(s[:, :8], _N4, out=lo[:, 1])
    hi = (s[:, 8:12].reshape(n, 1, 4) >> _SHIFT2[:, None]) & _M3  # (n, 4, 4): high 2 bits
    sc = (lo.reshape(n, 16) | (hi.reshape(n, 16) << _N4)).view(_I8)
    np.subtract(sc, _I8(32), out=sc)
    dl = _f16(b["d"]) * sc.astype(_F32)  # (n, 16)
    q = _two_bit_fields(b["qs"]).reshape(n, 8, 32)
    h = _fields(b["hmask"].reshape(n, 1, 32), 1, 2)  # bit k of byte j: weight k*32 + j
    np.bitwise_or(q, h.reshape(n, 8, 32), out=q)  # value + 4 where the bit is set
    qi = q.view(_I8)
    np.subtract(qi, _I8(4), out=qi)
    o = out.reshape(n, 16, 16)
    np.multiply(dl[:, :, None], qi.reshape(n, 16, 16), out=o)


_K3F, _K0F = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F)
_K30 = np.uint32(0x30303030)
_S2, _S4 = np.uint32(2), np.uint32(4)


def _k_scales(s):
    """Scales and mins of 8 sub-blocks, 6 bits each in 12 bytes (Q4_K, Q5_K): two (n, 8) uint8.

    Bytes 0-3 and 4-7 hold the low 6 bits of scales 0-3 and mins 0-3 and, in their
    top 2 bits, the high bits of scales/mins 4-7; bytes 8-11 hold the low 4 bits
    of scales 4-7 (low nibble) and mins 4-7 (high nibble). Done on 32-bit words,
    4 bytes at a time (a byte's top 2 bits are (x >> 2) & 0x30 of the word).
    """
    n = len(s)
    a, m, c = s[:, 0], s[:, 1], s[:, 2]  # little-endian u32 words
    sc = np.empty((n, 2), _LE32)
    mn = np.empty((n, 2), _LE32)
    np.bitwise_and(a, _K3F, out=sc[:, 0])
    np.bitwise_and(m, _K3F, out=mn[:, 0])
    np.bitwise_or(c & _K0F, (a >> _S2) & _K30, out=sc[:, 1])
    np.bitwise_or((c >> _S4) & _K0F, (m >> _S2) & _K30, out=mn[:, 1])
    return sc.view(_U8), mn.view(_U8)


def _k_scale_min(b):
    """d * sc and dmin * m, (n, 8, 1) float32 each."""
    sc, mn = _k_scales(b["scales"])
    ds = _f16(b["d"]) * sc.astype(_F32)
    dm = _f16(b["dmin"]) * mn.astype(_F32)
    return ds[:, :, None], dm[:, :, None]


def _deq_q4_k(b, out):
    n = len(b)
    lo, hi = _lohi(_bytes(b))  # qs are bytes 16:144
    o = out.reshape(n, 4, 2, 32)  # sub-block = chunk*2 + nibble
    np.copyto(o[:, :, 0], lo[:, 16:].reshape(n, 4, 32), casting="unsafe")
    np.copyto(o[:, :, 1], hi[:, 16:].reshape(n, 4, 32), casting="unsafe")
    ds, dm = _k_scale_min(b)
    o = out.reshape(n, 8, 32)
    np.multiply(o, ds, out=o)
    np.subtract(o, dm, out=o)


def _deq_q5_k(b, out):
    n = len(b)
    raw = _bytes(b)
    lo, hi = _lohi(raw)  # qs are bytes 48:176
    q = np.empty((n, 4, 2, 32), _U8)
    np.copyto(q[:, :, 0], lo[:, 48:].reshape(n, 4, 32))
    np.copyto(q[:, :, 1], hi[:, 48:].reshape(n, 4, 32))
    q = q.reshape(n, 8, 32)
    h = _fields(raw[:, 16:48].reshape(n, 1, 32), 1, 4)  # bit k of qh byte j: sub-block k
    np.bitwise_or(q, h.reshape(n, 8, 32), out=q)
    ds, dm = _k_scale_min(b)
    o = out.reshape(n, 8, 32)
    np.multiply(ds, q, out=o)
    np.subtract(o, dm, out=o)


def _deq_q6_k(b, out):
    n = len(b)
    raw = _bytes(b)
    lo, hi = _lohi(raw[:, :128])  # ql
    q = np.empty((n, 2, 2, 64), _U8)  # weight = half*128 + nibble*64 + k
    np.copyto(q[:, :, 0], lo.reshape(n, 2, 64))
    np.copyto(q[:, :, 1], hi.reshape(n, 2, 64))
    q = q.reshape(n, 256)
    h = _two_bit_fields(raw[:, 128:192], shift=4)  # high 2 bits, in place
    np.bitwise_or(q, h.reshape(n, 256), out=q)
    qi = q.view(_I8)
    np.subtract(qi, _I8(32), out=qi)
    d = _f16(b["d"]) * b["scales"].astype(_F32)  # (n, 16)
    np.multiply(d[:, :, None], qi.reshape(n, 16, 16), out=out.reshape(n, 16, 16))


_TINY = np.array([1e-45], _F32)  # the smallest float32 subnormal


def _subnormals_flushed():
    return (_TINY * _F32(2.0))[0] == 0


def _f16_to_f32(u, out):
    """Half-precision bits ``u`` -> float32 ``out``, exactly, for every bit pattern.

    (numpy's own f16 -> f32 cast is about 2x slower.)

    The half's exponent and mantissa, shifted into a single's bits, read as a
    single 2**-112 times too small (subnormals included): one exact multiply
    by 2**112 fixes it. Inf and NaN get the all-ones exponent back; the sign is
    copied over. Half subnormals pass through float32 subnormals, so when the
    FPU flushes those to zero (FTZ/DAZ set by some library) numpy's cast is
    used instead.
    """
    if _subnormals_flushed():
        np.copyto(out, u.view("<f2"), casting="unsafe")
        return
    bits = out.view(np.uint32)
    np.bitwise_and(u, np.uint16(0x7FFF), out=bits)
    np.left_shift(bits, np.uint32(13), out=bits)
    np.multiply(out, _F32(2.0**112), out=out)
    special = (u & np.uint16(0x7C00)) == np.uint16(0x7C00)
    if special.any():
        bits[special] |= np.uint32(0x7F800000)
    sign = (u & np.uint16(0x8000)).astype(np.uint32)
    np.left_shift(sign, np.uint32(16), out=sign)
    np.bitwise_or(bits, sign, out=bits)


_KERNELS = {
    GGMLType.Q4_0: _deq_q4_0,
    GGMLType.Q4_1: _deq_q4_1,
    GGMLType.Q5_0: _deq_q5_0,
    GGMLType.Q5_1: _deq_q5_1,
    GGMLType.Q8_0: _deq_q8_0,
    GGMLType.Q2_K: _deq_q2_k,
    GGMLType.Q3_K: _deq_q3_k,
    GGMLType.Q4_K: _deq_q4_k,
    GGMLType.Q5_K: _deq_q5_k,
    GGMLType.Q6_K: _deq_q6_k,
}

# plain element types: the little-endian numpy dtype of the stored values
_PLAIN = {
    GGMLType.F32: np.dtype("<f4"),
    GGMLType.F16: np.dtype("<f2"),
    GGMLType.F64: np.dtype("<f8"),
    GGMLType.I8: np.dtype("i1"),
    GGMLType.I16: np.dtype("<i2"),
    GGMLType.I32: np.dtype("<i4"),
    GGMLType.I64: np.dtype("<i8"),
}

SUPPORTED = frozenset(_KERNELS) | frozenset(_PLAIN) | {GGMLType.BF16}

# blocks dequantized per step: bounds the temporaries and keeps them in cache
_STEP_BYTES = 1 << 21


def _as_u8(raw):
    if isinstance(raw, np.ndarray):
        if raw.dtype != _U8:
            raw = raw.view(_U8) if raw.flags.c_contiguous else np.ascontiguousarray(raw).view(_U8)
        return raw.reshape(-1)
    return np.frombuffer(raw, dtype=_U8)


def _dequantize_into(raw, t, out):
    """Dequantize 1-D uint8 ``raw`` of type ``t`` into the contiguous float32 ``out``."""
    flat = out.reshape(-1)
    if not raw.flags.c_contiguous:
        raw = np.ascontiguousarray(raw)
    if t == GGMLType.F32:
        np.copyto(flat, raw.view("<f4"))
        return out
    if t == GGMLType.BF16:
        np.left_shift(raw.view("<u2"), np.uint32(16), out=flat.view(np.uint32))
        return out
    if t in _PLAIN and t != GGMLType.F16:
        np.copyto(flat, raw.view(_PLAIN[t]), casting="unsafe")
        return out
    if t == GGMLType.F16:
        kernel, block, blocks = _f16_to_f32, 1, raw.view("<u2")
    else:
        kernel = _KERNELS.get(t)
        if kernel is None:
            raise UnsupportedDType(
                f"dequantize: ggml type {t.name} is not supported "
                f"(supported: {', '.join(sorted(x.name for x in SUPPORTED))})",
                ggml_type=t,
            )
        block = BLOCK_SIZES[t][0]
        blocks = raw.view(_LAYOUTS[t])
    vals = flat.reshape(-1, block) if block > 1 else flat
    step = max(1, _STEP_BYTES // (block * 4))
    for i in range(0, len(vals), step):
        kernel(blocks[i : i + step], vals[i : i + step])
    return out


def dequantize(raw, ggml_type, shape):
    """Dequantize the raw bytes of a tensor to a new float32 array of ``shape``.

    ``raw`` is a uint8 array (or any bytes-like object) holding exactly the
    tensor's bytes; ``shape`` is in numpy order (the last axis is ggml's ``ne0``).
    """
    t = as_ggml_type(ggml_type)
    shape = tuple(int(d) for d in shape)
    raw = _as_u8(raw)
    need = tensor_nbytes(t, shape)
    if raw.size != need:
        raise ShapeMismatch(
            f"dequantize {t.name}: shape {fmt_shape(shape)} needs {need} bytes, got {raw.size}",
            shape=shape,
            ggml_type=t,
            nbytes=raw.size,
        )
    out = np.empty(shape, _F32)
    return _dequantize_into(raw, t, out)


class QTensor:
    """A (possibly quantized) ggml tensor kept as its raw bytes.

    ``raw`` is held without copying (a view of a file's memory map, say);
    ``shape`` is the logical numpy-order shape, (out_features, in_features)
    for a linear layer's weight.
    """

    __slots__ = ("raw", "ggml_type", "shape", "_row_bytes", "__weakref__")

    def __init__(self, raw, ggml_type, shape):
        t = as_ggml_type(ggml_type)
        shape = tuple(int(d) for d in shape)
        raw = _as_u8(raw)
        need = tensor_nbytes(t, shape)
        if raw.size != need:
            raise ShapeMismatch(
                f"QTensor {t.name}: shape {fmt_shape(shape)} needs {need} bytes, got {raw.size}",
                shape=shape,
                ggml_type=t,
                nbytes=raw.size,
            )
        self.raw = raw
        self.ggml_type = t
        self.shape = shape
        self._row_bytes = tensor_nbytes(t, shape[-1:]) if shape else need

    @property
    def nbytes(self):
        return self.raw.size

    @property
    def ndim(self):
        return len(self.shape)

    def dequantize(self):
        """The whole tensor as a new float32 array."""
        return dequantize(self.raw, self.ggml_type, self.shape)

    def dequantize_rows(self, start, stop, out=None):
        """Rows ``start:stop`` of a 2-D tensor as float32, into ``out`` when given."""
        if self.ndim != 2:
            raise ShapeMismatch(
                f"dequantize_rows: needs a 2-D QTensor, got shape {fmt_shape(self.shape)}",
                shape=self.shape,
            )
        start, stop = max(0, int(start)), min(self.shape[0], int(stop))
        stop = max(start, stop)
        if out is None:
            out = np.empty((stop - start, self.shape[1]), _F32)
        elif (
            out.dtype != _F32
            or out.shape != (stop - start, self.shape[1])
            or not out.flags.c_contiguous
        ):
            raise ShapeMismatch(
                f"dequantize_rows: out must be a C-contiguous float32 array of shape "
                f"{fmt_shape((stop - start, self.shape[1]))}, got {out.dtype} {fmt_shape(out.shape)}",
                shape=out.shape,
            )
        rb = self._row_bytes
        return _dequantize_into(self.raw[start * rb : stop * rb], self.ggml_type, out)

    def __repr__(self):
        return (
            f"QTensor({self.ggml_type.name}, shape={fmt_shape(self.shape)}, nbytes={self.nbytes})"
        )


class StackedQTensor:
    """QTensors of one ggml type stacked by rows without copying: the (sum of N_i, K)
    weight of the q/k/v or gate/up projections that a model runs as one matmul, whose
    parts stay views of the file's memory map (a stacked copy would hold a third of a
    small model's bytes twice in host memory). CPU kernels run part by part (`parts`,
    `offsets`); `raw` assembles the bytes once, for an upload to a device."""

    __slots__ = ("parts", "offsets", "ggml_type", "shape", "__weakref__")

    def __init__(self, parts):
        parts = tuple(parts)
        if not parts or any(not isinstance(p, QTensor) or p.ndim != 2 for p in parts):
            raise TypeError("StackedQTensor: needs one or more 2-D QTensors")
        t, k = parts[0].ggml_type, parts[0].shape[1]
        if any(p.ggml_type != t or p.shape[1] != k for p in parts):
            raise ShapeMismatch(
                "StackedQTensor: parts must share a ggml type and a row length, got "
                + ", ".join(f"{p.ggml_type.name} {fmt_shape(p.shape)}" for p in parts),
                shape=tuple(p.shape for p in parts),
            )
        self.parts, self.ggml_type = parts, t
        self.offsets = tuple(itertools.accumulate((p.shape[0] for p in parts), initial=0))
        self.shape = (self.offsets[-1], k)

    @property
    def ndim(self):
        return 2

    @property
    def nbytes(self):
        return sum(p.nbytes for p in self.parts)

    @property
    def raw(self):
        """The stacked bytes, assembled now (a copy: rows are whole blocks)."""
        return np.concatenate([p.raw for p in self.parts])

    def dequantize(self):
        return self.dequantize_rows(0, self.shape[0])

    def dequantize_rows(self, start, stop, out=None):
        """Rows ``start:stop`` of the stack as float32, into ``out`` when given."""
        start, stop = max(0, int(start)), min(self.shape[0], int(stop))
        stop = max(start, stop)
        if out is None:
            out = np.empty((stop - start, self.shape[1]), _F32)
        elif out.dtype != _F32 or out.shape != (stop - start, self.shape[1]):
            raise ShapeMismatch(
                f"dequantize_rows: out must be a float32 array of shape "
                f"{fmt_shape((stop - start, self.shape[1]))}, got {out.dtype} {fmt_shape(out.shape)}",
                shape=out.shape,
            )
        for part, off, lo, hi in self.spans(start, stop):
            at = off + lo - start
            part.dequantize_rows(lo, hi, out=out[at : at + hi - lo])
        return out

    def spans(self, start, stop):
        """(part, its first row in the stack, lo, hi) for the stack's rows [start, stop):
        rows lo..hi of that part, parts in order, empty spans left out."""
        for part, off in zip(self.parts, self.offsets, strict=False):
            lo, hi = max(start, off) - off, min(stop, off + part.shape[0]) - off
            if lo < hi:
                yield part, off, lo, hi

    def __repr__(self):
        return (
            f"StackedQTensor({self.ggml_type.name}, shape={fmt_shape(self.shape)}, "
            f"parts={len(self.parts)}, nbytes={self.nbytes})"
        )


def qmatmul(x, w, *, chunk_rows=None, path="numpy"):
    """``x @ dequantize(w).T`` without ever dequantizing all of ``w``.

    ``x`` is float32 of shape [..., in_features]; ``w`` a 2-D QTensor of shape
    (out_features, in_features). ``chunk_rows`` weight rows at a time (default about
    1 MiB of f32) are dequantized into one reused buffer and multiplied by one GEMM, so
    the extra memory is one chunk plus the dequantizer's temporaries: the reference the
    compiled kernels (``ember[jit]``) are tested against. ``path`` picks another of
    backends/array_qmatmul.py's paths ("auto" chooses as the numpy backend does).
    """
    if not isinstance(w, (QTensor, StackedQTensor)):
        raise TypeError(
            f"qmatmul: weight must be a QTensor or StackedQTensor, got {type(w).__name__}"
        )
    if w.ndim != 2:
        raise ShapeMismatch(
            f"qmatmul: weight must be 2-D, got shape {fmt_shape(w.shape)}", shape=w.shape
        )
    x = np.asarray(x)
    if x.dtype != _F32:
        raise DTypeMismatch(f"qmatmul: x must be float32, got {x.dtype}", dtype=x.dtype)
    n_out, n_in = w.shape
    if x.ndim == 0 or x.shape[-1] != n_in:
        raise ShapeMismatch(
            f"qmatmul: x of shape {fmt_shape(x.shape)} does not match weight {fmt_shape(w.shape)} "
            f"(needs last dim {n_in})",
            lhs=x.shape,
            rhs=w.shape,
        )
    lead = x.shape[:-1]
    x2 = np.ascontiguousarray(x.reshape(-1, n_in))
    out = np.empty((x2.shape[0], n_out), _F32)
    qmatmul_rows(x2, w, out, path=path, chunk_rows=chunk_rows)
    return out.reshape(*lead, n_out)
