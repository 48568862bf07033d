"""numba kernels for ggml-quantized weights on the CPU: fused dot products and row decoders.

Imported only when numba is installed (the `ember[jit]` extra); array_qmatmul chooses.
Every kernel reads a weight's raw ggml blocks where they lie (a view of the file's memory
map) and never keeps a decoded copy, so memory stays the file's size.

Two kinds per type, one ``row(raw, b, out)`` decoder each:

- ``dot_<type>(raw, x, xs, out, r0, r1)``: ``out[i, r] = dot(decode(raw[r]), x[i])`` for
  weight rows ``r0:r1``. Each block's scale (and min) is factored out of its sum, as ggml
  does: ``d * sum(q * x) + m * sum(x)``; the per-16 sums of x, ``xs``, come in
  precomputed. The int-to-float conversions and multiply-adds of a block's 16 to 32
  values are one short loop LLVM vectorizes.
- ``decode_rows(raw, kind, out, r0, r1)``: f32 rows, the same values as
  core/io/quant.py's dequantizers, for a BLAS GEMM over many rows of x (a prompt).

Results differ from dequantize-then-matmul only by the order of the f32 additions.
Half floats go through ``F16``, a 65,536-entry f32 table made by numpy's exact cast.
(ggml's F16 type itself, a half per weight, has its kernels in llvm_f16; Q4_0, Q4_1,
Q5_0, Q8_0, Q4_K and Q6_K theirs in llvm_quant, whose explicit vector code ran 1.1-2.4x
faster than these kernels' did, and which spares a model in those types numba's
import. These are the types left: Q5_1, Q2_K, Q3_K, Q5_K.)
"""

import numba
import numpy as np

from .numba_prefetch import prefetch

F16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)

_JIT = {"nogil": True, "cache": True, "fastmath": True, "error_model": "numpy"}
_f32 = np.float32


@numba.njit(inline="always", **_JIT)
def _h(row, o, f16):
    return f16[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]


# --- fused dot products: one per type -------------------------------------------------------
# Most kernels take two weight rows at a time (rows a and b share every load of
# x) and keep f32 accumulators per lane of a block (acc[row, lane]): a block adds
# d * (q * x) lane by lane, with no sum across lanes until the row ends. A block's min or
# offset term is m * sum(x over the block), from xs.
#
# How LLVM is led to good vector code here, each measured (one thread, 2048 x 768):
# - Both rows are updated in one loop over a block's lanes. The same update written as one
#   helper call per row (two loops) ran 5-6x slower.
# - A byte's nibbles are split in f32 arithmetic (f = byte, hi = floor(f / 16),
#   lo = f - 16 hi: exact, the values are small integers). numba widens integer operations
#   to 64 bits, and the int64 nibbles were converted to f32 8 lanes at a time, with many
#   more instructions (Q4_1 6.4 -> 9.6 G weights/s with this and the next point).
# - Where a byte's two nibbles share a scale (Q4_0, Q4_1, Q5_0, Q5_1), one lane sums both
#   products (lo * x_lo + hi * x_hi): half the accumulators to load and store. Q8_0's
#   bytes j and j + 16 share a lane the same way.
# - Loop-invariant work leaves the lanes' loop: the K-quants' 6-bit scales are decoded once
#   a block (_k_block_scales), Q5_0/Q5_1's fifth bits meet x through a table of sums
#   (_bit_sums).
# - Q6_K's indices are made unsigned (_u), and each kernel asks for its rows ahead of use
#   (_prefetch_rows).


# Bytes of weight rows a kernel asks for ahead of the rows it computes (numba_prefetch)
PREFETCH_BYTES = 4096


