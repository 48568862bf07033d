"""Elementwise f32 kernels for the numpy backend, compiled by LLVM through llvmlite
(llvm_build): exact GELU and SiLU, and the exponentials and row sums of an unshifted
softmax.

numpy's float32 tanh and exp cost 1.3-3.8 ns an element on an AVX2 host (AMD EPYC
here, numpy 2.4), and GELU took 18 passes over memory besides: 14 ms for the
1500 x 2048 output of one Whisper base encoder layer's fc1, about what its GEMM costs on
two cores. Here one pass, vectorized (8 or 16 lanes), the exponential from
llvm_ir.exp_neg (within 2e-7 relative of float64):

    gelu, silu(const f32 *x, i64 ldx, i64 rows, i64 cols, f32 *out, i64 ldo)
        out[r * ldo + j] = f(x[r * ldx + j])   (rows of a strided view, or in place)
        gelu(x) = x / (1 + exp(-2 g(x)))       (= 0.5 x (1 + tanh(g(x))), ops.gelu_erf_block's
                                                g; within 3e-7 relative of float64 GELU for
                                                x > 0.01, 2e-7 absolute below; x * 0 under
                                                -6, where |GELU| < 6e-9: see GELU_ZERO_BELOW)
        silu(x) = x / (1 + exp(-x))            (within 3e-7 relative everywhere, where numpy's
                                                tanh form loses digits for x < 0; x * 0
                                                under -100)
        gelu_tanh(x) = x / (1 + exp(-2 h(x)))  (= 0.5 x (1 + tanh(h(x))), h(x) = sqrt(2/pi)
                                                (x + 0.044715 x^3): GELU's tanh form, exact
                                                to 3e-7 relative for x > 0.01, 2e-7 absolute
                                                below; x * 0 under -6, as for GELU)
    gated_<op>(const f32 *x, i64 ldx, i64 rows, i64 cols, f32 *out, i64 ldo), op each of
    the maps above
        out[r * ldo + j] = f(x[r * ldx + j]) * x[r * ldx + cols + j]
        (a gated MLP's activation: the gate half's map times the up half, in one pass;
        the map's own steps, then one multiply: the bits of the map, then numpy's product)
    rope, rope_pairs(const f32 *x, i64 xb, i64 xh, i64 xt, const f32 *cos,
                     const f32 *sin, i64 cb, i64 ch, i64 ct, f32 *out, i64 B, i64 H,
                     i64 T, i64 half)
        the rotary embedding of x [B, H, T, 2 half] (strides in elements, the last dim
        contiguous) by the tables [B, H, T, half] (strides cb, ch, ct: 0 where broadcast;
        cos and sin alike) into the contiguous out: for the pair a, b = x[..., i],
        x[..., i + half] (rope; Hugging Face's half-split) or x[..., 2i], x[..., 2i + 1]
        (rope_pairs; GGUF's Llama order), a' = a cos - b sin, b' = b cos + a sin, each
        product rounded, then the sum (numpy's four passes, the same bits, and
        llvm_attention's step's)
    exp_rows(f32 *s, i64 ld, i64 rows, i64 cols, f32 *total)
        s[r][j] = exp(s[r][j]) in place, total[r] = the row's sum, for r < rows, j < cols
        (+inf above 127 ln 2 = 88.03 and 0 below -87.34, EXP_MAX and EXP_MIN, so that
        array_attention's check redoes a row shifted where numpy's exp overflows too)

Each element's value depends on nothing but its input, so blocks and threads never
change a bit; a row sum's order is fixed by its length. These are other algorithms than
numpy's, so with them (llvmlite installed, EMBER_JIT not 0) the CPU's GELU, SiLU and
attention differ from the numpy-only ones in the last bits; every size and path of one
install takes the same one (array_fast). Unavailable (None) without llvmlite or where
the build fails.
"""

import ctypes
import itertools
import sys

from .addresses import address

