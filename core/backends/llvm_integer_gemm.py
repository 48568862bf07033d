"""A many-row product with a ggml block weight in integer arithmetic (AVX-512 VNNI): x
rounded to 16-bit integers per group of 32 values, the weight's 32-weight groups packed
piece by piece as 16-bit integers, and their dot products taken 32 word pairs an
instruction (``vpdpwssd``) with exact 32-bit sums, instead of 16 float multiply-adds.

Why: a prompt's products are GEMMs (SmolLM2-135M, 128 tokens: 27 GFLOP), and numpy's
OpenBLAS runs f32 GEMMs of these shapes (128 x 576 @ 576 x 576 ... 1536) at 90-100
GFLOP/s a core here, MKL (torch's) at 100-130: decoding the weight to f32 and calling
sgemm (llvm_decode_gemm) could not reach torch's prompt speed (0.66-0.69x). This
kernel runs 128 x 576 @ 576 x 384 at 213-230 GFLOP/s-equivalent on one core (0.25 ms,
the weight's packing 0.03-0.08 ms more, against sgemm's 0.6); SmolLM2-135M's 128-token
prompt went 296 -> ~180 ms (with the prompt's attention through llvm_attention_rows),
801.7 tok/s against torch's 448.6 in one run of benchmarks/llm.py.

What it computes: with x's row split in groups of 32, each group rounded as
``dx = max|x| / QMAX, q = rint(x * (QMAX / max|x|))``, a weight group as the format's
``s * u + c`` with u an integer 0-255 (``u = v - lowest``: Q4_0's q - 8 read as q with
c = -8 s, Q8_0's signed bytes + 128 ...), each output is

    sum over groups of  dx * (s * S) + c * (dx * sum q),   S = sum of u * q (exact, i32)

that is (x with each group rounded to QMAX steps) @ weight.T to f32 rounding: the
weight's values are exact, x's rounding the only approximation.

Why 16 bits, not 8 as llama.cpp rounds x: 8-bit x (``vpdpbusd``, 64 byte pairs an
instruction) ran the prompt in 155 ms, but moved SmolLM2's logits by 0.17-0.31 of their
standard deviation from the f32 path's (Gemma 3 270M: up to 0.74; llama.cpp's own: 0.20-
0.34 and up to 1.39), enough to flip greedy answers: SmolLM2's chat answered "What is
the capital of France?" with "L'Étoile, la Marseillaise, ..." (as llama.cpp does) instead
of "The capital of France is Paris.", and 1 of 3 other questions changed. With 16 bits
the logits stay within 0.0016 (SmolLM2) and 0.0031 (Gemma) standard deviations of the
f32 path's, the greedy answers the same.

The layout a piece is packed in (per 16 weight rows, a "column vector"): for each group
STEPS steps of 64 bytes, step s lane l the 32 bits of row l's weights PER_LANE * s ...
of the group (what one instruction multiplies with 32 bits of x broadcast), then per
group the 16 rows' s and c as f32. The micro-kernel keeps a ROWS x VECTORS tile of
outputs in registers (the current group's i32 sums, f32 accumulators) over SPAN_GROUPS
groups at a time.

Formats: those whose terms (llvm_quant_blocks) are groups of 32 weights: Q4_0, Q4_1,
Q5_0, Q5_1, Q8_0, Q4_K, Q5_K (llvm_quant adds their ``_pack`` functions); Q2_K, Q3_K
and Q6_K (terms of 16) keep llvm_decode_gemm's f32 path. Built only on x86-64 CPUs with
AVX-512 VNNI; elsewhere array_qmatmul keeps that path too.
"""

import ctypes
import sys

import numpy as np

from . import llvm_decode_gemm, llvm_spin
from .addresses import address