@numba.njit(inline="always", **_JIT)
def _prefetch_rows(raw, r, n, r0, r1):
    """Before rows r .. r + n - 1 of raw[r0:r1] are computed: ask for the rows
    PREFETCH_BYTES ahead of them, and at r0 for the first PREFETCH_BYTES too (loads
    asked for together overlap; a row's own loads, one after another, did not)."""
    width = raw.shape[1]
    ahead = max(n, PREFETCH_BYTES // max(width, 1))
    start = r0 if r == r0 else r + ahead
    for t in range(start, min(r + ahead + n, r1)):
        for c in range(0, width, 64):
            prefetch(raw, t, c)


@numba.njit(inline="always", **_JIT)
def _u(i):
    """An index as uint64, inside [] only (numba makes uint64 + int64 a float64). numba
    wraps a negative signed index around, and where LLVM cannot prove an index
    non-negative that select turned each vector load into a gather of single bytes
    (Q6_K, 2048 x 768, one thread: 0.91 -> 0.32 ms)."""
    return np.uint64(i)


@numba.njit(inline="always", **_JIT)
def _hi_nibble(f):
    """A byte's high nibble from the byte as f32 (its low nibble is f - 16 * hi)."""
    return np.floor(f * _f32(0.0625))


@numba.njit(inline="always", **_JIT)
def _put(out, i, r, r1, acc, ma, mb):
    out[i, r] = acc[0].sum() + ma
    if r + 1 < r1:
        out[i, r + 1] = acc[1].sum() + mb


@numba.njit(inline="always", **_JIT)
def _u32(row, o):
    return (
        np.uint32(row[o])
        | (np.uint32(row[o + 1]) << 8)
        | (np.uint32(row[o + 2]) << 16)
        | (np.uint32(row[o + 3]) << 24)
    )


@numba.njit(inline="always", **_JIT)
def _q4_pair(acc, ra, rb, da, db, qs_at, xi, k):
    """acc[0] and acc[1] += d * (nibble * x) over one block's 16 bytes of 4-bit values of
    rows a and b: byte j holds weights j (low nibble) and j + 16 (high)."""
    for j in range(16):
        va, vb = _f32(ra[qs_at + j]), _f32(rb[qs_at + j])
        ha, hb = _hi_nibble(va), _hi_nibble(vb)
        xl, xh = xi[k + j], xi[k + 16 + j]
        acc[0, j] += da * ((va - _f32(16.0) * ha) * xl + ha * xh)
        acc[1, j] += db * ((vb - _f32(16.0) * hb) * xl + hb * xh)


@numba.njit(inline="always", **_JIT)
def _bit_sums(xi, table):
    """table[g, v] = the sum of xi[8g + t] over the bits t set in byte v. A Q5_0/Q5_1
    block's fifth bits (its 32-bit qh: bit j is weight j's, +16 where set) then meet x in
    four lookups, one per qh byte, and its nibbles go through Q4_0's loop. Shifting the
    bits out of qh in the lanes took as long as all the rest (numba makes the shifts
    64-bit): 2048 x 768 Q5_0, one thread, 0.28 -> 0.19 ms with this table."""
    for g in range(table.shape[0]):
        table[g, 0] = 0
        for t in range(8):
            xt = xi[8 * g + t]
            for v in range(1 << t, 2 << t):
                table[g, v] = table[g, v - (1 << t)] + xt


@numba.njit(inline="always", **_JIT)
def _q5_bits(table, g, row, qh_at):
    """sum(x over the weights whose fifth bit is set) of the Q5 block whose qh is at qh_at
    and whose x starts at 8 g (table from _bit_sums)."""
    return (
        table[g, row[qh_at]]
        + table[g + 1, row[qh_at + 1]]
        + table[g + 2, row[qh_at + 2]]
        + table[g + 3, row[qh_at + 3]]
    )


@numba.njit(**_JIT)
def dot_q5_1(raw, x, xs, out, r0, r1, f16):
    nb = raw.shape[1] // 24
    acc = np.zeros((2, 16), np.float32)
    table = np.empty((nb * 4, 256), np.float32)
    for i in range(x.shape[0]):
        xi = x[i]
        _bit_sums(xi, table)
        for r in range(r0, r1, 2):
            _prefetch_rows(raw, r, 2, r0, r1)
            ra, rb = raw[r], raw[min(r + 1, r1 - 1)]
            acc[:] = 0
            ma = mb = _f32(0.0)
            for b in range(nb):
                o, k = b * 24, b * 32
                da, db = _h(ra, o, f16), _h(rb, o, f16)
                _q4_pair(acc, ra, rb, da, db, o + 8, xi, k)
                xsb = xs[i, 2 * b] + xs[i, 2 * b + 1]
                ma += _h(ra, o + 2, f16) * xsb + _f32(16.0) * da * _q5_bits(table, 4 * b, ra, o + 4)
                mb += _h(rb, o + 2, f16) * xsb + _f32(16.0) * db * _q5_bits(table, 4 * b, rb, o + 4)
            _put(out, i, r, r1, acc, ma, mb)


# --- K-quants (256 weights per super-block) ---------------------------------------------------
@numba.njit(inline="always", **_JIT)
def _fields2(f):
    """A byte's four 2-bit fields (bits 0-1, 2-3, 4-5, 6-7) from the byte as f32, in f32
    arithmetic (see the nibble split above)."""
    t3 = np.floor(f * _f32(1.0 / 64.0))
    f = f - _f32(64.0) * t3
    t2 = _hi_nibble(f)
    f = f - _f32(16.0) * t2
    t1 = np.floor(f * _f32(0.25))
    return f - _f32(4.0) * t1, t1, t2, t3


@numba.njit(inline="always", **_JIT)
def _bits4(f):
    """The four bits of f in 0..15 (as f32), lowest first."""
    b3 = np.floor(f * _f32(0.125))
    f = f - _f32(8.0) * b3
    b2 = np.floor(f * _f32(0.25))
    f = f - _f32(4.0) * b2
    b1 = np.floor(f * _f32(0.5))
    return f - _f32(2.0) * b1, b1, b2, b3


# Q2_K, Q3_K and Q6_K go one row at a time (with two, a loop iteration held too many
# values: Q6_K 0.36 against 0.32 ms, 2048 x 768, without the rows' min terms). A 128-weight
# half of a block goes in two runs of 16 lanes (s): lane u takes weights
# half*128 + 32f + 16s + u, f = 0..3, of the 16-weight groups half*8 + 2f + s.


@numba.njit(inline="always", **_JIT)
def _quad_lane(acc, u, xi, kx, s0, s1, s2, s3, q0, q1, q2, q3):
    """Lane u of a 128-weight half (see above): its four values times their x (32 apart
    from kx + u) and their groups' scales."""
    acc[u] += (
        s0 * (q0 * xi[_u(kx + u)])
        + s1 * (q1 * xi[_u(kx + 32 + u)])
        + s2 * (q2 * xi[_u(kx + 64 + u)])
        + s3 * (q3 * xi[_u(kx + 96 + u)])
    )


@numba.njit(**_JIT)
def dot_q2_k(raw, x, xs, out, r0, r1, f16):
    # weight half*128 + 32f + j is field f of qs byte half*32 + j; group g's scale byte
    # holds d's multiplier (low nibble) and dmin's (high): the values are dl * q - ml
    nb = raw.shape[1] // 84
    acc = np.zeros(16, np.float32)
    for i in range(x.shape[0]):
        xi = x[i]
        for r in range(r0, r1):
            _prefetch_rows(raw, r, 1, r0, r1)
            row = raw[r]
            acc[:] = 0
            m = _f32(0.0)
            for b in range(nb):
                o, k = b * 84, b * 256
                d, dmin = _h(row, o + 80, f16), _h(row, o + 82, f16)
                for g in range(16):
                    m -= dmin * _f32(np.int32(row[o + g]) >> 4) * xs[i, b * 16 + g]
                for half in range(2):
                    for s in range(2):
                        gs = o + half * 8 + s
                        s0 = d * _f32(np.int32(row[gs]) & 15)
                        s1 = d * _f32(np.int32(row[gs + 2]) & 15)
                        s2 = d * _f32(np.int32(row[gs + 4]) & 15)
                        s3 = d * _f32(np.int32(row[gs + 6]) & 15)
                        q, kx = o + 16 + half * 32 + 16 * s, k + half * 128 + 16 * s
                        for u in range(16):
                            t0, t1, t2, t3 = _fields2(_f32(row[_u(q + u)]))
                            _quad_lane(acc, u, xi, kx, s0, s1, s2, s3, t0, t1, t2, t3)
            out[i, r] = acc.sum() + m


@numba.njit(inline="always", **_JIT)
def _q3_scale(row, o, g):
    """Q3_K's 6-bit signed scale of group g (bytes o+96 .. o+107), for the row decoder."""
    s = o + 96
    lo = (np.int64(row[s + g]) & 15) if g < 8 else (np.int64(row[s + g - 8]) >> 4)
    hi = (np.int64(row[s + 8 + g % 4]) >> (2 * (g // 4))) & 3
    return (lo | (hi << 4)) - 32


@numba.njit(inline="always", **_JIT)
def _q3_block_scales(row, o, d, sc):
    """sc[g] = d * group g's 6-bit signed scale, for the Q3_K block at o (12 bytes at
    o + 96: group g's low 4 bits are byte g's low nibble, or byte g - 8's high one from
    g = 8; its high 2 bits are field g // 4 of byte 8 + g % 4). In two loops of 8, with
    no branch: one per group cost more than the block's lanes."""
    s = o + 96
    for g in range(8):
        hi = (np.int32(row[s + 8 + g % 4]) >> (2 * (g // 4))) & 3
        sc[g] = d * _f32(((np.int32(row[s + g]) & 15) | (hi << 4)) - 32)
    for g in range(8, 16):
        hi = (np.int32(row[s + 8 + g % 4]) >> (2 * (g // 4))) & 3
        sc[g] = d * _f32(((np.int32(row[s + g - 8]) >> 4) | (hi << 4)) - 32)


@numba.njit(**_JIT)
def dot_q3_k(raw, x, xs, out, r0, r1, f16):
    # weight half*128 + 32f + j has its low 2 bits in field f of qs byte half*32 + j and
    # its high bit (+4) in bit half*4 + f of hmask byte j; the values are q - 4, whose -4
    # is -4 * scale * sum(x over the group), from xs
    nb = raw.shape[1] // 110
    acc = np.zeros(16, np.float32)
    sc = np.zeros(16, np.float32)
    for i in range(x.shape[0]):
        xi = x[i]
        for r in range(r0, r1):
            _prefetch_rows(raw, r, 1, r0, r1)
            row = raw[r]
            acc[:] = 0
            m = _f32(0.0)
            for b in range(nb):
                o, k = b * 110, b * 256
                d = _h(row, o + 108, f16)
                _q3_block_scales(row, o, d, sc)
                for g in range(16):
                    m -= _f32(4.0) * sc[g] * xs[i, b * 16 + g]
                for half in range(2):
                    shift = _f32(1.0) / _f32(1 << (4 * half))  # hmask bits half*4 ..
                    for s in range(2):
                        g0 = half * 8 + s
                        s0, s1, s2, s3 = sc[g0], sc[g0 + 2], sc[g0 + 4], sc[g0 + 6]
                        q, kx = o + 32 + half * 32 + 16 * s, k + half * 128 + 16 * s
                        hm = o + 16 * s
                        for u in range(16):
                            t0, t1, t2, t3 = _fields2(_f32(row[_u(q + u)]))
                            h = np.floor(_f32(row[_u(hm + u)]) * shift)
                            h0, h1, h2, h3 = _bits4(h - _f32(16.0) * _hi_nibble(h))
                            four = _f32(4.0)
                            _quad_lane(
                                acc,
                                u,
                                xi,
                                kx,
                                s0,
                                s1,
                                s2,
                                s3,
                                t0 + four * h0,
                                t1 + four * h1,
                                t2 + four * h2,
                                t3 + four * h3,
                            )
            out[i, r] = acc.sum() + m


@numba.njit(inline="always", **_JIT)
def _k_scale_min(row, s, j):
    """Q4_K/Q5_K's 6-bit scale and min of sub-block j, from the 12 bytes at s."""
    if j < 4:
        return np.int64(row[s + j]) & 63, np.int64(row[s + j + 4]) & 63
    a, m, c = np.int64(row[s + j - 4]), np.int64(row[s + j]), np.int64(row[s + j + 4])
    return (c & 15) | ((a >> 6) << 4), (c >> 4) | ((m >> 6) << 4)


@numba.njit(inline="always", **_JIT)
def _k_block_scales(row, o, xs, i, b, f16, sc, n):
    """sc[n, j] = d * scale_j (j = 0..7) of the Q4_K/Q5_K block at o, and its min term:
    dmin * sum_j min_j * sum(x over sub-block j). Once a block, ahead of its lanes: decoded
    inside the sub-block loop, next to the lanes, they took 70% of dot_q4_k's time
    (2048 x 768, one thread: 0.40 -> 0.19 ms)."""
    d, dmin = _h(row, o, f16), _h(row, o + 2, f16)
    mins = _f32(0.0)
    for j in range(8):
        s, m = _k_scale_min(row, o + 4, j)
        sc[n, j] = d * _f32(s)
        g = b * 16 + 2 * j
        mins += _f32(m) * (xs[i, g] + xs[i, g + 1])
    return dmin * mins


@numba.njit(inline="always", **_JIT)
def _q5_k_bits(h, p):
    """Bits 2c and 2c + 1 of a Q5_K qh byte h (as f32), times 16: the tops of sub-blocks
    2c (low nibbles) and 2c + 1 (high nibbles), in f32 arithmetic; p = 2 ** -2c."""
    f1 = np.floor(h * p)
    f2 = np.floor(h * (p * _f32(0.5)))
    f3 = np.floor(h * (p * _f32(0.25)))
    return _f32(16.0) * (f1 - _f32(2.0) * f2), _f32(16.0) * (f2 - _f32(2.0) * f3)


@numba.njit(**_JIT)
def dot_q5_k(raw, x, xs, out, r0, r1, f16):
    # Q4_K's layout (4 chunks of 32 bytes, low nibbles then high), with each value's fifth
    # bit from qh byte j (bit 2c for the low nibble of byte c*32 + j, 2c + 1 for its high)
    nb = raw.shape[1] // 176
    acc = np.zeros((2, 16), np.float32)
    sc = np.zeros((2, 8), np.float32)
    for i in range(x.shape[0]):
        xi = x[i]
        for r in range(r0, r1, 2):
            _prefetch_rows(raw, r, 2, r0, r1)
            ra, rb = raw[r], raw[min(r + 1, r1 - 1)]
            acc[:] = 0
            ma = mb = _f32(0.0)
            for b in range(nb):
                o = b * 176
                ma -= _k_block_scales(ra, o, xs, i, b, f16, sc, 0)
                mb -= _k_block_scales(rb, o, xs, i, b, f16, sc, 1)
                for c in range(4):
                    a0, a1, b0, b1 = sc[0, 2 * c], sc[0, 2 * c + 1], sc[1, 2 * c], sc[1, 2 * c + 1]
                    q, kk = o + 48 + c * 32, b * 256 + c * 64
                    p = _f32(1.0) / _f32(1 << (2 * c))
                    for j in range(16):  # bytes j and j + 16 into lane j
                        va, vb = _f32(ra[q + j]), _f32(rb[q + j])
                        wa, wb = _f32(ra[q + 16 + j]), _f32(rb[q + 16 + j])
                        ha, hb = _hi_nibble(va), _hi_nibble(vb)
                        ga, gb = _hi_nibble(wa), _hi_nibble(wb)
                        la, lha = _q5_k_bits(_f32(ra[o + 16 + j]), p)
                        lb, lhb = _q5_k_bits(_f32(rb[o + 16 + j]), p)
                        ma_, mha = _q5_k_bits(_f32(ra[o + 32 + j]), p)
                        mb_, mhb = _q5_k_bits(_f32(rb[o + 32 + j]), p)
                        x0, x1 = xi[kk + j], xi[kk + 16 + j]
                        x2, x3 = xi[kk + 32 + j], xi[kk + 48 + j]
                        acc[0, j] += a0 * (
                            (va - _f32(16.0) * ha + la) * x0 + (wa - _f32(16.0) * ga + ma_) * x1
                        )
                        acc[0, j] += a1 * ((ha + lha) * x2 + (ga + mha) * x3)
                        acc[1, j] += b0 * (
                            (vb - _f32(16.0) * hb + lb) * x0 + (wb - _f32(16.0) * gb + mb_) * x1
                        )
                        acc[1, j] += b1 * ((hb + lhb) * x2 + (gb + mhb) * x3)
            _put(out, i, r, r1, acc, ma, mb)


# --- row decoders: a prompt's many rows of x go through BLAS on f32 rows ----------------------
# Without fastmath: the values are the same bits as core/io/quant.py's dequantizers (the
# same operations in the same order, no fused multiply-add).
#
# A decoder whose inner loop had a runtime trip count (a block's 16 or 32 values, from
# the shapes) was turned by LLVM's loop vectorizer into 8-lane vector code; with a
# constant count the loop was unrolled first and stayed scalar (the Q4_0, Q4_1 and Q8_0
# decoders, now llvm_quant's, gained 2.4-3.9x that way). The types here gained nothing
# (Q6_K lost a third) and keep their constant counts.
_EXACT = {"nogil": True, "cache": True, "error_model": "numpy"}


@numba.njit(inline="always", **_EXACT)
def _q5_values(row, qh_at, qs_at, w, k, d, m, off):
    """w[k:k+32] = d * (q - off) of a Q5_0 block (off = 16), d * q + m of a Q5_1 block (off
    = 0): no + 0.0 for Q5_0, which would turn a product's -0.0 into +0.0."""
    qh = _u32(row, qh_at)
    for j in range(16):
        v = np.uint32(row[qs_at + j])
        lo = np.int32((v & 15) | (((qh >> j) & 1) << 4)) - off
        hi = np.int32((v >> 4) | (((qh >> (j + 16)) & 1) << 4)) - off
        if off:
            w[k + j] = d * _f32(lo)
            w[k + 16 + j] = d * _f32(hi)
        else:
            w[k + j] = d * _f32(lo) + m
            w[k + 16 + j] = d * _f32(hi) + m


@numba.njit(**_EXACT)
def decode_q5_1(raw, out, r0, r1, f16):
    for r in range(r0, r1):
        row, w = raw[r], out[r - r0]
        for b in range(raw.shape[1] // 24):
            o = b * 24
            _q5_values(row, o + 4, o + 8, w, b * 32, _h(row, o, f16), _h(row, o + 2, f16), 0)


@numba.njit(**_EXACT)
def decode_q2_k(raw, out, r0, r1, f16):
    for r in range(r0, r1):
        row, w = raw[r], out[r - r0]
        for b in range(raw.shape[1] // 84):
            o, k = b * 84, b * 256
            d, dmin = _h(row, o + 80, f16), _h(row, o + 82, f16)
            for g in range(16):
                sc = np.int32(row[o + g])
                dl, ml = d * _f32(sc & 15), dmin * _f32(sc >> 4)
                half, f, j0 = g // 8, (g // 2) % 4, (g % 2) * 16
                q = o + 16 + half * 32 + j0
                for t in range(16):
                    w[k + g * 16 + t] = _f32((np.int32(row[q + t]) >> (2 * f)) & 3) * dl - ml


@numba.njit(**_EXACT)
def decode_q3_k(raw, out, r0, r1, f16):
    for r in range(r0, r1):
        row, w = raw[r], out[r - r0]
        for b in range(raw.shape[1] // 110):
            o, k = b * 110, b * 256
            d = _h(row, o + 108, f16)
            for g in range(16):
                dl = d * _f32(_q3_scale(row, o, g))
                kk, j0 = g // 2, (g % 2) * 16
                half, f = kk // 4, kk % 4
                for t in range(16):
                    j = j0 + t
                    lo = (np.int32(row[o + 32 + half * 32 + j]) >> (2 * f)) & 3
                    hb = (np.int32(row[o + j]) >> kk) & 1
                    w[k + g * 16 + t] = dl * _f32(lo + 4 * hb - 4)


@numba.njit(inline="always", **_EXACT)
def _k_scales(row, o, s, f16):
    """d * sc and dmin * m of sub-block s of a Q4_K/Q5_K block."""
    sc, mn = _k_scale_min(row, o + 4, s)
    return _h(row, o, f16) * _f32(sc), _h(row, o + 2, f16) * _f32(mn)


@numba.njit(**_EXACT)
def decode_q5_k(raw, out, r0, r1, f16):
    for r in range(r0, r1):
        row, w = raw[r], out[r - r0]
        for b in range(raw.shape[1] // 176):
            o, k = b * 176, b * 256
            for c in range(4):
                d0, m0 = _k_scales(row, o, 2 * c, f16)
                d1, m1 = _k_scales(row, o, 2 * c + 1, f16)
                q, kk = o + 48 + c * 32, k + c * 64
                for j in range(32):
                    v, h = np.int32(row[q + j]), np.int32(row[o + 16 + j])
                    lo = (v & 15) | (((h >> (2 * c)) & 1) << 4)
                    hi = (v >> 4) | (((h >> (2 * c + 1)) & 1) << 4)
                    w[kk + j] = _f32(lo) * d0 - m0
                    w[kk + 32 + j] = _f32(hi) * d1 - m1


# --- every dot kernel over the cores: array_qkernels_parallel launches these -----------------
# spread_<type>(raw, x, xs, out, rows, f16, chunks) splits the weight's rows into `chunks`
# spans of whole row pairs, one per iteration of numba's parallel loop, each running the
# type's kernel: a row's bits are the same on any number of spans.
#
# They live here, beside the kernels, because numba's cache checks only the source file of
# the function it compiled: a wrapper cached in another file kept the kernels it had
# inlined after this file changed (stale code, other bits). The ten are written out, not
# made by a factory: cache files are named by a function's qualified name, which functions
# made by one factory share.
_PAR = {"parallel": True, "nogil": True, "cache": True}


@numba.njit(inline="always", nogil=True, cache=True)
def _span(c, chunks, rows):
    step = ((rows + chunks - 1) // chunks + 1) // 2 * 2  # even: row pairs stay whole
    a = c * step
    return a, min(a + step, rows)


@numba.njit(**_PAR)
def spread_q5_1(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            dot_q5_1(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def spread_q2_k(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            dot_q2_k(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def spread_q3_k(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            dot_q3_k(raw, x, xs, out, a, b, f16)


@numba.njit(**_PAR)
def spread_q5_k(raw, x, xs, out, rows, f16, chunks):
    for c in numba.prange(chunks):
        a, b = _span(c, chunks, rows)
        if a < b:
            dot_q5_k(raw, x, xs, out, a, b, f16)
