"""ggml block-quantized weights (every block type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
Q3_K, Q4_K, Q5_K, Q6_K) times f32 rows on the CPU, compiled by LLVM through llvmlite
alone, once a process (the machine code kept in ember's cache).

They replaced numba kernels (array_qkernels, until 2026-12-07), because a process that
imports numba pays for it: its import and first calls (~0.45 s of GIL-bound Python),
~48 MB of its own Python objects for the process (SmolLM2-135M's peak RSS was 2.2x its
94 MiB file with numba's kernels), and OpenMP workers that spin between products where
llvm_spin's helpers spin too; and the explicit vector IR runs faster.

The kernels (llvm_products' signature; W is a byte, ldw a row's stride in bytes, k its
weights): each block is read where it lies, its values made in 16-lane vector
registers (llvm_quant_blocks: a block's terms):

- dot: per weight row, a 16-lane accumulator of s * sum(v x) over the terms, and one
  of c * sum(x) (a minimum or offset), summed across the lanes in a fixed tree at the
  row's end. Two rows at a time (they share x's loads), the rows 4 KiB ahead asked for
  (llvm_ir.prefetch_row). The sums carry LLVM's `fast` flags: only the order of the
  additions differs from dequantizing, then multiplying.
- decode: a block's f32 values with numpy's steps (core/io/quant.py): the same bits.
- dot_split: dot shared with llvm_spin's helpers (x86-64).
- pack (the types whose terms are groups of 32 weights, PACKED): rows as bytes for
  llvm_integer_gemm's integer products of a prompt.

Unavailable (None) without llvmlite, with EMBER_JIT=0, or where the build fails (a
warning says why; array_qmatmul then takes numpy's path).

Measured (Intel Ice Lake, one thread, in cache): Q4_1 3072x576 0.16-0.17 ms against
numba's 0.22, Q4_0 0.13-0.14 against 0.23. A trial that rounded x to 16-bit integers per
32-value block (pmaddwd on the words) ran Q4_1 only 4-7% faster and Q8_0 20% slower: the
f32 kernels are bound by more than the widening of the weights.
"""

import functools
import sys

from . import llvm_integer_gemm, llvm_spin
from .llvm_products import ROWS_AT, ProductKernels
from .llvm_quant_blocks import FORMATS, Vectors, terms

# The types llvm_integer_gemm packs (terms of 32 weights), each with its values' least
# (a term's v - lowest is then a byte, 0-255)
PACKED = {"q4_0": -8, "q4_1": 0, "q5_0": -16, "q5_1": 0, "q8_0": -128, "q4_k": 0, "q5_k": 0}

PREFETCH_BYTES = 4096  # bytes of weight rows asked for ahead of the rows computed


def kernels():
    """{ggml type number: ProductKernels} for FORMATS' types, or None where they cannot be had
    (see the module's note; llvm_build builds them)."""
    from . import llvm_build

    return llvm_build.kernels("llvm_quant")


def for_type(ggml_type):
    """The ProductKernels of a ggml type number, or None (another type, or none built)."""
    if int(ggml_type) not in FORMATS:
        return None
    built = kernels()
    return None if built is None else built[int(ggml_type)]


def _weights_per_row(weights, nbytes, w):
    return w.shape[1] // nbytes * weights


def build():
    from . import llvm_build

    triple = llvm_build.host()[0]
    engine = llvm_build.compile_kernels(
        sys.modules[__name__],
        _ir_module,
        sources=(llvm_spin, llvm_integer_gemm, sys.modules[f"{__package__}.llvm_quant_blocks"]),
    )
    split = llvm_spin.supported(triple)
    return {
        t: ProductKernels(
            engine,
            f"ember_{name}",
            "uint8",
            functools.partial(_weights_per_row, weights, nbytes),
            split=split,
            packs=name in PACKED,
        )
        for t, (name, weights, nbytes) in FORMATS.items()
    }


# --- the IR ------------------------------------------------------------------------------------
def _terms_of(name, vec, blk):
    return terms(vec, name, blk)