GROUP = 32  # weights of x rounded together, and of a weight's scale
# x's rounded values and the packed weights are 16-bit integers (see the note: 8 bits
# moved the logits too far), QMAX the largest |q|
ITEM = 2  # bytes a value
PER_LANE = 4 // ITEM  # values of a row in an instruction's 32-bit lane
STEPS = GROUP // PER_LANE  # instructions a group
GROUP_BYTES = STEPS * 64  # a column vector's packed group
QMAX = 32767
DOT = "llvm.x86.avx512.vpdpwssd.512"  # i32 lanes += two products of 16-bit pairs
# LLVM splits vpdpwssd into vpmaddwd + vpaddd (two instructions) on CPUs it does not
# tune as fast at it (Ice Lake among them), for the add's shorter latency; these tiles
# keep 12 sums apart and are bound by throughput: kept whole, 128 x 576 @ 576 x 384 ran
# in 0.23 ms against 0.38 (one core; the instruction measured 1.9 a cycle here)
TUNING = "+fast-dpwssd"
ROWS, VECTORS = 4, 3  # the micro-kernel's tile: rows of x, column vectors of 16 outputs
# groups a tile's sums run over before they go to out (and come back for the next span):
# 8 groups of three column vectors' weights are 24 KiB, in a core's L1 cache for every
# row tile (SmolLM2's down projection, k = 1,536: 98 KiB a tile unsplit, read from L2
# once a row tile, ran slower than the f32 path). 4 x 3 tiles ran SmolLM2's products at
# 141-149 GFLOP/s-equivalent on one core, 4 x 2 at 133-151, 6 x 2 at 126-143, 8 x 1 at
# 130-134 (a 48-column tile also cuts its 144-row pieces without padding)
SPAN_GROUPS = 8
LANES = 16
TILE_COLUMNS = VECTORS * LANES
# the driver's arguments (llvm_spin.add_pieces'): (t0, t1, table, xq, x scales, padded
# rows, k, out, ldo, scratch, pack function); the table's header words after the
# pieces' count: scratch bytes per thread, rows of out (then llvm_decode_gemm's pieces)
_P, _I = ctypes.c_void_p, ctypes.c_int64
_ARGS = (_I, _I, _P, _P, _P, _I, _I, _P, _I, _P, _I)
HEADER = 4
PIECE_WORDS = llvm_decode_gemm.PIECE_WORDS


def supported(host):
    """Whether this CPU (llvm_build.host()) has what the kernels need."""
    triple, _, flat, _ = host
    features = set(flat.split(","))
    return llvm_spin.supported(triple) and {"+avx512vnni", "+avx512bw", "+avx512f"} <= features


def build():
    from . import llvm_build

    if not supported(llvm_build.host()):
        return None
    engine = llvm_build.compile_kernels(
        sys.modules[__name__], _ir_module, sources=(llvm_spin,), tuning=TUNING
    )
    return IntegerGemm(engine)


