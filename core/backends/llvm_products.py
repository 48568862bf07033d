"""The ctypes side of ember's compiled weight-times-rows kernels (llvm_f16's F16 products,
llvm_quant's ggml block types): one class for every weight format, since their compiled
functions share one signature, in C terms:

    dot(const W *w, i64 ldw, const f32 *x, i64 ldx, f32 *out, i64 ldo,
        i64 m, i64 r0, i64 r1, i64 k)
        out[i * ldo + r] = sum_j weight(r, j) * x[i * ldx + j]
        for weight rows r in [r0, r1) and rows i of x in [0, m); k weights a row
    decode(const W *w, i64 ldw, f32 *out, i64 ldo, i64 r0, i64 r1, i64 k)
        out[(r - r0) * ldo + j] = weight(r, j), exactly (the values numpy's dequantizer gives)
    dot_split(i64 *slots, i64 helpers, <dot's arguments>), where built: dot's rows shared
        with llvm_spin's helpers (llvm_spin.add_split)

W is the format's storage unit (a half for F16, a byte for block types) and ldw counts
those. dot takes two weight rows at a time, so a row's bits depend only on its pair:
the same for any split that keeps pairs whole (align 2).
"""

import ctypes

import numpy as np

from . import llvm_spin
from .addresses import address

_P, _I = ctypes.c_void_p, ctypes.c_int64
DOT_ARGS = (_P, _I, _P, _I, _P, _I, _I, _I, _I, _I)
DECODE_ARGS = (_P, _I, _P, _I, _I, _I, _I)
ROWS_AT = 7  # dot's r0 among its arguments (llvm_spin.add_split's rows_at)
# Weights times rows of x from which a split first wakes its sleeping helpers and waits
# for them (llvm_spin.Helpers.ready): ~0.3 ms of one core's work at 5-10 GB/s of weight
# bytes, against a wake-up of ~20-100 us.
WAKE_FOR = 1 << 22


class ProductKernels:
    """dot and decode over numpy arrays for one weight format: the weight a 2-D array of
    `unit` (its rows contiguous, `per_row(w)` weights each), x and out float32 with
    contiguous rows."""

    def __init__(self, engine, prefix, unit, per_row, split=False, packs=False):
        self._engine = engine  # owns the machine code: kept alive with the functions
        address = engine.get_function_address
        self._dot = ctypes.CFUNCTYPE(None, *DOT_ARGS)(address(prefix + "_dot"))
        # decode's address: llvm_decode_gemm's compiled pieces call it too
        self.decode_address = address(prefix + "_decode")
        self._decode = ctypes.CFUNCTYPE(None, *DECODE_ARGS)(self.decode_address)
        # pack's (llvm_integer_gemm.add_pack), for the formats that have one; else None
        self.pack_address = address(prefix + "_pack") if packs else None
        split_addr = address(prefix + "_dot_split") if split else 0
        self._split = ctypes.CFUNCTYPE(_I, _P, _I, *DOT_ARGS)(split_addr) if split_addr else None
        self.unit = np.dtype(unit)
        self._per_row = per_row
        self.name = prefix

    def weight_rows(self, qtensor):
        """A host weight (io.quant.QTensor) as the 2-D array of units the kernels read."""
        return qtensor.raw.view(self.unit).reshape(qtensor.shape[0], -1)

    def helpers(self, threads):
        """This process's llvm_spin helpers for `threads` threads in all (the caller's
        among them), or None: one thread, or no split built for this CPU."""
        if self._split is None:
            return None
        return llvm_spin.process_helpers(threads)

    def args(self, w, x, out, r0, r1):
        """dot's ten arguments for these arrays (checked now), for `call`."""
        self._check(w, x, out)
        return (*_rows(w), *_rows(x), *_rows(out), x.shape[0], r0, r1, self._per_row(w))

    def dot_split(self, w, x, out, r0, r1, helpers):
        """dot over rows r0:r1 shared with `helpers` (self.helpers): the same bits.
        Returns whether the helpers ran their parts (llvm_spin.Helpers.split)."""
        return self.call_split(self.args(w, x, out, r0, r1), helpers)

    def dot(self, w, x, out, r0, r1):
        """out[:, r0:r1] = x @ weight(w[r0:r1]).T (out may be a column slice of a wider array)."""
        self._dot(*self.args(w, x, out, r0, r1))

    def weight_args(self, w):
        """(address, row stride, rows, weights a row) of a weight the kernels can index
        (checked now): the weight's part of dot's arguments, for `call`."""
        self._check(w, None, None)
        return w.ctypes.data, w.strides[0] // w.itemsize, w.shape[0], self._per_row(w)

    def call(self, args, r0, r1):
        """dot on ready arguments (dot's ten, checked: from `args`, or a weight's from
        weight_args) over rows r0:r1 instead of theirs."""
        self._dot(*args[:7], r0, r1, args[9])

    def call_split(self, args, helpers):
        """dot_split on ready arguments (see call)."""
        if args[6] * (args[8] - args[7]) * args[9] >= WAKE_FOR:
            helpers.ready()
        return helpers.split(self._split, *args)

    def decode(self, w, out, r0, r1):
        """out[: r1 - r0] = weight(w[r0:r1]) as float32, exactly."""
        self._check(w, None, out)
        self._decode(*_rows(w), *_rows(out), r0, r1, self._per_row(w))

    def _check(self, w, x, out):
        # the kernels index with row strides only: every row must be contiguous
        if (
            w.dtype != self.unit
            or w.ndim != 2
            or (w.shape[1] > 1 and w.strides[1] != self.unit.itemsize)
        ):
            raise ValueError(
                f"{self.name}: weight must be 2-D {self.unit} with contiguous rows, "
                f"got {w.dtype} {w.strides}"
            )
        for a in (x, out):
            if a is not None and (
                a.dtype != np.float32 or a.ndim != 2 or (a.shape[1] > 1 and a.strides[1] != 4)
            ):
                raise ValueError(
                    f"{self.name}: rows must be 2-D float32, contiguous, got {a.dtype} {a.strides}"
                )
        if x is not None and x.shape[1] != self._per_row(w):
            raise ValueError(
                f"{self.name}: x has {x.shape[1]} columns, the weight {self._per_row(w)} a row"
            )


def _rows(a):
    """(address, row stride in elements) of a 2-D array whose rows are contiguous."""
    return address(a), a.strides[0] // a.itemsize
