"""How llvm_quant's kernels read each ggml block type: a block's weights as vector
registers of 16 f32 integers, each group with the scale (and offset) that makes its
weights, in LLVM IR (llvmlite).

A block reads as `terms`: (values, s, c) with `values` [(v, lane)], v 16 f32 integers
for the block's weights lane .. lane + 15, and each of them `v * s + c` (c None where
there is none). A term's values share its s and c: a dot product then adds s * sum(v x)
(+ c * sum(x)) once a term, and a decoder writes v * s (+ c) with numpy's steps
(core/io/quant.py), so the bits are its dequantizer's:

    Q4_0  (q - 8) * d                       one term of 32
    Q4_1  q * d + m                         one term of 32
    Q5_0  (q - 16) * d, q's fifth bits in a 32-bit word   one term of 32
    Q5_1  q * d + m, the same 5-bit values                 one term of 32
    Q8_0  q * d                             one term of 32
    Q2_K  q * (d sc_g) - (dmin m_g)         16 terms of 16 (4-bit sc_g, m_g a byte)
    Q3_K  (q - 4) * (d sc_g)                16 terms of 16 (6-bit signed sc_g packed in 12 bytes)
    Q4_K  q * (d sc_j) - (dmin m_j)         8 terms of 32 (6-bit sc_j, m_j packed in 12 bytes)
    Q5_K  Q4_K's, q's fifth bits in 32 bytes of their own
    Q6_K  (q - 32) * (d sc_g)               16 terms of 16 (int8 sc_g)
"""

LANES = 16
# ggml type number -> (name, weights a block, bytes a block); core/io/quant.py's GGMLType
# and BLOCK_SIZES (io sits above the backends, which do not import it)
FORMATS = {
    2: ("q4_0", 32, 18),
    3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22),
    7: ("q5_1", 32, 24),
    8: ("q8_0", 32, 34),
    10: ("q2_k", 256, 84),
    11: ("q3_k", 256, 110),
    12: ("q4_k", 256, 144),
    13: ("q5_k", 256, 176),
    14: ("q6_k", 256, 210),
}


class Vectors:
    """The IR types and small vector steps the kernels share, on one IRBuilder."""

    def __init__(self, b):
        from llvmlite import ir

        self.b, self.ir = b, ir
        self.i8, self.i32, self.i64, self.f32 = (
            ir.IntType(8),
            ir.IntType(32),
            ir.IntType(64),
            ir.FloatType(),
        )
        self.bytes = ir.VectorType(self.i8, LANES)
        self.ints = ir.VectorType(self.i32, LANES)
        self.floats = ir.VectorType(self.f32, LANES)

    def const(self, typ, values):
        return self.ir.Constant(typ, values if isinstance(values, list) else [values] * LANES)

    def load(self, ptr, typ, align):
        b = self.b
        return b.load(b.bitcast(ptr, typ.as_pointer()), align=align)

    def at(self, blk, offset):
        return self.b.gep(blk, [self.i64(offset)])

    def byte_lanes(self, blk, offset):
        """The 16 bytes at byte `offset` of a block."""
        return self.load(self.at(blk, offset), self.bytes, 1)

    def byte(self, blk, offset):
        return self.b.load(self.at(blk, offset))

    def half(self, blk, offset):
        """The f16 at byte `offset` of a block, as f32."""
        b, ir = self.b, self.ir
        bits = self.load(self.at(blk, offset), ir.IntType(16), 1)
        return b.fpext(b.bitcast(bits, ir.HalfType()), self.f32)

    def splat(self, s):
        b, ir = self.b, self.ir
        one = b.insert_element(ir.Constant(self.floats, ir.Undefined), s, self.i32(0))
        return b.shuffle_vector(one, one, self.const(self.ints, 0))

    def total(self, v):
        """The sum of a vector's lanes, halves added in a fixed tree."""
        b, ir = self.b, self.ir
        n = LANES
        while n > 1:
            n //= 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(self.i32, n), list(range(n))))
            hi = b.shuffle_vector(
                v, v, ir.Constant(ir.VectorType(self.i32, n), list(range(n, 2 * n)))
            )
            v = b.fadd(lo, hi)
        return b.extract_element(v, self.i32(0))

    def low(self, v):
        return self.b.and_(v, self.const(self.bytes, 15))

    def high(self, v):
        return self.b.lshr(v, self.const(self.bytes, 4))

    def signed(self, v, less):
        """Byte lanes less `less`, as f32 (exact: small integers)."""
        return self.b.sitofp(self.b.sub(v, self.const(self.bytes, less)), self.floats)

    def unsigned(self, v):
        return self.b.uitofp(v, self.floats)


def terms(vec, name, blk):
    """The block at i8 pointer `blk` of type `name` as terms (see the module's note)."""
    return _READERS[name](vec, blk)