def packed_bytes(rows, k):
    """Scratch bytes one thread needs for a piece of `rows` weight rows of k weights:
    the bytes, then each group's s and c."""
    cols = -(-rows // TILE_COLUMNS) * TILE_COLUMNS
    return cols * k * ITEM + 2 * 4 * cols * (k // GROUP)


class IntegerGemm:
    def __init__(self, engine):
        self._engine = engine  # owns the machine code
        addr = engine.get_function_address
        self._quantize = ctypes.CFUNCTYPE(None, _P, _I, _I, _I, _P, _P)(addr("ember_quantize_x"))
        self._run = ctypes.CFUNCTYPE(None, *_ARGS)(addr("ember_integer_gemm"))
        self._split = ctypes.CFUNCTYPE(_I, _P, _I, *_ARGS)(addr("ember_integer_gemm_split"))

    def quantize(self, x2):
        """(q int16 [m padded to ROWS, k], scales f32 [2, m padded, k / GROUP]: dx, then
        dx * sum q) of x2 (C-contiguous float32 [m, k], k a multiple of GROUP); the
        padding rows are zeros."""
        m, k = x2.shape
        mp = -(-m // ROWS) * ROWS
        q = np.zeros((mp, k), np.int16)
        scales = np.zeros((2, mp, k // GROUP), np.float32)
        self._quantize(address(x2), m, k, mp * (k // GROUP), address(q), address(scales))
        return q, scales

    def run(self, x2, out, pieces, pack, helpers):
        """out[:, at + r0 : at + r1] = rounded(x2) @ weight(rows[r0:r1]).T for each piece
        (rows, r0, r1, at) of a weight whose format packs through `pack` (its compiled
        _pack function's address), shared with `helpers` (or None)."""
        m, k = x2.shape
        q, scales = self.quantize(x2)
        widest = max(r1 - r0 for _, r0, r1, _ in pieces)
        per_thread = -(-packed_bytes(widest, k) // 64) * 64
        threads = 1 if helpers is None else helpers.count + 1
        scratch = np.empty(threads * per_thread + 64, np.uint8)
        start = -address(scratch) % 64  # each thread's packed bytes on a line of their own
        table = llvm_decode_gemm.piece_table(pieces, (per_thread, m))
        args = (address(q), address(scales), q.shape[0], k, address(out), out.strides[0] // 4)
        scratch_at = address(scratch) + start
        llvm_spin.run_team(self._run, self._split, helpers, table, *args, scratch_at, pack)


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple):
    from .llvm_ir import new_module

    module = new_module("ember_integer_gemm", triple)
    _add_quantize(module)
    _add_driver(module, _add_tiles(module))
    return module


def _types():
    from llvmlite import ir

    i8, i32, f32 = ir.IntType(8), ir.IntType(32), ir.FloatType()
    return ir, i8, i32, f32, ir.VectorType(i32, LANES), ir.VectorType(f32, LANES)


def _add_quantize(module):
    """``ember_quantize_x(f32 *x, i64 m, i64 k, i64 plane, i8 *q, f32 *scales)``: rows of
    x rounded per GROUP (see the module's note); scales[g] = dx, scales[plane + g] =
    dx * sum q, g counting the groups row after row."""
    from .llvm_ir import I64, intrinsic, loop, splat, vector_load

    ir, i8, _, f32, vi, vf = _types()
    fn = ir.Function(
        module,
        ir.FunctionType(
            ir.VoidType(), [f32.as_pointer(), I64, I64, I64, i8.as_pointer(), f32.as_pointer()]
        ),
        "ember_quantize_x",
    )
    x, m, k, plane, q, scales = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fabs = intrinsic(module, "llvm.fabs.v16f32", vf, 1)
    rint = intrinsic(module, "llvm.rint.v16f32", vf, 1)
    vmax = intrinsic(module, "llvm.maxnum.v16f32", vf, 2)
    groups = b.udiv(k, I64(GROUP))
    vb = ir.VectorType(ir.IntType(8 * ITEM), LANES)

    def row(b, r):
        def group(b, g):
            at = b.add(b.mul(r, k), b.mul(g, I64(GROUP)))
            lo = vector_load(b, b.gep(x, [at]), vf)
            hi = vector_load(b, b.gep(x, [b.add(at, I64(LANES))]), vf)
            top = b.call(vmax, [b.call(fabs, [lo]), b.call(fabs, [hi])])
            amax = _lanes_max(b, top)
            d = b.fdiv(amax, f32(float(QMAX)))
            inv = b.select(
                b.fcmp_ordered(">", amax, f32(0.0)), b.fdiv(f32(float(QMAX)), amax), f32(0.0)
            )
            total = ir.Constant(vi, [0] * LANES)
            for h, v in ((0, lo), (LANES, hi)):
                qi = b.fptosi(b.call(rint, [b.fmul(v, splat(b, inv, vf))]), vi)
                total = b.add(total, qi)
                byte = b.mul(b.add(at, I64(h)), I64(ITEM))
                dst = b.bitcast(b.gep(q, [byte]), vb.as_pointer())
                b.store(b.trunc(qi, vb), dst, align=1)
            s = _lanes_sum(b, total)
            slot = b.add(b.mul(r, groups), g)
            b.store(d, b.gep(scales, [slot]))
            b.store(b.fmul(d, b.sitofp(s, f32)), b.gep(scales, [b.add(plane, slot)]))

        loop(b, I64(0), groups, group, "g")

    loop(b, I64(0), m, row, "r")
    b.ret_void()


def _halving(b, v, step):
    """v's lanes combined by `step` (an IRBuilder method) in a fixed tree: lane 0 holds it."""
    from llvmlite import ir

    n = v.type.count
    while n > 1:
        n //= 2
        lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(n))))
        hi = b.shuffle_vector(
            v, v, ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(n, 2 * n)))
        )
        v = step(lo, hi)
    return b.extract_element(v, ir.IntType(32)(0))


def _lanes_max(b, v):
    return _halving(b, v, lambda lo, hi: b.select(b.fcmp_ordered(">", lo, hi), lo, hi))


def _lanes_sum(b, v):
    return _halving(b, v, b.add)


def _add_tiles(module):
    """``ember_integer_tiles(i8 *q, f32 *scales, i64 mp, i64 m, i64 k, i8 *packed, i64
    cols, f32 *out, i64 ldo)``: out[r, c] for rows r < m of x (q and scales as
    ember_quantize_x wrote them, mp rows) and the packed piece's cols weight rows (a
    multiple of TILE_COLUMNS packed, outputs stored for c < cols)."""
    from .llvm_ir import I64, intrinsic, loop, reduce, splat, vector_load

    ir, i8, i32, f32, vi, vf = _types()
    pi8, pf = i8.as_pointer(), f32.as_pointer()
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [pi8, pf, I64, I64, I64, pi8, I64, pf, I64]),
        "ember_integer_tiles",
    )
    fn.linkage = "internal"
    q, scales, mp, m, k, packed, cols, out, ldo = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    dot = ir.Function(module, ir.FunctionType(vi, [vi, vi, vi]), DOT)
    fma = intrinsic(module, "llvm.fma.v16f32", vf, 3)
    mask_type = ir.VectorType(ir.IntType(1), LANES)
    store = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [vf, vf.as_pointer(), i32, mask_type]),
        "llvm.masked.store.v16f32.p0v16f32",
    )
    load = ir.Function(
        module,
        ir.FunctionType(vf, [vf.as_pointer(), i32, mask_type, vf]),
        "llvm.masked.load.v16f32.p0v16f32",
    )
    groups = b.udiv(k, I64(GROUP))
    plane = b.mul(mp, groups)
    tiles = b.udiv(b.add(cols, I64(TILE_COLUMNS - 1)), I64(TILE_COLUMNS))
    vectors = b.mul(tiles, I64(VECTORS))  # packed: whole tiles
    weight_bytes = b.mul(vectors, b.mul(groups, I64(GROUP_BYTES)))
    s_of = b.bitcast(b.gep(packed, [weight_bytes]), pf)  # [vector, group, lane] s; then c
    c_of = b.gep(s_of, [b.mul(vectors, b.mul(groups, I64(LANES)))])
    zero_i = ir.Constant(vi, [0] * LANES)
    zero_f = ir.Constant(vf, [0.0] * LANES)
    lane_ids = ir.Constant(vi, list(range(LANES)))

    def column_tile(b, v0):
        loop(b, I64(0), groups, lambda b, g0: span(b, v0, g0), "k", step=SPAN_GROUPS)

    def span(b, v0, g0):
        """the tile's sums over groups g0 .. g0 + SPAN_GROUPS - 1, added to out's after
        the first span: its weights stay in the core's L1 cache for every row tile"""
        g1 = b.add(g0, I64(SPAN_GROUPS))
        g1 = b.select(b.icmp_signed("<", g1, groups), g1, groups)
        first_span = b.icmp_signed("==", g0, I64(0))

        def row_tile(b, r0):
            def group(b, g, accs):
                sums = [zero_i] * (ROWS * VECTORS)
                for step in range(STEPS):
                    w = []
                    for c in range(VECTORS):
                        at = b.mul(b.add(b.mul(b.add(v0, I64(c)), groups), g), I64(GROUP_BYTES))
                        ptr = b.gep(packed, [b.add(at, I64(step * 64))])
                        w.append(b.load(b.bitcast(ptr, vi.as_pointer()), align=64))
                    for r in range(ROWS):
                        row_at = b.mul(b.add(r0, I64(r)), k)
                        xat = b.add(row_at, b.add(b.mul(g, I64(GROUP)), I64(PER_LANE * step)))
                        xat = b.mul(xat, I64(ITEM))
                        xq = b.load(b.bitcast(b.gep(q, [xat]), i32.as_pointer()), align=1)
                        xs = splat(b, xq, vi)
                        for c in range(VECTORS):
                            sums[r * VECTORS + c] = b.call(dot, [sums[r * VECTORS + c], w[c], xs])
                nexts = []
                for r in range(ROWS):
                    slot = b.add(b.mul(b.add(r0, I64(r)), groups), g)
                    dx = splat(b, b.load(b.gep(scales, [slot])), vf)
                    sx = splat(b, b.load(b.gep(scales, [b.add(plane, slot)])), vf)
                    for c in range(VECTORS):
                        at = b.mul(b.add(b.mul(b.add(v0, I64(c)), groups), g), I64(LANES))
                        s = vector_load(b, b.gep(s_of, [at]), vf)
                        off = vector_load(b, b.gep(c_of, [at]), vf)
                        term = b.fmul(b.sitofp(sums[r * VECTORS + c], vf), s)
                        acc = b.call(fma, [term, dx, accs[r * VECTORS + c]])
                        nexts.append(b.call(fma, [off, sx, acc]))
                return tuple(nexts)

            places = []  # (pointer, mask) of each accumulator's outputs
            for r in range(ROWS):
                row = b.add(r0, I64(r))
                for c in range(VECTORS):
                    first = b.mul(b.add(v0, I64(c)), I64(LANES))
                    index = b.add(splat(b, b.trunc(first, i32), vi), lane_ids)
                    live = b.icmp_signed("<", index, splat(b, b.trunc(cols, i32), vi))
                    live = b.and_(live, splat(b, b.icmp_signed("<", row, m), mask_type))
                    ptr = b.bitcast(b.gep(out, [b.add(b.mul(row, ldo), first)]), vf.as_pointer())
                    places.append((ptr, live))
            starts = tuple(
                b.select(first_span, zero_f, b.call(load, [ptr, i32(4), live, zero_f]))
                for ptr, live in places
            )
            accs = reduce(b, g1, starts, group, "g", start=g0)
            for acc, (ptr, live) in zip(accs, places, strict=True):
                b.call(store, [acc, ptr, i32(4), live])

        loop(b, I64(0), mp, row_tile, "r", step=ROWS)

    loop(b, I64(0), vectors, column_tile, "v", step=VECTORS)
    b.ret_void()
    return fn


