"""A decode step's attention (a few queries against a cache) for the numpy backend,
compiled by LLVM through llvmlite (llvm_build): one call for every head of the step.

array_small_attention's numpy form is a dozen numpy calls (the scaled queries, two
batched matmuls, the exponentials, the sums, the checks): 60 us for SmolLM2-135M's
3 kv heads x 3 queries x 160 keys on an AMD EPYC host, about 1.8 ms of a ~40 ms step
over its 30 layers, where the arithmetic is a few microseconds. Here:

    attend(q, q_m, q_r, k, k_m, k_r, v, v_m, v_r, mask, mask_m, mask_r, out, out_m, out_r,
           m, tq, tk, d, dv, scale, scratch) -> rows left undone
        for each matrix i < m and query row r < tq (strides in f32 elements: _m between
        matrices, _r between rows; the last dim contiguous):
        qs = q[i, r] * scale                       (rounded, as numpy's q * scale)
        s[t] = sum_j qs[j] * k[i, t, j] (+ mask[i, r, t] where mask is not null)
        p[t] = exp(s[t] - max(s))                  (0 where s[t] - max < EXP_MIN)
        out[i, r] = (sum_t p[t] * v[i, t]) / sum_t p[t]

`scratch` holds 2 tk + d floats (the scores, the scaled query, and zeros that stand for
an absent mask). The softmax is shifted by each row's maximum, so no score
overflows; a row whose maximum is not finite (every key masked, an infinite score,
only NaN scores) is counted and left to the caller, which redoes the whole call in
numpy; a NaN among finite scores makes its row NaN, as numpy's form does. The sums
over j may be reordered into vector lanes: results differ from the numpy form's (BLAS's
products) in the last bits, and depend on nothing but the row's own operands.
Unavailable (None) without llvmlite, with EMBER_JIT=0, or where the build fails.
"""

import ctypes
import sys

import numpy as np

from . import llvm_spin
from .addresses import address
from .llvm_math import EXP_MIN

_P, _I = ctypes.c_void_p, ctypes.c_int64
# keys whose scores (and whose rows of v) one pass takes: each load of q or of out's row
# then serves four (3 x 3 x 160 x 64, the call with its Python: 35 -> 25 us)
KEYS_AT_ONCE = 4
_ARGS = (_P, _I, _I) * 5 + (_I, _I, _I, _I, _I, ctypes.c_float, _P)
_STEP_ARGS = (_P, _P, _P, _I, _P, _P, _I, _I, _I, _I, _I, ctypes.c_float, _P, _P, _P)


def kernels():
    """The compiled AttentionKernels, or None where they cannot be had."""
    from . import llvm_build

    return llvm_build.kernels("llvm_attention")