def _q4_0(vec, blk):
    qs = vec.byte_lanes(blk, 2)
    lo, hi = vec.signed(vec.low(qs), 8), vec.signed(vec.high(qs), 8)
    return [([(lo, 0), (hi, LANES)], vec.half(blk, 0), None)]


def _q4_1(vec, blk):
    qs = vec.byte_lanes(blk, 4)
    lo, hi = vec.unsigned(vec.low(qs)), vec.unsigned(vec.high(qs))
    return [([(lo, 0), (hi, LANES)], vec.half(blk, 0), vec.half(blk, 2))]


def _q5_0(vec, blk):
    return [(_q5_values(vec, blk, 2, 16), vec.half(blk, 0), None)]


def _q5_1(vec, blk):
    return [(_q5_values(vec, blk, 4, 0), vec.half(blk, 0), vec.half(blk, 2))]


def _q5_values(vec, blk, qh_at, less):
    """[(lanes 0-15, 0), (lanes 16-31, 16)] of a Q5_0/Q5_1 block whose 32-bit word of
    fifth bits is at qh_at (bit j: weight j's, +16), its nibbles after it, less `less`."""
    b = vec.b
    qh = b.load(b.bitcast(vec.at(blk, qh_at), vec.i32.as_pointer()), align=1)
    word = b.shuffle_vector(
        b.insert_element(vec.ir.Constant(vec.ints, vec.ir.Undefined), qh, vec.i32(0)),
        vec.ir.Constant(vec.ints, vec.ir.Undefined),
        vec.const(vec.ints, 0),
    )
    qs = vec.byte_lanes(blk, qh_at + 4)
    halves = []
    for nibble, first in ((vec.low(qs), 0), (vec.high(qs), LANES)):
        bits = b.lshr(word, vec.const(vec.ints, list(range(first, first + LANES))))
        bits = b.shl(b.and_(bits, vec.const(vec.ints, 1)), vec.const(vec.ints, 4))
        q = b.or_(nibble, b.trunc(bits, vec.bytes))
        halves.append((vec.signed(q, less) if less else vec.unsigned(q), first))
    return halves


def _q8_0(vec, blk):
    lo = vec.b.sitofp(vec.byte_lanes(blk, 2), vec.floats)
    hi = vec.b.sitofp(vec.byte_lanes(blk, 2 + LANES), vec.floats)
    return [([(lo, 0), (hi, LANES)], vec.half(blk, 0), None)]


def _groups_of_16():
    """(h, f, lane, group, first weight) of a 256-weight block's 16-weight groups, weight
    128 h + 32 f + lane + j of group 8 h + 2 f + lane // 16 (Q2_K's, Q3_K's and Q6_K's
    order: a 128-weight half h, its 32-weight field or quarter f, a 16-lane half)."""
    for h in range(2):
        for f in range(4):
            for lane in (0, LANES):
                yield h, f, lane, 8 * h + 2 * f + lane // LANES, 128 * h + 32 * f + lane


def _two_bits(vec, qs, f):
    """Bits 2f, 2f + 1 of byte lanes."""
    b = vec.b
    return b.and_(b.lshr(qs, vec.const(vec.bytes, 2 * f)), vec.const(vec.bytes, 3))


def _q2_k(vec, blk):
    # 16 scale bytes (d's multiplier in the low nibble, dmin's in the high), 64 bytes of
    # 2-bit values, d, dmin: weight 128 h + 32 f + j is field f of byte 16 + 32 h + j
    b = vec.b
    d, dmin = vec.half(blk, 80), vec.half(blk, 82)
    out = []
    for h in range(2):
        for f in range(4):
            for lane in (0, LANES):
                q = _two_bits(vec, vec.byte_lanes(blk, 16 + 32 * h + lane), f)
                group = 8 * h + 2 * f + lane // LANES
                scale = vec.byte(blk, group)
                s = b.fmul(d, b.uitofp(b.and_(scale, vec.i8(15)), vec.f32))
                m = b.fmul(dmin, b.uitofp(b.lshr(scale, vec.i8(4)), vec.f32))
                out.append(
                    ([(vec.unsigned(q), 128 * h + 32 * f + lane)], s, b.fsub(vec.f32(-0.0), m))
                )
    return out


def _q3_k(vec, blk):
    # hmask (32 bytes), qs (64), 12 bytes of scales, d: weight 128 h + 32 f + j is field f
    # of qs byte 32 h + j, with 4 more where bit 4 h + f of hmask byte j is set, less 4
    b = vec.b
    d = vec.half(blk, 108)
    out = []
    for h, f, lane, group, first in _groups_of_16():
        q = _two_bits(vec, vec.byte_lanes(blk, 32 + 32 * h + lane), f)
        bit = b.lshr(vec.byte_lanes(blk, lane), vec.const(vec.bytes, 4 * h + f))
        q = b.or_(q, b.shl(b.and_(bit, vec.const(vec.bytes, 1)), vec.const(vec.bytes, 2)))
        s = b.fmul(d, b.sitofp(_q3_scale(vec, blk, 96, group), vec.f32))
        out.append(([(vec.signed(q, 4), first)], s, None))
    return out