def _add_driver(module, tiles):
    """``ember_integer_gemm``: a pieces function (llvm_spin.add_pieces) whose piece is
    packed into its thread's scratch (the format's ``_pack(i8 *w, i64 ldw, i64 r0, i64
    r1, i64 k, i8 *packed)``), then run through the tiles into its output columns."""
    from .llvm_ir import I64

    ir, i8, _, f32, _, _ = _types()
    pi8, pf = i8.as_pointer(), f32.as_pointer()
    pack_type = ir.FunctionType(ir.VoidType(), [pi8, I64, I64, I64, I64, pi8])

    def piece(b, t, p, table, args):
        q, scales, mp, k, out, ldo, scratch, pack_addr = args
        pack = b.inttoptr(pack_addr, pack_type.as_pointer())
        mine = b.gep(scratch, [b.mul(t, b.load(b.gep(table, [I64(2)])))])
        m = b.load(b.gep(table, [I64(3)]))
        at = b.add(I64(HEADER), b.mul(p, I64(PIECE_WORDS)))
        w, ldw, r0, r1, col = (b.load(b.gep(table, [b.add(at, I64(i))])) for i in range(5))
        b.call(pack, [b.inttoptr(w, pi8), ldw, r0, r1, k, mine])
        b.call(tiles, [q, scales, mp, m, k, mine, b.sub(r1, r0), b.gep(out, [col]), ldo])

    arg_types = [pi8, pf, I64, I64, pf, I64, pi8, I64]
    llvm_spin.add_pieces(module, "ember_integer_gemm", arg_types, piece)


