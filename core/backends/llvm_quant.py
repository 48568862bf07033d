"""ggml block-quantized weights (Q4_0, Q4_1, Q8_0) times f32 rows on the CPU, compiled by
LLVM through llvmlite alone, once a process (the machine code kept in ember's cache).

These are the types of llama.cpp's common small models (SmolLM2's GGUF is Q4_1 with a
Q8_0 embedding). array_qkernels has numba kernels for every ggml type; these replace
them for the three, because a process that imports numba pays for it: its import and
first calls (~0.45 s of GIL-bound Python), and ~48 MB of its own Python objects that
stay for the process (SmolLM2-135M's peak RSS was 2.2x its 94 MiB file with numba's
kernels). With every weight of a model in these types numba is never imported.

The kernels (llvm_products' signature; W is a byte, ldw and a row's length in bytes):
each block of 32 weights is read where it lies and its values made in vector registers,
lanes 0-15 and 16-31 (a 4-bit block's low and high nibbles, a Q8_0 block's two halves):

- dot: per weight row, one 16-lane accumulator of d * (lo * x[0:16] + hi * x[16:32])
  over the blocks, and for Q4_1 a second of m * (x[0:16] + x[16:32]) (its minimum),
  summed across the lanes in a fixed tree at the row's end. Two rows at a time (they
  share x's loads), the rows 4 KiB ahead asked for (llvm_ir.prefetch_row). The sums
  carry LLVM's `fast` flags: only the order of the additions differs from dequantizing,
  then multiplying.
- decode: a block's f32 values with numpy's steps (core/io/quant.py): Q4_0 d * (q - 8),
  Q4_1 d * q + m (two roundings), Q8_0 d * q: the same bits.
- dot_split: dot shared with llvm_spin's helpers (x86-64).

Unavailable (None) without llvmlite, with EMBER_JIT=0, or where the build fails (a
warning says why; array_qmatmul then takes numba's kernels or numpy's path).
"""

import functools
import sys

from . import llvm_spin
from .llvm_products import ROWS_AT, ProductKernels

PREFETCH_BYTES = 4096  # bytes of weight rows asked for ahead of the rows computed
BLOCK = 32  # weights a block
LANES = 16
# ggml type number -> (name, bytes a block); core/io/quant.py's GGMLType (io sits above
# the backends, which do not import it)
TYPES = {2: ("q4_0", 18), 3: ("q4_1", 20), 8: ("q8_0", 34)}


def kernels():
    """{ggml type number: ProductKernels} for TYPES, or None where they cannot be had
    (see the module's note; llvm_build builds them)."""
    from . import llvm_build

    return llvm_build.kernels("llvm_quant")


def for_type(ggml_type):
    """The ProductKernels of a ggml type number, or None (another type, or none built)."""
    if int(ggml_type) not in TYPES:
        return None
    built = kernels()
    return None if built is None else built[int(ggml_type)]


def _weights_per_row(block_bytes, w):
    return w.shape[1] // block_bytes * BLOCK


def build():
    from . import llvm_build

    triple = llvm_build.host()[0]
    engine = llvm_build.compile_kernels(sys.modules[__name__], _ir_module, sources=(llvm_spin,))
    split = llvm_spin.supported(triple)
    return {
        t: ProductKernels(
            engine,
            f"ember_{name}",
            "uint8",
            functools.partial(_weights_per_row, nbytes),
            split=split,
        )
        for t, (name, nbytes) in TYPES.items()
    }


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple):
    from .llvm_ir import new_module

    module = new_module("ember_quant", triple)
    for name, nbytes in TYPES.values():
        dot = _add_dot(module, name, nbytes)
        if llvm_spin.supported(triple):  # the split over spinning helpers (llvm_spin)
            llvm_spin.add_split(module, dot, f"ember_{name}_dot_split", rows_at=ROWS_AT, align=2)
        _add_decode(module, name, nbytes)
    return module