class AttentionKernels:
    def __init__(self, engine, split=False):
        self._engine = engine  # owns the machine code: kept alive with the function
        self._attend = ctypes.CFUNCTYPE(_I, *_ARGS)(engine.get_function_address("ember_attend"))
        self._step = ctypes.CFUNCTYPE(_I, *_STEP_ARGS)(
            engine.get_function_address("ember_attend_step")
        )
        self._split = None
        if split:
            address = engine.get_function_address("ember_attend_split")
            self._split = ctypes.CFUNCTYPE(_I, _P, _I, _P, _I, _I)(address)

    def helpers(self, threads):
        """llvm_spin's helpers for `threads` threads in all, or None (no split here)."""
        return None if self._split is None else llvm_spin.process_helpers(threads)

    def attend_split(self, operands, m, tq, tk, d, dv, scale, scratch, helpers):
        """attend with its m matrices shared with llvm_spin's `helpers` (each part its
        own matrices, computed by the same code: the same bits); scratch holds m x (2 tk +
        d) floats, a part's at its first matrix's place. Returns (the rows left undone,
        whether the helpers ran their parts: llvm_spin.Helpers.split)."""
        if scratch.size < m * (2 * tk + d) or scratch.dtype != "float32":
            raise ValueError(
                f"llvm_attention: scratch of {scratch.size} for {m} x (2 x {tk} + {d})"
            )
        counts = np.zeros(m, np.int64)
        scale_bits = int(np.float32(scale).view(np.uint32))
        words = np.array(
            _operand_words(operands)
            + [m, tq, tk, d, dv, scale_bits, address(scratch), address(counts)],
            np.int64,
        )
        shared = helpers.split(self._split, address(words), 0, m)
        return int(counts.sum()), shared

    def attend_step(self, qkv, keys, values, length, n_heads, scale, tables, interleaved):
        """One position's self-attention for a batch of one in one call (ember_attend_step,
        ArrayBackend.attention_step's arithmetic): qkv (heads, d) float32 C-contiguous,
        keys and values (kv, L, d) float32 views with contiguous rows, written at row
        `length`; tables None or (cos, sin), each d / 2 contiguous floats. Returns (out
        (n_heads * d,), rotated q and k heads (n_heads + kv, d)) and None for out where a
        row was left undone (a maximum score not finite: the caller redoes the attention
        on the heads); None where the arrays are not that (the caller's own path)."""
        heads, d = qkv.shape
        kv = keys.shape[0]
        if (
            not qkv.flags.c_contiguous
            or keys.shape != values.shape
            or keys.shape[2] != d
            or keys.strides != values.strides
            or keys.strides[1:] != (4 * d, 4)
            or heads != n_heads + 2 * kv
            or d % 2
        ):
            return None
        cos = sin = None
        if tables is not None:
            cos, sin = tables
            if cos.shape != (d // 2,) or sin.shape != cos.shape:
                return None
        rot = np.empty((n_heads + kv, d), np.float32)
        out = np.empty(n_heads * d, np.float32)
        scratch = np.empty(2 * (length + 1) + d, np.float32)
        undone = self._step(
            address(qkv),
            None if cos is None else address(cos),
            None if sin is None else address(sin),
            1 if interleaved else 0,
            address(keys),
            address(values),
            keys.strides[0] // 4,
            length,
            n_heads,
            kv,
            d,
            scale,
            address(rot),
            address(out),
            address(scratch),
        )
        return (None if undone else out), rot

    def attend(self, operands, m, tq, tk, d, dv, scale, scratch):
        """The attention of m stacked matrices q [tq, d], k [tk, d], v [tk, dv] under a
        mask [tq, tk] (or none), into out [tq, dv]: `operands` the five (q, k, v, mask,
        out) as (array, matrix stride, row stride) in float32 elements, mask None, each
        array float32 with its last dim contiguous and holding every element the strides
        reach (the caller checks: array_small_attention); scratch a float32 array of at
        least 2 tk + d. Returns the number of rows not computed (a maximum score that is
        not finite), which the caller redoes."""
        if scratch.size < 2 * tk + d or scratch.dtype != "float32":
            raise ValueError(f"llvm_attention: scratch of {scratch.size} for 2 x {tk} + {d} floats")
        args = _operand_words(operands)
        return self._attend(*args, m, tq, tk, d, dv, scale, address(scratch))


def _operand_words(operands):
    """(address, matrix stride, row stride) of each operand, 0s for an absent one."""
    words = []
    for item in operands:
        if item is None:
            words += [0, 0, 0]
        else:
            a, matrix, row = item
            if a.dtype != "float32":
                raise ValueError(f"llvm_attention: needs float32, got {a.dtype}")
            words += [address(a), matrix, row]
    return words


def build():
    from . import llvm_build

    split = llvm_spin.supported(llvm_build.host()[0])
    engine = llvm_build.compile_kernels(sys.modules[__name__], _ir_module, sources=(llvm_spin,))
    return AttentionKernels(engine, split)


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple):
    from llvmlite import ir

    from .llvm_ir import I64, loop, new_module, no_alias, reduce

    f32 = ir.FloatType()
    pf = f32.as_pointer()
    module = new_module("ember_attention", triple)
    operand = [pf, I64, I64]
    fn = ir.Function(
        module,
        ir.FunctionType(I64, operand * 5 + [I64, I64, I64, I64, I64, f32, pf]),
        "ember_attend",
    )
    (
        q,
        q_m,
        q_r,
        k,
        k_m,
        k_r,
        v,
        v_m,
        v_r,
        mask,
        mask_m,
        mask_r,
        out,
        out_m,
        out_r,
        m,
        tq,
        tk,
        d,
        dv,
        scale,
        scratch,
    ) = fn.args
    no_alias(out, scratch)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    undone = b.alloca(I64)
    b.store(I64(0), undone)
    scores, qs, zeros = scratch, b.gep(scratch, [tk]), b.gep(scratch, [b.add(tk, d)])
    # no mask: a row of zeros in its place (adding 0 changes no score but -0's sign)
    has_mask = b.icmp_unsigned("!=", mask, ir.Constant(pf, None))
    loop(b, I64(0), tk, lambda b, t: b.store(f32(0.0), b.gep(zeros, [t])), "zeros")
    mask = b.select(has_mask, mask, zeros)
    mask_m = b.select(has_mask, mask_m, I64(0))
    mask_r = b.select(has_mask, mask_r, I64(0))

    def at(b, base, i, ms, r, rs):
        return b.gep(base, [b.add(b.mul(i, ms), b.mul(r, rs))])

    def matrix(b, i):
        def row(b, r):
            qrow = at(b, q, i, q_m, r, q_r)
            loop(
                b,
                I64(0),
                d,
                lambda b, j: b.store(b.fmul(b.load(b.gep(qrow, [j])), scale), b.gep(qs, [j])),
                "scale",
            )
            mrow = at(b, mask, i, mask_m, r, mask_r)

            def scores_from(b, t0, count):
                """scores[t0 + u] for u < count, their maximum: one pass over qs for
                `count` keys (one sum each, side by side)."""
                krows = [at(b, k, i, k_m, b.add(t0, I64(u)), k_r) for u in range(count)]

                def term(b, j, sums):
                    x = b.load(b.gep(qs, [j]))
                    out = []
                    for krow, acc in zip(krows, sums, strict=True):
                        total = b.fadd(acc, b.fmul(x, b.load(b.gep(krow, [j]))))
                        total.flags.append("reassoc")
                        out.append(total)
                    return tuple(out)

                sums = reduce(b, d, (f32(0.0),) * count, term, "dot")
                top = None
                for u, total in enumerate(sums):
                    t = b.add(t0, I64(u))
                    s = b.fadd(total, b.load(b.gep(mrow, [t])))
                    b.store(s, b.gep(scores, [t]))
                    top = s if top is None else b.select(b.fcmp_ordered(">", s, top), s, top)
                return top

            def larger(b, a, c):
                return b.select(b.fcmp_ordered(">", c, a), c, a)

            def keys(count):
                """a reduce step over `count` keys at a time: the running maximum"""
                return lambda b, t, acc: (larger(b, acc[0], scores_from(b, t, count)),)

            whole = b.mul(b.sdiv(tk, I64(KEYS_AT_ONCE)), I64(KEYS_AT_ONCE))
            (top,) = reduce(
                b, whole, (f32(float("-inf")),), keys(KEYS_AT_ONCE), "score", stride=KEYS_AT_ONCE
            )
            (top,) = reduce(b, tk, (top,), keys(1), "score1", start=whole)
            finite = b.fcmp_ordered("<", b.call(_fabs(module), [top]), f32(float("inf")))
            with b.if_else(finite) as (then, otherwise):
                with then:
                    _softmax_row(
                        b,
                        module,
                        scores,
                        tk,
                        top,
                        at(b, v, i, v_m, I64(0), v_r),
                        v_r,
                        at(b, out, i, out_m, r, out_r),
                        dv,
                    )
                with otherwise:
                    b.store(b.add(b.load(undone), I64(1)), undone)

        loop(b, I64(0), tq, row, "r")

    loop(b, I64(0), m, matrix, "i")
    b.ret(b.load(undone))
    if llvm_spin.supported(triple):  # the matrices split over spinning helpers (llvm_spin)
        rows = _add_rows(module, fn)
        llvm_spin.add_split(module, rows, "ember_attend_split", rows_at=1, align=1)
    _add_step(module, fn)
    return module


