"""f16-weight products on the CPU, compiled by LLVM through llvmlite alone, once a process.

An F16 weight (a half per element: ggml's F16, the f16 checkpoints Whisper ships) times
f32 rows, without an f32 copy of the weight: each half is widened in a register by the
hardware's conversion (x86's F16C vcvtph2ps, ARM's fcvtl) inside loops LLVM vectorizes.

Why llvmlite and not numba, which ember's other kernels use (array_qkernels): numba's
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
4 KiB ahead (LLVM's prefetch hint, as numba_prefetch does for the other kernels: a decode
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

import ctypes
import sys

import numpy as np

from . import llvm_spin

_P, _I = ctypes.c_void_p, ctypes.c_int64
_DOT_ARGS = (_P, _I, _P, _I, _P, _I, _I, _I, _I, _I)
_DECODE_ARGS = (_P, _I, _P, _I, _I, _I, _I)
PREFETCH_BYTES = 4096  # bytes of weight rows asked for ahead of the rows computed
_LINE_HALVES = 32  # halves in a 64-byte cache line


def kernels():
    """The compiled F16Kernels, or None where they cannot be had (see the module's note;
    llvm_build.kernels builds them with the other llvmlite kernels)."""
    from . import llvm_build

    return llvm_build.kernels("llvm_f16")


class F16Kernels:
    """dot and decode over numpy arrays: the weight a 2-D uint16 array of half bits whose
    rows are contiguous, x and out float32 with contiguous rows."""

    def __init__(self, engine, dot_addr, decode_addr, split_addr=0):
        self._engine = engine  # owns the machine code: kept alive with the functions
        self._dot = ctypes.CFUNCTYPE(None, *_DOT_ARGS)(dot_addr)
        self._decode = ctypes.CFUNCTYPE(None, *_DECODE_ARGS)(decode_addr)
        self._split = ctypes.CFUNCTYPE(_I, _P, _I, *_DOT_ARGS)(split_addr) if split_addr else None

    def helpers(self, threads):
        """This process's llvm_spin helpers for `threads` threads in all (the caller's
        among them), or None: one thread, or no split built for this CPU."""
        if self._split is None:
            return None
        return llvm_spin.process_helpers(threads)

    def dot_split(self, w, x, out, r0, r1, helpers):
        """dot over rows r0:r1 shared with `helpers` (self.helpers): the same bits."""
        _check(w, x, out)
        helpers.split(
            self._split, *_rows(w), *_rows(x), *_rows(out), x.shape[0], r0, r1, w.shape[1]
        )

    def dot(self, w, x, out, r0, r1):
        """out[:, r0:r1] = x @ f32(w[r0:r1]).T (out may be a column slice of a wider array)."""
        _check(w, x, out)
        self._dot(*_rows(w), *_rows(x), *_rows(out), x.shape[0], r0, r1, w.shape[1])

    def decode(self, w, out, r0, r1):
        """out[: r1 - r0] = f32(w[r0:r1]), exactly."""
        _check(w, None, out)
        self._decode(*_rows(w), *_rows(out), r0, r1, w.shape[1])


def _rows(a):
    """(address, row stride in elements) of a 2-D array whose rows are contiguous."""
    return a.ctypes.data, a.strides[0] // a.itemsize


def _check(w, x, out):
    # the kernels index with row strides only: every row must be contiguous
    if w.dtype != np.uint16 or w.ndim != 2 or (w.shape[1] > 1 and w.strides[1] != 2):
        raise ValueError(
            f"llvm_f16: weight must be 2-D uint16 with contiguous rows, got {w.dtype} {w.strides}"
        )
    for a in (x, out):
        if a is not None and (
            a.dtype != np.float32 or a.ndim != 2 or (a.shape[1] > 1 and a.strides[1] != 4)
        ):
            raise ValueError(
                f"llvm_f16: rows must be 2-D float32, contiguous, got {a.dtype} {a.strides}"
            )


def build():
    from . import llvm_build

    triple, _, _, features = llvm_build.host()
    if triple.startswith(("x86_64", "i386", "i686")) and not features.get("f16c", False):
        return None
    engine = llvm_build.compile_kernels(sys.modules[__name__], _ir_module, sources=(llvm_spin,))
    split = llvm_spin.supported(triple)
    return F16Kernels(
        engine,
        engine.get_function_address("ember_f16_dot"),
        engine.get_function_address("ember_f16_decode"),
        engine.get_function_address("ember_f16_dot_split") if split else 0,
    )


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple):
    from llvmlite import ir

    from .llvm_ir import loop, new_module, no_alias, reduce

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

    prefetch = module.declare_intrinsic(
        "llvm.prefetch",
        [ir.IntType(8).as_pointer()],
        ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()] + [ir.IntType(32)] * 3),
    )
    # rows asked for ahead: PREFETCH_BYTES of them (at least a pair)
    ahead = b.udiv(i64(PREFETCH_BYTES // 2), b.select(b.icmp_signed(">", k, i64(0)), k, i64(1)))
    ahead = b.select(b.icmp_signed("<", ahead, i64(2)), i64(2), ahead)
    last = b.sub(r1, i64(1))

    def ask_for(b, r):
        """prefetch every cache line of weight row min(r, r1 - 1)"""
        r = b.select(b.icmp_signed("<", r, last), r, last)
        row = b.bitcast(b.gep(w, [b.mul(r, ldw)]), ir.IntType(8).as_pointer())

        def line(b, c):
            i32 = ir.IntType(32)
            b.call(prefetch, [b.gep(row, [b.mul(c, i64(2))]), i32(0), i32(3), i32(1)])

        loop(b, i64(0), k, line, "pf", step=_LINE_HALVES)

    def row_pair(b, ra):
        # rows ra and rb = ra + 1 share each load of x; past the last row rb is ra again,
        # whose sum is then stored twice (the same value), so no branch is needed
        rb = b.select(b.icmp_signed("<", b.add(ra, i64(1)), r1), b.add(ra, i64(1)), ra)
        # a decode step reads each weight once, from memory: asking for the rows a few KiB
        # ahead keeps more loads in flight than the hardware prefetcher does (as numba's
        # kernels do, numba_prefetch)
        ask_for(b, b.add(ra, ahead))
        ask_for(b, b.add(b.add(ra, ahead), i64(1)))

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

    loop(b, r0, r1, row_pair, "r", step=2)
    b.ret_void()
    if llvm_spin.supported(triple):  # the split over spinning helpers (llvm_spin)
        llvm_spin.add_split(module, fn, "ember_f16_dot_split", rows_at=7, align=2)

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
