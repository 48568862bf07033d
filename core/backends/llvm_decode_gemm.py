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
# the kernel's arguments (llvm_spin.add_pieces'): (t0, t1, table, x, m, k, out, ldo,
# scratch, decode function, sgemm function)
_ARGS = (_I, _I, _P, _P, _I, _I, _P, _I, _P, _I, _I)
# the table's words: the pieces taken, their count, scratch floats per thread; then a
# piece's: weight address, row stride (units), first row, end row, first output column
HEADER, PIECE_WORDS = 3, 5
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
        threads = 1 if helpers is None else helpers.count + 1
        table = piece_table(pieces, (scratch.size // threads,))
        args = (address(x2), m, k, address(out), out.strides[0] // 4, address(scratch))
        llvm_spin.run_team(self._run, self._split, helpers, table, *args, decode, self.sgemm)


def piece_table(pieces, header):
    """The int64 table of a weight's pieces (rows, r0, r1, first output column) for a
    pieces function (llvm_spin.add_pieces): [0, count, *header], then each piece's
    weight address, row stride (in the array's units), r0, r1 and output column of r0."""
    words = [0, len(pieces), *header]
    for rows, r0, r1, at in pieces:
        words += (address(rows), rows.strides[0] // rows.itemsize, r0, r1, at + r0)
    return np.array(words, np.int64)


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple, bits):
    """``ember_decode_gemm``: a pieces function (llvm_spin.add_pieces) whose piece is
    decoded into its thread's scratch, then multiplied by sgemm into its columns."""
    from llvmlite import ir

    from .llvm_ir import I64, new_module

    f32, i32, blas_int = ir.FloatType(), ir.IntType(32), ir.IntType(bits)
    pf, i8p = f32.as_pointer(), ir.IntType(8).as_pointer()
    module = new_module("ember_decode_gemm", triple)
    decode_type = ir.FunctionType(ir.VoidType(), [i8p, I64, pf, I64, I64, I64, I64])
    matrix = [pf, blas_int]  # a pointer and its row stride
    sgemm_type = ir.FunctionType(
        ir.VoidType(),
        [i32] * 3 + [blas_int] * 3 + [f32] + matrix * 2 + [f32] + matrix,
    )

    def piece(b, t, p, table, args):
        x, m, k, out, ldo, scratch, decode_addr, sgemm_addr = args
        decode = b.inttoptr(decode_addr, decode_type.as_pointer())
        sgemm = b.inttoptr(sgemm_addr, sgemm_type.as_pointer())
        mine = b.gep(scratch, [b.mul(t, b.load(b.gep(table, [I64(2)])))])
        at = b.add(I64(HEADER), b.mul(p, I64(PIECE_WORDS)))
        w, ldw, r0, r1, col = (b.load(b.gep(table, [b.add(at, I64(i))])) for i in range(5))
        b.call(decode, [b.inttoptr(w, i8p), ldw, mine, k, r0, r1, k])

        def blas(v):
            return v if bits == 64 else b.trunc(v, blas_int)

        ints = [i32(ROW_MAJOR), i32(NO_TRANS), i32(TRANS)]
        sizes = [blas(m), blas(b.sub(r1, r0)), blas(k)]
        operands = [x, blas(k), mine, blas(k), f32(0.0), b.gep(out, [col]), blas(ldo)]
        b.call(sgemm, ints + sizes + [f32(1.0)] + operands)

    arg_types = [pf, I64, I64, pf, I64, pf, I64, I64]
    llvm_spin.add_pieces(module, "ember_decode_gemm", arg_types, piece)
    return module