class _Vectors:
    """The IR types and small vector steps the kernels share."""

    def __init__(self, b):
        from llvmlite import ir

        self.b = b
        self.i8, self.i32, self.f32 = ir.IntType(8), ir.IntType(32), ir.FloatType()
        self.bytes = ir.VectorType(self.i8, LANES)
        self.floats = ir.VectorType(self.f32, LANES)
        self.ir = ir

    def const(self, typ, value):
        return self.ir.Constant(typ, [value] * LANES)

    def load(self, ptr, typ, align):
        b = self.b
        return b.load(b.bitcast(ptr, typ.as_pointer()), align=align)

    def half(self, blk, at):
        """The f16 at byte `at` of a block, as f32."""
        b, ir = self.b, self.ir
        bits = self.load(b.gep(blk, [ir.IntType(64)(at)]), ir.IntType(16), 1)
        return b.fpext(b.bitcast(bits, ir.HalfType()), self.f32)

    def splat(self, s):
        b, ir = self.b, self.ir
        one = b.insert_element(ir.Constant(self.floats, ir.Undefined), s, self.i32(0))
        return b.shuffle_vector(one, one, ir.Constant(ir.VectorType(self.i32, LANES), [0] * LANES))

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


def _block_values(vec, name, blk):
    """(lo, hi, d, m) of the block at i8 pointer blk: its weights 0-15 and 16-31 as f32
    integers before scaling (Q4_0's already less 8), its scale d and its minimum m (None
    but for Q4_1); weight j = d * value + m."""
    b, ir = vec.b, vec.ir
    i64 = ir.IntType(64)
    if name == "q8_0":
        lo = vec.load(b.gep(blk, [i64(2)]), vec.bytes, 1)
        hi = vec.load(b.gep(blk, [i64(2 + LANES)]), vec.bytes, 1)
        return b.sitofp(lo, vec.floats), b.sitofp(hi, vec.floats), vec.half(blk, 0), None
    qs_at = 2 if name == "q4_0" else 4
    qs = vec.load(b.gep(blk, [i64(qs_at)]), vec.bytes, 1)
    lo, hi = b.and_(qs, vec.const(vec.bytes, 15)), b.lshr(qs, vec.const(vec.bytes, 4))
    if name == "q4_0":  # values q - 8, exact in i8
        eight = vec.const(vec.bytes, 8)
        lo, hi = b.sitofp(b.sub(lo, eight), vec.floats), b.sitofp(b.sub(hi, eight), vec.floats)
        return lo, hi, vec.half(blk, 0), None
    lo, hi = b.uitofp(lo, vec.floats), b.uitofp(hi, vec.floats)
    return lo, hi, vec.half(blk, 0), vec.half(blk, 2)