_P, _I = ctypes.c_void_p, ctypes.c_int64
# exp_rows gives +inf above EXP_MAX (127 ln 2: exp_neg's range; float32's own exp
# overflows at 88.72, and a softmax row holding such a score is redone shifted either
# way) and 0 below EXP_MIN (e^-87.34 is the smallest normal float32; float32's exp goes
# on through denormals to -103.3, terms no softmax sum notices)
EXP_MAX, EXP_MIN = 88.02969193111305, -87.33654022216797
# Under -6 the polynomial g only keeps tanh saturated (it fits erf's GELU to 2e-7 absolute,
# not its tail), so this form gave values from 1e-10 down to exp_neg's clamp, x * 2^-127:
# noise where GELU is under 6e-9, and tiny enough that the next GEMM's products fell to
# float32 denormals, which the CPU computes in microcode: Whisper base's encoder, whose last
# layers put most fc1 outputs under -6, ran its fc2 GEMMs at 60% speed. Zero from -6 on, as
# erf's form in float32 (1 + erf(x / sqrt 2) rounds to 0 near there).
GELU_ZERO_BELOW = -6.0
SILU_ZERO_BELOW = -100.0  # SiLU(-100) = -3.7e-42; below it under float32's denormals
# GELU's tanh form: under -6 it is above -1e-10, and its exponential form went on through
# values whose products fall to denormals (GELU_ZERO_BELOW's reason)
GELU_TANH_ZERO_BELOW = -6.0
ELEMENTWISE = ("gelu", "silu", "gelu_tanh")


def kernels():
    """The compiled MathKernels, or None where they cannot be had (llvm_build.kernels
    builds them with the other llvmlite kernels)."""
    from . import llvm_build

    return llvm_build.kernels("llvm_math")


def for_array(xp, a):
    """kernels() where they take `a` (a numpy float32 array), else None."""
    if getattr(xp, "__name__", "") != "numpy" or a.dtype != xp.float32:
        return None
    return kernels()