def _add_step(module, attend):
    """``i64 ember_attend_step(f32 *qkv, f32 *cos, f32 *sin, i64 interleaved, f32 *keys,
    f32 *values, i64 cache_h, i64 length, i64 nh, i64 kv, i64 d, f32 scale, f32 *rot,
    f32 *out, f32 *scratch)``: one position's self-attention for a batch of one, as
    ArrayBackend.attention_step computes it. qkv holds nh + 2 kv heads of d; the q and k
    heads are rotated into rot (nh + kv heads) by the tables cos, sin (d / 2 each; null:
    copied as they are), each half as numpy's four passes round it (a*c - b*s and b*c +
    a*s, every product rounded); the k heads and the v heads go into the caches (head h
    of `keys` at h cache_h, its row `length`), then `attend` takes the kv matrices of g =
    nh / kv query rows over length + 1 keys into out (nh x d). Returns attend's rows
    undone."""
    from llvmlite import ir

    from .llvm_ir import I64, loop, no_alias

    f32 = ir.FloatType()
    pf = f32.as_pointer()
    args = [pf, pf, pf, I64, pf, pf, I64, I64, I64, I64, I64, f32, pf, pf, pf]
    fn = ir.Function(module, ir.FunctionType(I64, args), "ember_attend_step")
    qkv, cos, sin, interleaved, keys, values, cache_h, length, nh, kv, d, scale = fn.args[:12]
    rot, out, scratch = fn.args[12:]
    no_alias(rot, out, scratch)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    half = b.sdiv(d, I64(2))
    no_rope = b.icmp_unsigned("==", cos, ir.Constant(pf, None))
    inter = b.icmp_unsigned("!=", interleaved, I64(0))
    pairs = b.select(inter, I64(2), I64(1))  # a pair's element step: (2i, 2i+1)
    apart = b.select(inter, I64(1), half)  # its partner's distance: (i, i + d/2)

    def head(b, h):
        src, dst = b.gep(qkv, [b.mul(h, d)]), b.gep(rot, [b.mul(h, d)])

        def pair(b, i):
            ia = b.mul(i, pairs)
            ib = b.add(ia, apart)
            x, y = b.load(b.gep(src, [ia])), b.load(b.gep(src, [ib]))
            c = b.select(no_rope, f32(1.0), b.load(b.gep(b.select(no_rope, rot, cos), [i])))
            s_ = b.select(no_rope, f32(0.0), b.load(b.gep(b.select(no_rope, rot, sin), [i])))
            first = b.select(no_rope, x, b.fsub(b.fmul(x, c), b.fmul(y, s_)))
            second = b.select(no_rope, y, b.fadd(b.fmul(y, c), b.fmul(x, s_)))
            b.store(first, b.gep(dst, [ia]))
            b.store(second, b.gep(dst, [ib]))

        loop(b, I64(0), half, pair, "pair")

    loop(b, I64(0), b.add(nh, kv), head, "head")

    def cache_row(b, h):
        row = b.add(b.mul(h, cache_h), b.mul(length, d))
        k_src = b.gep(rot, [b.mul(b.add(nh, h), d)])
        v_src = b.gep(qkv, [b.mul(b.add(b.add(nh, kv), h), d)])
        k_dst, v_dst = b.gep(keys, [row]), b.gep(values, [row])

        def one(b, j):
            b.store(b.load(b.gep(k_src, [j])), b.gep(k_dst, [j]))
            b.store(b.load(b.gep(v_src, [j])), b.gep(v_dst, [j]))

        loop(b, I64(0), d, one, "cache")

    loop(b, I64(0), kv, cache_row, "kv")
    g = b.sdiv(nh, kv)
    null = ir.Constant(pf, None)
    undone = b.call(
        attend,
        [rot, b.mul(g, d), d, keys, cache_h, d, values, cache_h, d, null, I64(0), I64(0)]
        + [out, b.mul(g, d), d, kv, g, b.add(length, I64(1)), d, d, scale, scratch],
    )
    b.ret(undone)


