"""f16-weight products on the CPU, compiled by LLVM through llvmlite alone, once a process.

An F16 weight (a half per element: ggml's F16, the f16 checkpoints Whisper ships) times
f32 rows, without an f32 copy of the weight: each half is widened in a register by the
hardware's conversion (x86's F16C vcvtph2ps, ARM's fcvtl) inside loops LLVM vectorizes.

Why llvmlite and not numba (which ember's convolution epilogues use): numba's
import and its first call cost about 0.45 s of GIL-bound Python a process (2 vCPUs here),
which a Whisper cold start (0.7 s in all) cannot hide; llvmlite (numba's own LLVM
binding, installed with it by the ``ember[jit]`` extra) imports in 0.03 s and compiles
these two small functions in 0.05 s, once: later processes load the machine code from
ember's cache (llvm_build.ObjectCache). The functions, in C terms:

    dot(const u16 *w, i64 ldw, const f32 *x, i64 ldx, f32 *out, i64 ldo,
        i64 m, i64 r0, i64 r1, i64 k)
        out[i * ldo + r] = sum_j f32(w[r * ldw + j]) * x[i * ldx + j]
        for weight rows r in [r0, r1) and rows i of x in [0, m)
    decode(const u16 *w, i64 ldw, f32 *out, i64 ldo, i64 r0, i64 r1, i64 k)
        out[(r - r0) * ldo + j] = f32(w[r * ldw + j])

dot takes two weight rows at a time (they share each load of x) and asks for the rows
4 KiB ahead (LLVM's prefetch hint, as llvm_quant's kernels do: a decode
step reads each weight once, from memory, and without it Whisper's decode steps ran no
faster than f32 GEMVs). The sums carry LLVM's `fast` flags (reassociation lets the loop
vectorizer split each into vector lanes, as numba's fastmath does); the decode is exact.
They are called through ctypes, which releases the GIL. On x86-64 the module also holds
``ember_f16_dot_split``, dot's rows shared with llvm_spin's spinning helper threads (a
decode step's products are too short for row_parallel's hand-off); elsewhere
row_parallel splits dot's rows over the cores. Unavailable (None) without llvmlite, with
EMBER_JIT=0, on an x86 CPU without F16C (LLVM would call a library routine per element), or where the build
fails (a warning says why; the callers then widen the halves as numpy does).
"""

import sys

from . import llvm_spin
from .llvm_products import ROWS_AT, ProductKernels

PREFETCH_BYTES = 4096  # bytes of weight rows asked for ahead of the rows computed


def kernels():
    """The compiled F16 ProductKernels (llvm_products), or None where they cannot be had
    (see the module's note; llvm_build.kernels builds them with the other llvmlite
    kernels)."""
    from . import llvm_build

    return llvm_build.kernels("llvm_f16")


def _halves(w):
    return w.shape[1]


def build():
    from . import llvm_build

    triple, _, _, features = llvm_build.host()
    if triple.startswith(("x86_64", "i386", "i686")) and not features.get("f16c", False):
        return None
    engine = llvm_build.compile_kernels(sys.modules[__name__], _ir_module, sources=(llvm_spin,))
    split = llvm_spin.supported(triple)
    return ProductKernels(engine, "ember_f16", "uint16", _halves, split=split)


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple):
    from llvmlite import ir

    from .llvm_ir import loop, new_module, no_alias, reduce, row_pairs

    i64, f32, i16 = ir.IntType(64), ir.FloatType(), ir.IntType(16)
    p16, p32 = i16.as_pointer(), f32.as_pointer()
    module = new_module("ember_f16", triple)

    def half(b, ptr, at):
        return b.fpext(b.bitcast(b.load(b.gep(ptr, [at])), ir.HalfType()), f32)

    def fast(instr):
        instr.flags.append("fast")
        return instr

    # dot
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [p16, i64, p32, i64, p32, i64] + [i64] * 4),
        "ember_f16_dot",
    )
    w, ldw, x, ldx, out, ldo, m, r0, r1, k = fn.args
    no_alias(w, x, out)
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def row_pair(b, ra, rb):
        def dot_one(b, i):
            wa, wb = b.gep(w, [b.mul(ra, ldw)]), b.gep(w, [b.mul(rb, ldw)])
            xrow = b.gep(x, [b.mul(i, ldx)])

            def step(b, j, acc):
                xj = b.load(b.gep(xrow, [j]))
                return (
                    fast(b.fadd(acc[0], fast(b.fmul(half(b, wa, j), xj)))),
                    fast(b.fadd(acc[1], fast(b.fmul(half(b, wb, j), xj)))),
                )

            sa, sb = reduce(b, k, (f32(0.0), f32(0.0)), step, "j")
            at = b.mul(i, ldo)
            b.store(sa, b.gep(out, [b.add(at, ra)]))
            b.store(sb, b.gep(out, [b.add(at, rb)]))

        loop(b, i64(0), m, dot_one, "i")

    row_bytes = b.mul(k, i64(2))
    wbytes, ldw_bytes = b.bitcast(w, ir.IntType(8).as_pointer()), b.mul(ldw, i64(2))
    row_pairs(b, module, wbytes, ldw_bytes, row_bytes, r0, r1, PREFETCH_BYTES, row_pair)
    b.ret_void()
    if llvm_spin.supported(triple):  # the split over spinning helpers (llvm_spin)
        llvm_spin.add_split(module, fn, "ember_f16_dot_split", rows_at=ROWS_AT, align=2)

    # decode
    fn = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [p16, i64, p32, i64] + [i64] * 3), "ember_f16_decode"
    )
    w, ldw, out, ldo, r0, r1, k = fn.args
    no_alias(w, out)
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def widen_row(b, r):
        wrow, orow = b.gep(w, [b.mul(r, ldw)]), b.gep(out, [b.mul(b.sub(r, r0), ldo)])
        loop(b, i64(0), k, lambda b, j: b.store(half(b, wrow, j), b.gep(orow, [j])), "j")

    loop(b, r0, r1, widen_row, "r")
    b.ret_void()
    return module