def add_pack(module, name, read_groups, weights, nbytes, unit=1):
    """Add ``ember_<name>_pack(i8 *w, i64 ldw, i64 r0, i64 r1, i64 k, i8 *packed)`` to a
    kernel module (llvm_quant's): weight rows r0 .. r1 - 1 (ldw units of
    `unit` bytes apart) packed as the tiles read them (the module's note), rows up to a
    whole tile zeros. `read_groups(b, vec, blk)` reads the block of `weights` weights
    (`nbytes` bytes) at i8 pointer blk as its groups of GROUP: [(values, s, c)], values
    [(first weight, 16 f32 integers 0-255)], each weight s * value + c. Values stay
    within a byte: a group's 32 products with x's 16-bit values then fit the 32-bit sums
    (F16 weights rounded to 16 bits overflowed them, 32 x 32767^2, and rounded to 12
    bits would lose half of f16's precision: F16 keeps llvm_decode_gemm's path)."""
    from .llvm_ir import I64, loop

    ir, i8, i32, f32, _, _ = _types()
    pi8 = i8.as_pointer()
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [pi8, I64, I64, I64, I64, pi8]),
        f"ember_{name}_pack",
    )
    w, ldw, r0, r1, k, packed = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    from .llvm_quant_blocks import Vectors

    vec = Vectors(b)
    rows = b.sub(r1, r0)
    cols = b.mul(b.udiv(b.add(rows, I64(TILE_COLUMNS - 1)), I64(TILE_COLUMNS)), I64(TILE_COLUMNS))
    vectors = b.udiv(cols, I64(LANES))
    groups = b.udiv(k, I64(GROUP))
    weight_bytes = b.mul(vectors, b.mul(groups, I64(GROUP_BYTES)))
    s_of = b.bitcast(b.gep(packed, [weight_bytes]), f32.as_pointer())
    c_of = b.gep(s_of, [b.mul(vectors, b.mul(groups, I64(LANES)))])
    blocks = b.udiv(k, I64(weights))
    per_block = weights // GROUP
    dwords = ir.VectorType(i32, LANES // PER_LANE)
    vbytes = ir.VectorType(ir.IntType(8 * ITEM), LANES)

    def write(b, c, g, halves, s, off):
        v, lane = b.udiv(c, I64(LANES)), b.urem(c, I64(LANES))
        base = b.mul(b.add(b.mul(v, groups), g), I64(GROUP_BYTES))
        for h, u in halves:  # u: weights h .. h + 15 of the group
            words = b.bitcast(u, dwords)
            for j in range(LANES // PER_LANE):
                step = (h // PER_LANE) + j
                at = b.add(base, b.add(I64(step * 64), b.mul(lane, I64(4))))
                b.store(
                    b.extract_element(words, i32(j)),
                    b.bitcast(b.gep(packed, [at]), i32.as_pointer()),
                    align=4,
                )
        slot = b.add(b.mul(b.add(b.mul(v, groups), g), I64(LANES)), lane)
        b.store(s, b.gep(s_of, [slot]))
        b.store(off, b.gep(c_of, [slot]))

    zeros = ir.Constant(vbytes, [0] * LANES)

    def vector(b, v):
        # a column vector's 16 rows block by block: each group's bytes (16 rows x
        # GROUP_BYTES / 16) are written whole while in cache (row after row over all the
        # groups, SmolLM2's down projection packed 3x slower a weight than its gate)
        def block(b, j):
            def lane(b, i):
                c = b.add(b.mul(v, I64(LANES)), i)
                with b.if_else(b.icmp_signed("<", c, rows)) as (real, padding):
                    with real:
                        wrow = b.gep(w, [b.mul(b.mul(b.add(r0, c), ldw), I64(unit))])
                        blk = b.gep(wrow, [b.mul(j, I64(nbytes))])
                        for t, (values, s, off) in enumerate(read_groups(b, vec, blk)):
                            ints = ir.VectorType(i32, LANES)
                            halves = [
                                (first % GROUP, b.trunc(b.fptosi(value, ints), vbytes))
                                for value, first in values
                            ]
                            write(b, c, b.add(b.mul(j, I64(per_block)), I64(t)), halves, s, off)
                    with padding:
                        for t in range(per_block):
                            g = b.add(b.mul(j, I64(per_block)), I64(t))
                            write(b, c, g, [(0, zeros), (LANES, zeros)], f32(0.0), f32(0.0))

            loop(b, I64(0), I64(LANES), lane, "lane")

        loop(b, I64(0), blocks, block, "blk")

    loop(b, I64(0), vectors, vector, "v")
    b.ret_void()
    return fn


def block_groups(terms_of, lowest):
    """read_groups (add_pack) for a ggml block type read as llvm_quant_blocks' terms of
    GROUP weights: a term's values v as v - lowest (0-255), its c as c + lowest * s."""

    def read(b, vec, blk):
        groups = []
        for values, s, off in terms_of(vec, blk):
            shift = vec.const(vec.floats, float(lowest))
            shifted = [(b.fsub(value, shift), first) for value, first in values]
            low = b.fmul(vec.f32(float(lowest)), s)
            groups.append((shifted, s, low if off is None else b.fadd(off, low)))
        return groups

    return read