def _q3_scale(vec, blk, at, i):
    """Q3_K's scale i (i8, -32..31) from its 12 bytes at `at`: the low 4 bits in a nibble
    of byte i % 8 (low for i < 8), the high 2 in bits 2 (i // 4), +1 of byte 8 + i % 4."""
    b, i8 = vec.b, vec.i8
    low = vec.byte(blk, at + i % 8)
    low = b.and_(low, i8(15)) if i < 8 else b.lshr(low, i8(4))
    high = b.and_(b.lshr(vec.byte(blk, at + 8 + i % 4), i8(2 * (i // 4))), i8(3))
    return b.sub(b.or_(low, b.shl(high, i8(4))), i8(32))


def _q4_k(vec, blk):
    return _k_terms(vec, blk, 16, None)


def _q5_k(vec, blk):
    return _k_terms(vec, blk, 48, 16)


def _k_terms(vec, blk, qs_at, qh_at):
    """Q4_K's and Q5_K's blocks: d, dmin, 12 bytes of scales and minimums, (Q5_K) 32
    bytes of fifth bits at qh_at, then at qs_at 4 chunks of 32 bytes: a chunk's low
    nibbles are sub-block 2c (weights 64c ..), its high nibbles sub-block 2c + 1, whose
    fifth bits are bits 2c and 2c + 1 of the qh bytes."""
    b = vec.b
    d, dmin = vec.half(blk, 0), vec.half(blk, 2)
    out = []
    for s in range(8):
        sc, mn = _k_scale_min(vec, blk, 4, s)
        ds, dm = b.fmul(d, b.uitofp(sc, vec.f32)), b.fmul(dmin, b.uitofp(mn, vec.f32))
        chunk = qs_at + (s // 2) * 32
        part = vec.low if s % 2 == 0 else vec.high
        values = []
        for h in (0, LANES):
            q = part(vec.byte_lanes(blk, chunk + h))
            if qh_at is not None:
                bit = b.lshr(vec.byte_lanes(blk, qh_at + h), vec.const(vec.bytes, s))
                q = b.or_(q, b.shl(b.and_(bit, vec.const(vec.bytes, 1)), vec.const(vec.bytes, 4)))
            values.append((vec.unsigned(q), 32 * s + h))
        out.append((values, ds, b.fsub(vec.f32(-0.0), dm)))
    return out


def _k_scale_min(vec, blk, at, s):
    """Sub-block s's 6-bit scale and minimum (i8) from the 12 bytes at `at`: bytes 0-3
    and 4-7 hold scales and minimums 0-3 and, in their top 2 bits, the high bits of 4-7;
    bytes 8-11 the low 4 bits of scales 4-7 (low nibble) and minimums 4-7 (high)."""
    b, i8 = vec.b, vec.i8
    if s < 4:
        return (
            b.and_(vec.byte(blk, at + s), i8(63)),
            b.and_(vec.byte(blk, at + 4 + s), i8(63)),
        )
    j = s - 4
    low = vec.byte(blk, at + 8 + j)
    sc = b.or_(b.and_(low, i8(15)), b.shl(b.lshr(vec.byte(blk, at + j), i8(6)), i8(4)))
    mn = b.or_(b.lshr(low, i8(4)), b.shl(b.lshr(vec.byte(blk, at + 4 + j), i8(6)), i8(4)))
    return sc, mn


def _q6_k(vec, blk):
    # ql (128 bytes), qh (64), 16 int8 scales, d: weight 128 h + 32 f + j is nibble f // 2
    # of ql byte 64 h + 32 (f % 2) + j with bits 2f, 2f + 1 of qh byte 32 h + j above
    # it, less 32; its scale is that of its 16-weight group
    b = vec.b
    d = vec.half(blk, 208)
    out = []
    for h, f, lane, group, first in _groups_of_16():
        ql = vec.byte_lanes(blk, 64 * h + 32 * (f % 2) + lane)
        nibble = vec.low(ql) if f < 2 else vec.high(ql)
        top = b.shl(
            _two_bits(vec, vec.byte_lanes(blk, 128 + 32 * h + lane), f), vec.const(vec.bytes, 4)
        )
        v = vec.signed(b.or_(nibble, top), 32)
        scale = b.fmul(d, b.sitofp(vec.byte(blk, 192 + group), vec.f32))
        out.append(([(v, first)], scale, None))
    return out


_READERS = {
    "q4_0": _q4_0,
    "q4_1": _q4_1,
    "q5_0": _q5_0,
    "q5_1": _q5_1,
    "q8_0": _q8_0,
    "q2_k": _q2_k,
    "q3_k": _q3_k,
    "q4_k": _q4_k,
    "q5_k": _q5_k,
    "q6_k": _q6_k,
}