def _add_rows(module, attend):
    """``void ember_attend_rows(i64 *words, i64 i0, i64 i1)``: attend over matrices [i0,
    i1) of the call whose arguments are words[0:22] (the scale's f32 bits in the low half
    of its word), its scratch taken from i0 x (2 tk + d) floats on, its undone count
    stored at ((i64 *) words[22])[i0]: the form llvm_spin's split runs in parts."""
    from llvmlite import ir

    from .llvm_ir import I64

    f32 = ir.FloatType()
    pf = f32.as_pointer()
    fn = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [I64.as_pointer(), I64, I64]), "ember_attend_rows"
    )
    words, i0, i1 = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    word = [b.load(b.gep(words, [I64(j)])) for j in range(23)]
    tk, d = word[17], word[18]
    args = []
    for o in range(5):  # q, k, v, mask, out: each moved to matrix i0 (a null mask stays null)
        base, matrix, row = word[3 * o : 3 * o + 3]
        moved = b.gep(b.inttoptr(base, pf), [b.mul(i0, matrix)])
        args += [b.select(b.icmp_unsigned("==", base, I64(0)), ir.Constant(pf, None), moved)]
        args += [matrix, row]
    scale = b.bitcast(b.trunc(word[20], ir.IntType(32)), f32)
    scratch = b.gep(b.inttoptr(word[21], pf), [b.mul(i0, b.add(b.add(tk, tk), d))])
    undone = b.call(attend, args + [b.sub(i1, i0), word[16], tk, d, word[19], scale, scratch])
    b.store(undone, b.gep(b.inttoptr(word[22], I64.as_pointer()), [i0]))
    b.ret_void()
    return fn


