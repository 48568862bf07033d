"""A many-row product with a compact weight (ggml blocks, f16) over every core in compiled
code: pieces of the weight's rows, each decoded to f32 in its thread's scratch and
multiplied by BLAS's sgemm, called from the compiled code itself.

array_qmatmul's dequantize + GEMM path ran its pieces over row_parallel's pool: for
each piece a Python call to the decoder, a numpy allocation, and np.matmul, the GIL
passing between the threads at each, and a sleeping thread woken for every product.
A SmolLM2-135M prompt's products (128 rows, 0.4-4 ms each) ran 1.2-1.6x faster shared
than on one core, where the same GEMMs without Python between them run 1.7-1.9x faster
on two threads. Here the caller and llvm_spin's helpers each run
``ember_decode_gemm(t, t + 1, ...)``: take the next piece (an atomic counter), decode
it with the format's compiled decoder into scratch t, call sgemm on it, until none is
left; no GIL, no allocation, no wake-up while the helpers spin.

The pieces are the ones array_qmatmul._chunked_gemm cuts (a fixed count per weight
part, not per thread), and each piece's GEMM is the call np.matmul makes for
``x @ chunk.T`` (row-major, B transposed, on one BLAS thread): the same bits whichever
thread takes which piece, and the Python path's (tests/test_decode_gemm_kernel.py).
Measured on SmolLM2-135M Q4_1, a 128-token prompt, 2 cores, the two paths alternating
in one process: 349 -> 296 ms (median of 12), the same logits; its four products a
layer 1.08, 0.83, 3.00 and 1.53 ms against OpenBLAS's 0.86, 0.63, 2.66 and 1.38 for the
dense f32 weight on both threads. Whisper base's encoder (f16, 1,500 rows): unchanged.

sgemm comes from the BLAS numpy links (OpenBLAS's scipy_ build, ILP64: 64-bit
integer arguments); where that cannot be found, or on a CPU without llvm_spin's
helpers, build() returns None and array_qmatmul keeps its Python path.
"""

import ctypes
import sys

import numpy as np

from . import llvm_spin
from .addresses import address

_P, _I = ctypes.c_void_p, ctypes.c_int64
# the kernel's arguments: (t0, t1, table, pieces, x, m, k, out, ldo, scratch,
# decode function, sgemm function)
_ARGS = (_I, _I, _P, _I, _P, _I, _I, _P, _I, _P, _I, _I)
# a piece's words in the table after its two header words (the next piece's index,
# scratch floats per thread): weight address, row stride (units), first row, end row,
# first output column
HEADER, PIECE_WORDS = 2, 5
# CBLAS's enumerations (cblas.h): row-major storage, a transposed operand
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112


def sgemm_address():
    """(address, int bits) of cblas_sgemm in the BLAS numpy loaded, or None: numpy's
    wheels link OpenBLAS (scipy_openblas64_: cblas_sgemm with 64-bit integers);
    a build against another BLAS goes without this path."""
    from .blas_threads import numpy_openblas

    for lib in numpy_openblas():
        for name, bits in (
            ("scipy_cblas_sgemm64_", 64),
            ("cblas_sgemm64_", 64),
            ("scipy_cblas_sgemm", 32),
            ("cblas_sgemm", 32),
        ):
            fn = getattr(lib, name, None)
            if fn is not None:
                return ctypes.cast(fn, ctypes.c_void_p).value, bits
    return None


def build():
    """DecodeGemm, or None: no helpers on this CPU, or no sgemm found (llvm_build)."""
    from . import llvm_build

    if not llvm_spin.supported(llvm_build.host()[0]):
        return None
    found = sgemm_address()
    if found is None:
        return None
    sgemm, bits = found
    engine = llvm_build.compile_kernels(
        sys.modules[__name__], lambda t: _ir_module(t, bits), params=(bits,), sources=(llvm_spin,)
    )
    return DecodeGemm(engine, sgemm)


