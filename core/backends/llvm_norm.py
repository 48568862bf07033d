"""Layer norm and RMS norm over rows for the numpy backend, compiled by LLVM through
llvmlite (llvm_build), one call a block of rows.

A decode step normalizes one row of 576-1024 values per call, 61 times a SmolLM2-135M
step and 109 times a Gemma 3 270M one (its q and k heads have norms of their own).
array_rows' numpy form is eight small numpy calls a block: 33 us a 640-value row on an
AMD EPYC host, where the arithmetic is well under 1 us; 4-5 ms of a ~35 ms Gemma step.
Here the whole of it is one pass per row (two for a layer norm), vectorized:

    norm(const f32 *x, i64 ldx, const f32 *res, i64 ldr, f32 *out, i64 ldo,
         i64 rows, i64 cols, const f32 *w, const f32 *bias, f32 eps, i64 rms)
        y = x + res (where res is not null; written to out first, as numpy's form does)
        rms:   out = y * (1 / sqrt(sum(y * y) / cols + eps))
        layer: d = y - sum(y) / cols; out = d * (1 / sqrt(sum(d * d) / cols + eps))
        then out *= w, out += bias (each where not null), one rounding a step

The steps are numpy's (array_rows.norm_last_dim) step for step except the sums, whose
additions LLVM may reorder into vector lanes (numpy sums pairwise): results differ from
the numpy-only ones in the last bits, and a row's sum order is fixed by its length, so
no block or thread split changes a bit. Unavailable (None) without llvmlite, with
EMBER_JIT=0, or where the build fails.
"""

import ctypes
import sys

from .addresses import address

_P, _I = ctypes.c_void_p, ctypes.c_int64
_ARGS = (_P, _I, _P, _I, _P, _I, _I, _I, _P, _P, ctypes.c_float, _I)


def kernels():
    """The compiled NormKernels, or None where they cannot be had."""
    from . import llvm_build

    return llvm_build.kernels("llvm_norm")


def for_rows(xp, *arrays):
    """kernels() where they take `arrays` (numpy float32, each None or with a contiguous
    last dim and, where 2-D, rows at a non-negative stride), else None."""
    if getattr(xp, "__name__", "") != "numpy":
        return None
    for a in arrays:
        if a is None:
            continue
        if a.dtype != xp.float32 or a.ndim not in (1, 2) or a.strides[-1] != 4:
            return None
        if a.ndim == 2 and a.strides[0] < 0:
            return None
    return kernels()


class NormKernels:
    def __init__(self, engine):
        self._engine = engine  # owns the machine code: kept alive with the function
        self._norm = ctypes.CFUNCTYPE(None, *_ARGS)(engine.get_function_address("ember_norm"))

    def norm(self, x, out, weight, bias, eps, rms, residual=None):
        """out (rows, cols) = the norm of x (+ residual) (rows, cols) over each row, w and
        bias (cols,) or None; every row's last dim contiguous (for_rows)."""
        rows, cols = x.shape
        if out.shape != x.shape or (residual is not None and residual.shape != x.shape):
            raise ValueError(f"llvm_norm: shapes {x.shape}, {out.shape} differ")
        for v in (weight, bias):
            if v is not None and v.shape != (cols,):
                raise ValueError(f"llvm_norm: a weight of {v.shape} for rows of {cols}")
        self._norm(
            address(x),
            x.strides[0] // 4,
            None if residual is None else address(residual),
            0 if residual is None else residual.strides[0] // 4,
            address(out),
            out.strides[0] // 4,
            rows,
            cols,
            None if weight is None else address(weight),
            None if bias is None else address(bias),
            eps,
            1 if rms else 0,
        )


def build():
    from . import llvm_build

    return NormKernels(llvm_build.compile_kernels(sys.modules[__name__], _ir_module))


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple):
    from llvmlite import ir

    from .llvm_ir import I64, intrinsic, loop, new_module, reduce

    f32 = ir.FloatType()
    pf = f32.as_pointer()
    module = new_module("ember_norm", triple)
    sqrt = intrinsic(module, "llvm.sqrt.f32", f32, 1)
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [pf, I64, pf, I64, pf, I64, I64, I64, pf, pf, f32, I64]),
        "ember_norm",
    )
    x, ldx, res, ldr, out, ldo, rows, cols, w, bias, eps, rms = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    n = b.sitofp(cols, f32)
    src = b.alloca(pf)  # where a row's y is read: x's row, or out's after the residual

    def summed(b, src, f):
        """sum over the row of f(value), its additions reassociable (vector lanes)."""

        def add(b, j, acc):
            total = b.fadd(acc[0], f(b, b.load(b.gep(src, [j]))))
            total.flags.append("reassoc")
            return (total,)

        return reduce(b, cols, (f32(0.0),), add, "sum")[0]

    def inverse_deviation(b, square_sum):
        """1 / sqrt(square_sum / cols + eps), each step rounded to f32 as numpy's are."""
        return b.fdiv(f32(1.0), b.call(sqrt, [b.fadd(b.fdiv(square_sum, n), eps)]))

    def each(b, row, f):
        loop(b, I64(0), cols, lambda b, j: b.store(f(b, j), b.gep(row, [j])), "j")

    def if_set(b, ptr, then):
        """then(b) where the pointer argument is not null."""
        with b.if_then(b.icmp_unsigned("!=", ptr, ir.Constant(pf, None))):
            then(b)

    def row(b, r):
        dst = b.gep(out, [b.mul(r, ldo)])
        b.store(b.gep(x, [b.mul(r, ldx)]), src)

        def add_residual(b):
            xr, rr = b.load(src), b.gep(res, [b.mul(r, ldr)])
            each(b, dst, lambda b, j: b.fadd(b.load(b.gep(xr, [j])), b.load(b.gep(rr, [j]))))
            b.store(dst, src)

        if_set(b, res, add_residual)
        y = b.load(src)
        is_rms = b.icmp_signed("!=", rms, I64(0))
        with b.if_else(is_rms) as (then, otherwise):
            with then:
                inv = inverse_deviation(b, summed(b, y, lambda b, v: b.fmul(v, v)))
                each(b, dst, lambda b, j: b.fmul(b.load(b.gep(y, [j])), inv))
            with otherwise:
                mean = b.fdiv(summed(b, y, lambda b, v: v), n)
                each(b, dst, lambda b, j: b.fsub(b.load(b.gep(y, [j])), mean))
                inv = inverse_deviation(b, summed(b, dst, lambda b, v: b.fmul(v, v)))
                each(b, dst, lambda b, j: b.fmul(b.load(b.gep(dst, [j])), inv))
        if_set(
            b,
            w,
            lambda b: each(
                b, dst, lambda b, j: b.fmul(b.load(b.gep(dst, [j])), b.load(b.gep(w, [j])))
            ),
        )
        if_set(
            b,
            bias,
            lambda b: each(
                b, dst, lambda b, j: b.fadd(b.load(b.gep(dst, [j])), b.load(b.gep(bias, [j])))
            ),
        )

    loop(b, I64(0), rows, row, "r")
    b.ret_void()
    return module