def _fabs(module):
    from llvmlite import ir

    from .llvm_ir import intrinsic

    return intrinsic(module, "llvm.fabs.f32", ir.FloatType(), 1)


def _softmax_row(b, module, scores, tk, top, vbase, v_r, orow, dv):
    """orow[:dv] = sum_t exp(scores[t] - top) v[t] / sum_t exp(scores[t] - top)."""
    from llvmlite import ir

    from .llvm_ir import I64, exp_neg, loop, reduce

    f32 = ir.FloatType()

    def weigh(b, t, acc):
        at = b.gep(scores, [t])
        shifted = b.fsub(b.load(at), top)
        e = exp_neg(b, module, b.fsub(f32(-0.0), shifted))
        e = b.select(b.fcmp_ordered("<", shifted, f32(EXP_MIN)), f32(0.0), e)
        b.store(e, at)
        total = b.fadd(acc[0], e)
        total.flags.append("reassoc")
        return (total,)

    total = reduce(b, tk, (f32(0.0),), weigh, "exp")[0]
    loop(b, I64(0), dv, lambda b, j: b.store(f32(0.0), b.gep(orow, [j])), "zero")

    def add_rows(b, t0, count):
        ps = [b.load(b.gep(scores, [b.add(t0, I64(u))])) for u in range(count)]
        vrows = [b.gep(vbase, [b.mul(b.add(t0, I64(u)), v_r)]) for u in range(count)]

        def one(b, j):
            acc = b.load(b.gep(orow, [j]))
            for p, vrow in zip(ps, vrows, strict=True):
                acc = b.fadd(acc, b.fmul(p, b.load(b.gep(vrow, [j]))))
            b.store(acc, b.gep(orow, [j]))

        loop(b, I64(0), dv, one, "av")

    whole = b.mul(b.sdiv(tk, I64(KEYS_AT_ONCE)), I64(KEYS_AT_ONCE))
    loop(b, I64(0), whole, lambda b, t: add_rows(b, t, KEYS_AT_ONCE), "t", step=KEYS_AT_ONCE)
    loop(b, whole, tk, lambda b, t: add_rows(b, t, 1), "t1")
    loop(
        b,
        I64(0),
        dv,
        lambda b, j: b.store(b.fdiv(b.load(b.gep(orow, [j])), total), b.gep(orow, [j])),
        "divide",
    )