class MathKernels:
    def __init__(self, engine):
        self._engine = engine  # owns the machine code: kept alive with the functions
        self._maps = {
            op: ctypes.CFUNCTYPE(None, _P, _I, _I, _I, _P, _I)(
                engine.get_function_address(f"ember_{op}")
            )
            for op in ELEMENTWISE
        }
        self._gated = {
            op: ctypes.CFUNCTYPE(None, _P, _I, _I, _I, _P, _I)(
                engine.get_function_address(f"ember_gated_{op}")
            )
            for op in ELEMENTWISE
        }
        rope = ctypes.CFUNCTYPE(None, _P, *(_I,) * 3, _P, _P, *(_I,) * 3, _P, *(_I,) * 4)
        self._rope = {
            pairs: rope(engine.get_function_address(name))
            for pairs, name in ((False, "ember_rope"), (True, "ember_rope_pairs"))
        }
        self._exp_rows = ctypes.CFUNCTYPE(None, _P, _I, _I, _I, _P)(
            engine.get_function_address("ember_exp_rows")
        )

    def apply(self, op, x, out):
        """out = op(x) (one of ELEMENTWISE) for float32 arrays of one shape whose last dim
        is contiguous and whose other dims merge into rows (out may be x)."""
        rows_x, ldx, cols = _rows(x)
        rows_o, ldo, cols_o = _rows(out)
        if (rows_x, cols) != (rows_o, cols_o):
            raise ValueError(f"llvm_math.{op}: shapes {x.shape} and {out.shape} differ")
        self._maps[op](address(x), ldx, rows_x, cols, address(out), ldo)

    def gated(self, op, x, out):
        """out = op(gate) * up for x's rows [gate | up] (float32, each row's last dim
        contiguous, the other dims merging into rows) and out of x's shape with the last
        dim halved; op one of ELEMENTWISE."""
        rows_x, ldx, cols = _rows(x)
        rows_o, ldo, cols_o = _rows(out)
        if cols % 2 or (rows_x, cols // 2) != (rows_o, cols_o):
            raise ValueError(
                f"llvm_math.gated_{op}: x {x.shape} must be [gate | up] rows of out {out.shape}"
            )
        self._gated[op](address(x), ldx, rows_x, cols_o, address(out), ldo)

    def rope(self, x, cos, sin, out, interleaved=False):
        """out = x rotated by cos, sin (rope above; pairs (2i, 2i + 1) where `interleaved`,
        else (i, i + D/2)): x [B, H, T, D] float32 with its last
        dim contiguous, cos and sin float32 views [B, H, T, D/2] of one layout (their
        last dim contiguous, broadcast dims of stride 0), out a C-contiguous [B, H, T, D]
        not overlapping x."""
        shape = x.shape
        ok = (
            x.ndim == 4
            and shape[-1] % 2 == 0
            and out.shape == shape
            and out.flags.c_contiguous
            and cos.shape == sin.shape == shape[:-1] + (shape[-1] // 2,)
            and cos.strides == sin.strides
            and all(a.dtype == "float32" for a in (x, cos, sin, out))
            and (shape[-1] <= 1 or x.strides[-1] == 4)
            and (shape[-1] <= 2 or cos.strides[-1] == 4)
            and min(x.strides + cos.strides) >= 0
        )
        if not ok:
            raise ValueError(
                f"llvm_math.rope: x {shape} {x.dtype}, tables {cos.shape}, out {out.shape} "
                "are not what the kernel indexes"
            )
        xb, xh, xt = (st // 4 for st in x.strides[:3])
        cb, ch, ct = (st // 4 for st in cos.strides[:3])
        self._rope[bool(interleaved)](
            address(x), xb, xh, xt, address(cos), address(sin), cb, ch, ct,
            address(out), *shape[:3], shape[-1] // 2,
        )  # fmt: skip

    def exp_rows(self, s, total):
        """exp of the 2-D float32 array s in place (rows contiguous), total[r] = row r's
        sum (a contiguous float32 vector of s's row count)."""
        if s.dtype != "float32" or s.ndim != 2 or (s.shape[1] > 1 and s.strides[1] != 4):
            raise ValueError(
                f"llvm_math.exp_rows: needs 2-D float32 rows, got {s.dtype} {s.strides}"
            )
        if total.dtype != "float32" or not total.flags.c_contiguous:
            raise ValueError("llvm_math.exp_rows: totals must be contiguous float32")
        if total.size != s.shape[0]:
            raise ValueError(f"llvm_math.exp_rows: {total.size} totals for {s.shape[0]} rows")
        self._exp_rows(address(s), s.strides[0] // 4, s.shape[0], s.shape[1], address(total))


def _rows(a):
    """(rows, row stride in elements, columns) of a float32 array as 2-D rows: its last
    dim contiguous, the others merging into one (a view, never a copy)."""
    if a.dtype != "float32":
        raise ValueError(f"llvm_math: needs float32, got {a.dtype}")
    if a.flags.c_contiguous and a.ndim:  # the common case, without the walk below
        return a.size // max(a.shape[-1], 1), max(a.shape[-1], 1), a.shape[-1]
    if a.ndim == 0 or a.size == 0:
        return (0 if a.size == 0 else 1), 1, (a.size if a.ndim == 0 else a.shape[-1])
    cols = a.shape[-1]
    if cols > 1 and a.strides[-1] != 4:
        raise ValueError(f"llvm_math: the last dim must be contiguous, got strides {a.strides}")
    rows = a.size // cols
    if rows == 1:
        return 1, cols, cols
    lead = [(n, st) for n, st in zip(a.shape[:-1], a.strides[:-1], strict=True) if n != 1]
    for (_, outer), (n, inner) in itertools.pairwise(lead):
        if outer != inner * n:
            raise ValueError(f"llvm_math: rows that do not merge: strides {a.strides}")
    return rows, lead[-1][1] // 4, cols


def build():
    from . import llvm_build

    features = llvm_build.host()[3]
    lanes = 16 if features.get("avx512f", False) else 8  # f32 lanes of the host's vectors
    return MathKernels(
        llvm_build.compile_kernels(
            sys.modules[__name__], lambda triple: _ir_module(triple, lanes), params=(lanes,)
        )
    )


# --- the IR ------------------------------------------------------------------------------------
def _like(v, x):
    """The constant x in v's type (a scalar or a vector of f32)."""
    from llvmlite import ir

    lanes = getattr(v.type, "count", None)
    return ir.Constant(v.type, x if lanes is None else [x] * lanes)


def _fmuladd(module, typ):
    from .llvm_ir import intrinsic

    lanes = getattr(typ, "count", None)
    return intrinsic(module, "llvm.fmuladd." + ("f32" if lanes is None else f"v{lanes}f32"), typ, 3)


def _zero_below(b, v, y, limit):
    """y, but v * 0 where v < limit: -0 (NaN for -inf) as numpy's forms give there, where
    exp_neg's clamp would leave v * 2^-127 for a true value under float32's range."""
    return b.select(b.fcmp_ordered("<", v, _like(v, limit)), b.fmul(v, _like(v, 0.0)), y)


def _map_rows(module, name, f, vec, gated=False):
    """``void name(const f32 *x, i64 ldx, i64 rows, i64 cols, f32 *out, i64 ldo)``:
    out[r * ldo + j] = f(x[r * ldx + j]), f built for a vector and for one element;
    `gated`: times x[r * ldx + cols + j]."""
    from llvmlite import ir

    from .llvm_ir import I64, loop, vector_load, vector_store

    f32 = ir.FloatType()
    pf = f32.as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [pf, I64, I64, I64, pf, I64]), name)
    x, ldx, rows, cols, out, ldo = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lanes = vec.count
    whole = b.mul(b.udiv(cols, I64(lanes)), I64(lanes))

    def row(b, r):
        src, dst = b.gep(x, [b.mul(r, ldx)]), b.gep(out, [b.mul(r, ldo)])

        def mapped(b, at, load):
            y = f(b, load(b.gep(src, [at])))
            return b.fmul(y, load(b.gep(src, [b.add(at, cols)]))) if gated else y

        def vector(b, i):
            y = mapped(b, i, lambda p: vector_load(b, p, vec))
            vector_store(b, y, b.gep(dst, [i]))

        def one(b, i):
            b.store(mapped(b, i, b.load), b.gep(dst, [i]))

        loop(b, I64(0), whole, vector, "v", step=lanes)
        loop(b, whole, cols, one, "i")

    loop(b, I64(0), rows, row, "r")
    b.ret_void()


def activation_ir(op, b, module, v):
    """op(v) (one of ELEMENTWISE) built into b for the f32 scalar or vector v: the steps
    of this module's kernels, so a kernel elsewhere (llvm_conv's epilogue) that builds
    its activation here gives the bits Tensor.silu/gelu give."""
    from ..ops import _GELU_G, SQRT_2_OVER_PI
    from .llvm_ir import exp_neg

    if op == "gelu":
        t = b.fmul(v, v)
        p = _like(v, _GELU_G[6])
        for c in _GELU_G[5::-1]:  # ((G6 t + G5) t + ... + G1) t + G0, gelu_erf_block's g
            p = b.call(_fmuladd(module, v.type), [p, t, _like(v, c)])
        g2 = b.fmul(b.fmul(p, v), _like(v, 2.0))
        y = b.fdiv(v, b.fadd(_like(v, 1.0), exp_neg(b, module, g2)))
        return _zero_below(b, v, y, GELU_ZERO_BELOW)
    if op == "silu":
        y = b.fdiv(v, b.fadd(_like(v, 1.0), exp_neg(b, module, v)))
        return _zero_below(b, v, y, SILU_ZERO_BELOW)
    if op == "gelu_tanh":
        h = b.call(  # (G1 x^2 + G0) x, ops.gelu_tanh_array's inner
            _fmuladd(module, v.type),
            [_like(v, 0.044715 * SQRT_2_OVER_PI), b.fmul(v, v), _like(v, SQRT_2_OVER_PI)],
        )
        h2 = b.fmul(b.fmul(h, v), _like(v, 2.0))
        y = b.fdiv(v, b.fadd(_like(v, 1.0), exp_neg(b, module, h2)))
        return _zero_below(b, v, y, GELU_TANH_ZERO_BELOW)
    raise ValueError(f"llvm_math: no kernel for {op!r} (those built: {', '.join(ELEMENTWISE)})")


def _ir_module(triple, lanes):
    from llvmlite import ir

    from .llvm_ir import I64, exp_neg, loop, new_module, no_alias, reduce

    f32 = ir.FloatType()
    pf = f32.as_pointer()
    module = new_module("ember_math", triple)

    # the elementwise maps, each over rows: a loop over whole vectors, then one element
    # at a time (the same steps, so the same bits either way); in place too, which the
    # loop vectorizer would not take (out and x may be one array)
    vec = ir.VectorType(f32, lanes)
    for op in ELEMENTWISE:

        def f(b, v, op=op):
            return activation_ir(op, b, module, v)

        _map_rows(module, f"ember_{op}", f, vec)
        _map_rows(module, f"ember_gated_{op}", f, vec, gated=True)

    for interleaved in (False, True):
        _add_rope(module, vec, interleaved)

    # exp_rows
    fn = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [pf, I64, I64, I64, pf]), "ember_exp_rows"
    )
    s, ld, rows, cols, total = fn.args
    no_alias(s, total)
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def row(b, r):
        base = b.gep(s, [b.mul(r, ld)])

        def one(b, j, acc):
            at = b.gep(base, [j])
            v = b.load(at)
            e = exp_neg(b, module, b.fsub(f32(-0.0), v))
            e = b.select(b.fcmp_ordered(">", v, f32(EXP_MAX)), f32(float("inf")), e)
            e = b.select(b.fcmp_ordered("<", v, f32(EXP_MIN)), f32(0.0), e)
            b.store(e, at)
            total = b.fadd(acc[0], e)
            total.flags.append("reassoc")  # lets the loop vectorizer keep lanes of sums
            return (total,)

        (sum_,) = reduce(b, cols, (f32(0.0),), one, "j")
        b.store(sum_, b.gep(total, [r]))

    loop(b, I64(0), rows, row, "r")
    b.ret_void()
    return module


def _add_rope(module, vec, interleaved):
    """``ember_rope`` or ``ember_rope_pairs`` (see the module's note): vectors of the
    pairs' first and second values (shuffled out of two loads for pairs (2i, 2i + 1)),
    then a tail one pair at a time."""
    from llvmlite import ir

    from .llvm_ir import I64, loop, vector_load, vector_store

    f32 = ir.FloatType()
    pf = f32.as_pointer()
    args = [pf, I64, I64, I64, pf, pf, I64, I64, I64, pf, I64, I64, I64, I64]
    name = "ember_rope_pairs" if interleaved else "ember_rope"
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name)
    x, xb, xh, xt, cos, sin, cb, ch, ct, out, n_b, n_h, n_t, half = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lanes = vec.count
    whole = b.mul(b.udiv(half, I64(lanes)), I64(lanes))
    i32 = ir.IntType(32)

    def mask(indices):
        return ir.Constant(ir.VectorType(i32, len(indices)), [i32(i) for i in indices])

    evens, odds = mask(range(0, 2 * lanes, 2)), mask(range(1, 2 * lanes, 2))
    low = mask([j for i in range(lanes // 2) for j in (i, lanes + i)])
    high = mask([j for i in range(lanes // 2, lanes) for j in (i, lanes + i)])

    def rotated(b, a, y, c, s_):
        return b.fsub(b.fmul(a, c), b.fmul(y, s_)), b.fadd(b.fmul(y, c), b.fmul(a, s_))

    def position(b, ib, ih, it):
        src = b.gep(x, [b.add(b.add(b.mul(ib, xb), b.mul(ih, xh)), b.mul(it, xt))])
        at = b.add(b.add(b.mul(ib, cb), b.mul(ih, ch)), b.mul(it, ct))
        c, s_ = b.gep(cos, [at]), b.gep(sin, [at])
        row = b.mul(b.add(b.mul(b.add(b.mul(ib, n_h), ih), n_t), it), b.mul(half, I64(2)))
        dst = b.gep(out, [row])

        def vload(p):
            return vector_load(b, p, vec)

        def vstore(v, p):
            vector_store(b, v, p)

        def vectors(b, i):
            cc, ss = vload(b.gep(c, [i])), vload(b.gep(s_, [i]))
            if interleaved:  # x[2i .. 2i + 2 lanes): even and odd values
                at0 = b.mul(i, I64(2))
                v0, v1 = vload(b.gep(src, [at0])), vload(b.gep(src, [b.add(at0, I64(lanes))]))
                a, y = b.shuffle_vector(v0, v1, evens), b.shuffle_vector(v0, v1, odds)
                first, second = rotated(b, a, y, cc, ss)
                vstore(b.shuffle_vector(first, second, low), b.gep(dst, [at0]))
                vstore(b.shuffle_vector(first, second, high), b.gep(dst, [b.add(at0, I64(lanes))]))
            else:
                a, y = vload(b.gep(src, [i])), vload(b.gep(src, [b.add(i, half)]))
                first, second = rotated(b, a, y, cc, ss)
                vstore(first, b.gep(dst, [i]))
                vstore(second, b.gep(dst, [b.add(i, half)]))

        def one(b, i):
            if interleaved:
                ia = b.mul(i, I64(2))
                iy = b.add(ia, I64(1))
            else:
                ia, iy = i, b.add(i, half)
            a, y = b.load(b.gep(src, [ia])), b.load(b.gep(src, [iy]))
            first, second = rotated(b, a, y, b.load(b.gep(c, [i])), b.load(b.gep(s_, [i])))
            b.store(first, b.gep(dst, [ia]))
            b.store(second, b.gep(dst, [iy]))

        loop(b, I64(0), whole, vectors, "v", step=lanes)
        loop(b, whole, half, one, "i")

    def over_t(b, ib, ih):
        loop(b, I64(0), n_t, lambda b, it: position(b, ib, ih, it), "t")

    def over_h(b, ib):
        loop(b, I64(0), n_h, lambda b, ih: over_t(b, ib, ih), "h")

    loop(b, I64(0), n_b, over_h, "b")
    b.ret_void()