def _add_dot(module, name, nbytes):
    from llvmlite import ir

    from .llvm_ir import I64, loop, no_alias, prefetch_row, reduce

    i8p, p32 = ir.IntType(8).as_pointer(), ir.FloatType().as_pointer()
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [i8p, I64, p32, I64, p32, I64] + [I64] * 4),
        f"ember_{name}_dot",
    )
    w, ldw, x, ldx, out, ldo, m, r0, r1, k = fn.args
    no_alias(w, x, out)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    vec = _Vectors(b)
    blocks = b.udiv(k, I64(BLOCK))
    row_bytes = b.mul(blocks, I64(nbytes))
    zero = vec.const(vec.floats, 0.0)

    def fast(value):
        value.flags.append("fast")
        return value

    # rows asked for ahead: PREFETCH_BYTES of them (at least a pair)
    wide = b.select(b.icmp_signed(">", row_bytes, I64(0)), row_bytes, I64(1))
    ahead = b.udiv(I64(PREFETCH_BYTES), wide)
    ahead = b.select(b.icmp_signed("<", ahead, I64(2)), I64(2), ahead)
    last = b.sub(r1, I64(1))

    def ask_for(b, r):
        r = b.select(b.icmp_signed("<", r, last), r, last)
        prefetch_row(b, module, w, ldw, r, row_bytes)

    def row_pair(b, ra):
        # rows ra and rb = ra + 1 share each load of x; past the last row rb is ra again,
        # whose sum is then stored twice (the same value), so no branch is needed
        rb = b.select(b.icmp_signed("<", b.add(ra, I64(1)), r1), b.add(ra, I64(1)), ra)
        ask_for(b, b.add(ra, ahead))
        ask_for(b, b.add(b.add(ra, ahead), I64(1)))
        wa, wb = b.gep(w, [b.mul(ra, ldw)]), b.gep(w, [b.mul(rb, ldw)])

        def dot_one(b, i):
            xrow = b.gep(x, [b.mul(i, ldx)])

            def block(b, j, accs):
                xlo = vec.load(b.gep(xrow, [b.mul(j, I64(BLOCK))]), vec.floats, 4)
                xhi = vec.load(
                    b.gep(xrow, [b.add(b.mul(j, I64(BLOCK)), I64(LANES))]), vec.floats, 4
                )
                xsum = fast(b.fadd(xlo, xhi))
                nexts = []
                for row, acc, macc in ((wa, accs[0], accs[2]), (wb, accs[1], accs[3])):
                    lo, hi, d, mn = _block_values(vec, name, b.gep(row, [b.mul(j, I64(nbytes))]))
                    t = fast(b.fadd(fast(b.fmul(lo, xlo)), fast(b.fmul(hi, xhi))))
                    nexts.append(fast(b.fadd(acc, fast(b.fmul(vec.splat(d), t)))))
                    if mn is not None:
                        macc = fast(b.fadd(macc, fast(b.fmul(vec.splat(mn), xsum))))
                    nexts.append(macc)
                return nexts[0], nexts[2], nexts[1], nexts[3]

            sa, sb, ma, mb = reduce(b, blocks, (zero,) * 4, block, "blk")
            at = b.mul(i, ldo)
            b.store(vec.total(b.fadd(sa, ma)), b.gep(out, [b.add(at, ra)]))
            b.store(vec.total(b.fadd(sb, mb)), b.gep(out, [b.add(at, rb)]))

        loop(b, I64(0), m, dot_one, "i")

    loop(b, r0, r1, row_pair, "r", step=2)
    b.ret_void()
    return fn


def _add_decode(module, name, nbytes):
    from llvmlite import ir

    from .llvm_ir import I64, loop, no_alias

    i8p, p32 = ir.IntType(8).as_pointer(), ir.FloatType().as_pointer()
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [i8p, I64, p32, I64] + [I64] * 3),
        f"ember_{name}_decode",
    )
    w, ldw, out, ldo, r0, r1, k = fn.args
    no_alias(w, out)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    vec = _Vectors(b)
    blocks = b.udiv(k, I64(BLOCK))

    def widen_row(b, r):
        wrow, orow = b.gep(w, [b.mul(r, ldw)]), b.gep(out, [b.mul(b.sub(r, r0), ldo)])

        def block(b, j):
            lo, hi, d, mn = _block_values(vec, name, b.gep(wrow, [b.mul(j, I64(nbytes))]))
            # numpy's steps, no fast flags: a product, then the minimum added (no fused
            # multiply-add), so the values are dequantize's to the bit
            d = vec.splat(d)
            lo, hi = b.fmul(lo, d), b.fmul(hi, d)
            if mn is not None:
                mn = vec.splat(mn)
                lo, hi = b.fadd(lo, mn), b.fadd(hi, mn)
            at = b.gep(orow, [b.mul(j, I64(BLOCK))])
            b.store(lo, b.bitcast(at, vec.floats.as_pointer()), align=4)
            b.store(hi, b.bitcast(b.gep(at, [I64(LANES)]), vec.floats.as_pointer()), align=4)

        loop(b, I64(0), blocks, block, "blk")

    loop(b, r0, r1, widen_row, "r")
    b.ret_void()
    return fn