def _ir_module(triple):
    from .llvm_ir import new_module

    module = new_module("ember_quant", triple)
    for name, weights, nbytes in FORMATS.values():
        dot = _add_dot(module, name, weights, nbytes)
        if llvm_spin.supported(triple):  # the split over spinning helpers (llvm_spin)
            llvm_spin.add_split(module, dot, f"ember_{name}_dot_split", rows_at=ROWS_AT, align=2)
        _add_decode(module, name, weights, nbytes)
        if name in PACKED:
            read = llvm_integer_gemm.block_groups(functools.partial(_terms_of, name), PACKED[name])
            llvm_integer_gemm.add_pack(module, name, read, weights, nbytes)
    return module


def _add_dot(module, name, weights, nbytes):
    from llvmlite import ir

    from .llvm_ir import I64, loop, no_alias, reduce, row_pairs

    i8p, p32 = ir.IntType(8).as_pointer(), ir.FloatType().as_pointer()
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [i8p, I64, p32, I64, p32, I64] + [I64] * 4),
        f"ember_{name}_dot",
    )
    w, ldw, x, ldx, out, ldo, m, r0, r1, k = fn.args
    no_alias(w, x, out)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    vec = Vectors(b)
    blocks = b.udiv(k, I64(weights))
    row_bytes = b.mul(blocks, I64(nbytes))
    zero = vec.const(vec.floats, 0.0)

    def fast(value):
        value.flags.append("fast")
        return value

    def row_pair(b, ra, rb):
        wa, wb = b.gep(w, [b.mul(ra, ldw)]), b.gep(w, [b.mul(rb, ldw)])

        def dot_one(b, i):
            xrow = b.gep(x, [b.mul(i, ldx)])

            def block(b, j, accs):
                xblock = b.gep(xrow, [b.mul(j, I64(weights))])
                xs = {}  # x's lanes by their first weight in the block, loaded once

                def x_at(lane):
                    if lane not in xs:
                        xs[lane] = vec.load(b.gep(xblock, [I64(lane)]), vec.floats, 4)
                    return xs[lane]

                nexts = list(accs)
                for r, row in enumerate((wa, wb)):
                    for values, s, c in terms(vec, name, b.gep(row, [b.mul(j, I64(nbytes))])):
                        t = None
                        for v, lane in values:
                            p = fast(b.fmul(v, x_at(lane)))
                            t = p if t is None else fast(b.fadd(t, p))
                        nexts[r] = fast(b.fadd(nexts[r], fast(b.fmul(vec.splat(s), t))))
                        if c is not None:
                            sx = None
                            for _, lane in values:
                                sx = x_at(lane) if sx is None else fast(b.fadd(sx, x_at(lane)))
                            nexts[2 + r] = fast(
                                b.fadd(nexts[2 + r], fast(b.fmul(vec.splat(c), sx)))
                            )
                return tuple(nexts)

            sa, sb, ma, mb = reduce(b, blocks, (zero,) * 4, block, "blk")
            at = b.mul(i, ldo)
            b.store(vec.total(b.fadd(sa, ma)), b.gep(out, [b.add(at, ra)]))
            b.store(vec.total(b.fadd(sb, mb)), b.gep(out, [b.add(at, rb)]))

        loop(b, I64(0), m, dot_one, "i")

    row_pairs(b, module, w, ldw, row_bytes, r0, r1, PREFETCH_BYTES, row_pair)
    b.ret_void()
    return fn


def _add_decode(module, name, weights, nbytes):
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
    vec = Vectors(b)
    blocks = b.udiv(k, I64(weights))

    def widen_row(b, r):
        wrow, orow = b.gep(w, [b.mul(r, ldw)]), b.gep(out, [b.mul(b.sub(r, r0), ldo)])

        def block(b, j):
            first = b.gep(orow, [b.mul(j, I64(weights))])
            for values, s, c in terms(vec, name, b.gep(wrow, [b.mul(j, I64(nbytes))])):
                # numpy's steps, no fast flags: a product, then the offset added (no fused
                # multiply-add), so the values are dequantize's to the bit
                s = vec.splat(s)
                c = None if c is None else vec.splat(c)
                for v, lane in values:
                    y = b.fmul(v, s)
                    y = y if c is None else b.fadd(y, c)
                    b.store(
                        y, b.bitcast(b.gep(first, [I64(lane)]), vec.floats.as_pointer()), align=4
                    )

        loop(b, I64(0), blocks, block, "blk")

    loop(b, r0, r1, widen_row, "r")
    b.ret_void()
    return fn