class DecodeGemm:
    def __init__(self, engine, sgemm):
        self._engine = engine  # owns the machine code
        addr = engine.get_function_address
        self._run = ctypes.CFUNCTYPE(None, *_ARGS)(addr("ember_decode_gemm"))
        self._split = ctypes.CFUNCTYPE(_I, _P, _I, *_ARGS)(addr("ember_decode_gemm_split"))
        self.sgemm = sgemm

    def run(self, x2, out, pieces, decode, helpers, scratch):
        """out[:, at + r0 : at + r1] = x2 @ decoded(rows[r0:r1]).T for each piece
        (rows: a 2-D array of the format's units, r0, r1, at), shared with `helpers`
        (llvm_spin.Helpers, or None: the caller alone); `decode` the format's compiled
        decoder's address; `scratch` float32 with room for the widest piece per thread.
        x2 C-contiguous float32 [m, k], out float32 with contiguous rows."""
        m, k = x2.shape
        table = np.empty(HEADER + PIECE_WORDS * len(pieces), np.int64)
        table[0] = 0
        threads = 1 if helpers is None else helpers.count + 1
        table[1] = scratch.size // threads
        for i, (rows, r0, r1, at) in enumerate(pieces):
            table[HEADER + PIECE_WORDS * i : HEADER + PIECE_WORDS * (i + 1)] = (
                address(rows),
                rows.strides[0] // rows.itemsize,
                r0,
                r1,
                at + r0,
            )
        args = (
            table.ctypes.data,
            len(pieces),
            address(x2),
            m,
            k,
            address(out),
            out.strides[0] // 4,
            address(scratch),
            decode,
            self.sgemm,
        )
        if helpers is None:
            self._run(0, 1, *args)
            return
        helpers.ready()
        helpers.split(self._split, 0, threads, *args)


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple, bits):
    from llvmlite import ir

    from .llvm_ir import I64, loop, new_module

    f32 = ir.FloatType()
    pf = f32.as_pointer()
    pi64 = I64.as_pointer()
    i32 = ir.IntType(32)
    blas_int = ir.IntType(bits)
    module = new_module("ember_decode_gemm", triple)
    i8p = ir.IntType(8).as_pointer()
    decode_type = ir.FunctionType(ir.VoidType(), [i8p, I64, pf, I64, I64, I64, I64])
    sgemm_type = ir.FunctionType(
        ir.VoidType(),
        [
            i32,
            i32,
            i32,
            blas_int,
            blas_int,
            blas_int,
            f32,
            pf,
            blas_int,
            pf,
            blas_int,
            f32,
            pf,
            blas_int,
        ],
    )
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [I64, I64, pi64, I64, pf, I64, I64, pf, I64, pf, I64, I64]),
        "ember_decode_gemm",
    )
    t0, t1, table, n, x, m, k, out, ldo, scratch, decode_addr, sgemm_addr = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    decode = b.inttoptr(decode_addr, decode_type.as_pointer())
    sgemm = b.inttoptr(sgemm_addr, sgemm_type.as_pointer())
    per_thread = b.load(b.gep(table, [I64(1)]))

    def blas(v):
        return v if bits == 64 else b.trunc(v, blas_int)

    def thread(b, t):
        mine = b.gep(scratch, [b.mul(t, per_thread)])
        head, work, done = (b.append_basic_block(s) for s in ("take", "piece", "none"))
        b.branch(head)
        b.position_at_end(head)
        p = b.atomic_rmw("add", b.gep(table, [I64(0)]), I64(1), "monotonic")
        b.cbranch(b.icmp_signed("<", p, n), work, done)
        b.position_at_end(work)
        at = b.add(I64(HEADER), b.mul(p, I64(PIECE_WORDS)))
        w, ldw, r0, r1, col = (b.load(b.gep(table, [b.add(at, I64(i))])) for i in range(5))
        b.call(decode, [b.inttoptr(w, i8p), ldw, mine, k, r0, r1, k])
        b.call(
            sgemm,
            [
                i32(ROW_MAJOR),
                i32(NO_TRANS),
                i32(TRANS),
                blas(m),
                blas(b.sub(r1, r0)),
                blas(k),
                f32(1.0),
                x,
                blas(k),
                mine,
                blas(k),
                f32(0.0),
                b.gep(out, [col]),
                blas(ldo),
            ],
        )
        b.branch(head)
        b.position_at_end(done)

    loop(b, t0, t1, thread, "t")
    b.ret_void()
    llvm_spin.add_split(module, fn, "ember_decode_gemm_split", rows_at=0, align=1)
    return module
