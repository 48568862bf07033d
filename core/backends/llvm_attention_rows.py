"""Attention of many queries (Whisper's encoder, SAM's image-to-token one, a language
model's prompt under its mask),
each block of queries taken start to end in one compiled call: its scores, their softmax
and the product with v, register-blocked for the host's vectors (llvm_build compiles it).

array_attention's tiles make two BLAS calls and a compiled exponential pass per tile.
Their products have an inner dim of one head (64), where OpenBLAS's kernels run at
60-75% of their large-matrix speed, and a tile's scores (2 MiB) go out of a core's L2
and back between the calls. Here one call walks a block of QB queries (one or two
vectors' lanes) against every key:

    attend_rows(q, ldq, k, ldk, v, ldv, out, ldo, rows, tk, d, dv, scale, scratch)
        -> rows left undone
        for each query row r < rows (strides in f32 elements; the last dim contiguous):
        qs = q[r] * scale                      (rounded, as numpy's q * scale)
        s[t] = sum_j qs[j] * k[t, j]           (fused multiply-adds in j's order)
        p[t] = exp(s[t] - max(s))              (0 where s[t] - max < EXP_MIN)
        out[r] = (sum_t p[t] * v[t]) / sum_t p[t]

The scores are kept transposed in scratch, [tk, QB] (a 1,500-key block is 188 KiB, in
L2), so that a query block's softmax runs down its lanes and neither k nor v is copied
here (array_attention_rows packs them where their rows lie apart): the scores take a few keys by the block's lanes at a time (each k element
broadcast), the product a few queries by a few vectors of v's row (shape_for). A query's
sums over the keys (its softmax's, its product's) run a span of KEY_SPAN keys from zero
and then over the spans: a lane holds one query, and one running sum of all 1,500 keys
had 6x the BLAS tiles' error against float64 in Whisper's encoder (now under theirs:
2.5-4.2e-6 against 4.3e-6-1.4e-5 on its six layers' jfk.wav activations). Every row's
value depends on nothing but its own operands (its sums' orders are fixed by tk and d):
blocks and threads never change a bit; the bits differ from the BLAS tiles' in the last
places. A row whose maximum score is not finite (an infinite or NaN score) is counted,
and the caller redoes the call its own way. Unavailable (None) without llvmlite, with
EMBER_JIT=0, or where the build fails.
"""

import ctypes
import sys

from . import llvm_spin
from .addresses import address
from .llvm_math import EXP_MIN

_P, _I = ctypes.c_void_p, ctypes.c_int64
# keys whose rows of v (and of the scores) one pass of the product takes: 64 x 64 floats
# of v and 64 x QB scores stay in a core's L1 while every row of the block reads them
# (v read whole for every few rows came from L2 as fast as the loads could take it: 300
# queries x 1,500 keys x 64, 2.1 -> 1.4 ms on one core, in one process)
KEY_SPAN = 64
_ARGS = (_P, _I) * 4 + (_I, _I, _I, _I, ctypes.c_float, _P)
# the team function's (llvm_spin.add_pieces): (t0, t1, table, ldq, ldk, ldv, ldo, tk, d,
# dv, scratch, ldm); its table: [pieces taken, count, scratch floats a thread, the scale's
# f32 bits], then a piece's q, k, v, out and transposed mask addresses (0: no mask), its
# rows, and the rows it left undone (written)
_TEAM_ARGS = (_I, _I, _P) + (_I,) * 7 + (_P, _I)
TEAM_HEADER, TEAM_PIECE = 4, 7


def shape_for(lanes):
    """(query vectors a block, keys a score step, queries a product step, v vectors a
    product step) for vectors of `lanes` f32: the accumulators and operands of each step
    in the host's vector registers (32 with AVX-512, 16 with AVX2)."""
    if lanes >= 16:
        return 2, 12, 4, 4  # scores 12 x 2 + 3, product 4 x 4 + 5 registers of 32
    return 2, 6, 4, 2  # scores 6 x 2 + 3, product 4 x 2 + 3 of 16


def kernels():
    """The compiled RowAttentionKernels, or None where they cannot be had."""
    from . import llvm_build

    return llvm_build.kernels("llvm_attention_rows")


class RowAttentionKernels:
    def __init__(self, engine, lanes):
        self._engine = engine  # owns the machine code: kept alive with the function
        self.lanes = lanes
        self.block = lanes * shape_for(lanes)[0]  # queries a block (QB)
        address_of = engine.get_function_address
        self._attend = ctypes.CFUNCTYPE(_I, *_ARGS)(address_of("ember_attend_rows"))
        self._masked = ctypes.CFUNCTYPE(_I, *_ARGS, _P, _I)(address_of("ember_attend_rows_masked"))
        self._team = self._team_split = None
        if address_of("ember_attend_rows_team"):
            self._team = ctypes.CFUNCTYPE(None, *_TEAM_ARGS)(address_of("ember_attend_rows_team"))
            split = address_of("ember_attend_rows_team_split")
            self._team_split = ctypes.CFUNCTYPE(_I, _P, _I, *_TEAM_ARGS)(split)

    def takes(self, dv):
        """Whether v's rows of dv floats fit the product's vectors (whole vectors)."""
        return dv > 0 and dv % self.lanes == 0

    def scratch_floats(self, tk, d, dv):
        """The f32 scratch one call needs: the scaled query block [d, QB], its transposed
        scores [tk, QB], its row sums and its products with v [QB, dv]."""
        return self.block * (d + tk + 1 + dv)

    def attend(self, q, k, v, out, scale, scratch, mask_t=None):
        """out[r] = softmax(q[r] * scale @ k.T + mask[r]) @ v for the f32 matrices q [rows,
        d], k [tk, d], v [tk, dv], out [rows, dv], each with contiguous rows (row strides
        free), dv whole vectors (`takes`), scratch a float32 array of `scratch_floats`;
        mask_t None (no mask) or the mask transposed, [tk, at least `padded(rows)`] with
        contiguous rows (its columns past `rows` are read, never used). Returns the number
        of rows left undone (a maximum score that is not finite)."""
        rows, d = q.shape
        tk, dv = v.shape
        if mask_t is not None and (
            mask_t.dtype != "float32"
            or mask_t.shape[0] != tk
            or mask_t.shape[1] < self.padded(rows)
            or (tk > 1 and mask_t.strides[1] != 4)
        ):
            raise ValueError(
                f"llvm_attention_rows: mask_t {mask_t.shape} {mask_t.dtype} must be f32 "
                f"[{tk}, >= {self.padded(rows)}] with contiguous rows"
            )
        if k.shape != (tk, d) or out.shape != (rows, dv) or not self.takes(dv):
            raise ValueError(
                f"llvm_attention_rows: q {q.shape}, k {k.shape}, v {v.shape}, out {out.shape}"
            )
        if scratch.size < self.scratch_floats(tk, d, dv) or scratch.dtype != "float32":
            raise ValueError(f"llvm_attention_rows: scratch of {scratch.size} floats")
        for a in (q, k, v, out):
            if a.dtype != "float32" or (a.shape[0] > 1 and a.strides[1] != 4):
                raise ValueError("llvm_attention_rows: float32 matrices with contiguous rows")
        args = (
            address(q),
            q.strides[0] // 4,
            address(k),
            k.strides[0] // 4,
            address(v),
            v.strides[0] // 4,
            address(out),
            out.strides[0] // 4,
            rows,
            tk,
            d,
            dv,
            scale,
            address(scratch),
        )
        if mask_t is None:
            return self._attend(*args)
        return self._masked(*args, address(mask_t), mask_t.strides[0] // 4)

    def attend_pieces(self, table, strides, dims, scratch, ldm, helpers):
        """The pieces of `table` (piece_table) through the kernel, shared with `helpers`
        (llvm_spin.Helpers, or None), each piece's undone rows written into its last
        word. strides (ldq, ldk, ldv, ldo) and dims (tk, d, dv) are the pieces'; scratch
        holds scratch_floats for each thread of the team, ldm the transposed masks' row
        stride (0 without masks). False where the team function is not built."""
        if self._team is None:
            return False
        from . import llvm_spin

        args = (*strides, *dims, address(scratch), ldm)
        llvm_spin.run_team(self._team, self._team_split, helpers, table, *args)
        return True

    def padded(self, rows):
        """rows rounded up to whole query blocks: the mask columns a call reads."""
        return -(-rows // self.block) * self.block


def build():
    from . import llvm_build

    lanes = 16 if llvm_build.host()[3].get("avx512f", False) else 8
    engine = llvm_build.compile_kernels(
        sys.modules[__name__],
        lambda triple: _ir_module(triple, lanes),
        params=(lanes,),
        sources=(llvm_spin,),
    )
    return RowAttentionKernels(engine, lanes)


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple, lanes):
    from .llvm_ir import new_module

    module = new_module("ember_attention_rows", triple)
    plain, masked = (
        _add_kernel(module, name, m, lanes)
        for name, m in (("ember_attend_rows", False), ("ember_attend_rows_masked", True))
    )
    if llvm_spin.supported(triple):
        _add_team(module, plain, masked)
    return module


def _add_team(module, plain, masked):
    """``ember_attend_rows_team``: a pieces function (llvm_spin.add_pieces) whose piece is
    one kernel call (the masked kernel where its mask address is not 0), its return
    stored in the piece's last word."""
    from llvmlite import ir

    from .llvm_ir import I64

    f32 = ir.FloatType()
    pf = f32.as_pointer()

    def piece(b, t, p, table, args):
        ldq, ldk, ldv, ldo, tk, d, dv, scratch, ldm = args
        scale = b.bitcast(b.trunc(b.load(b.gep(table, [I64(3)])), ir.IntType(32)), f32)
        mine = b.gep(scratch, [b.mul(t, b.load(b.gep(table, [I64(2)])))])
        at = b.add(I64(TEAM_HEADER), b.mul(p, I64(TEAM_PIECE)))
        word = [b.gep(table, [b.add(at, I64(i))]) for i in range(TEAM_PIECE)]
        q, k, v, out, mask = (b.inttoptr(b.load(w), pf) for w in word[:5])
        rows = b.load(word[5])
        common = [q, ldq, k, ldk, v, ldv, out, ldo, rows, tk, d, dv, scale, mine]
        has_mask = b.icmp_unsigned("!=", b.load(word[4]), I64(0))
        with b.if_else(has_mask) as (with_mask, without):
            with with_mask:
                b.store(b.call(masked, common + [mask, ldm]), word[6])
            with without:
                b.store(b.call(plain, common), word[6])

    arg_types = [I64] * 7 + [pf, I64]
    llvm_spin.add_pieces(module, "ember_attend_rows_team", arg_types, piece)


def _add_kernel(module, name, masked, lanes):
    """The kernel; `masked`: with two more arguments, the transposed mask's pointer and
    row stride (masks[t * ldm + r] is added to row r's score of key t)."""
    from llvmlite import ir

    from .llvm_ir import (
        I64,
        exp_neg,
        intrinsic,
        loop,
        no_alias,
        reduce,
        splat,
        vector_load,
        vector_store,
    )

    f32, i32 = ir.FloatType(), ir.IntType(32)
    pf = f32.as_pointer()
    vec = ir.VectorType(f32, lanes)
    fma = intrinsic(module, f"llvm.fma.v{lanes}f32", vec, 3)
    fabs = intrinsic(module, f"llvm.fabs.v{lanes}f32", vec, 1)
    q_vectors, key_block, pv_rows, pv_vectors = shape_for(lanes)
    qb = lanes * q_vectors
    extra = [pf, I64] if masked else []
    fn = ir.Function(
        module, ir.FunctionType(I64, [pf, I64] * 4 + [I64, I64, I64, I64, f32, pf] + extra), name
    )
    q, ldq, k, ldk, v, ldv, out, ldo, rows, tk, d, dv, scale, scratch = fn.args[:14]
    masks, ldm = fn.args[14:] if masked else (None, None)
    no_alias(out, scratch)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    undone = b.alloca(I64)
    b.store(I64(0), undone)
    qt = scratch  # [d, qb]: the block's scaled queries, transposed
    scores = b.gep(scratch, [b.mul(d, I64(qb))])  # [tk, qb]
    sums = b.gep(scores, [b.mul(tk, I64(qb))])  # [qb]
    acc = b.gep(sums, [I64(qb)])  # [qb, dv]

    def vload(b, base, at):
        return vector_load(b, b.gep(base, [at]), vec)

    def vstore(b, x, base, at):
        vector_store(b, x, b.gep(base, [at]))

    def like(x):
        return ir.Constant(vec, [x] * lanes)

    def query_block(b, r0):
        n = b.sub(rows, r0)
        n = b.select(b.icmp_signed("<", n, I64(qb)), n, I64(qb))

        # the block's queries, scaled and transposed; rows past n are zeros
        def pack_row(b, j):
            def lane(b, i):
                here = b.icmp_signed("<", i, n)
                src = b.gep(q, [b.add(b.mul(b.add(r0, b.select(here, i, I64(0))), ldq), j)])
                x = b.fmul(b.load(src), scale)
                b.store(b.select(here, x, f32(0.0)), b.gep(qt, [b.add(b.mul(j, I64(qb)), i)]))

            loop(b, I64(0), I64(qb), lane, "pack.i")

        loop(b, I64(0), d, pack_row, "pack.j")

        # scores, transposed: `count` keys from t0 by the block's lanes at a time
        def keys(count):
            def step(b, t0):
                krows = [b.gep(k, [b.mul(b.add(t0, I64(u)), ldk)]) for u in range(count)]

                def term(b, j, accs):
                    qv = [
                        vload(b, qt, b.add(b.mul(j, I64(qb)), I64(c * lanes)))
                        for c in range(q_vectors)
                    ]
                    out_ = []
                    for u in range(count):
                        kx = splat(b, b.load(b.gep(krows[u], [j])), vec)
                        for c in range(q_vectors):
                            out_.append(b.call(fma, [kx, qv[c], accs[u * q_vectors + c]]))
                    return tuple(out_)

                accs = reduce(b, d, (like(0.0),) * (count * q_vectors), term, "dot")
                for u in range(count):
                    row = b.mul(b.add(t0, I64(u)), I64(qb))
                    mrow = b.mul(b.add(t0, I64(u)), ldm) if masked else None
                    for c in range(q_vectors):
                        s_ = accs[u * q_vectors + c]
                        if masked:  # the mask added to the product, as the composite adds it
                            s_ = b.fadd(s_, vload(b, masks, b.add(mrow, b.add(r0, I64(c * lanes)))))
                        vstore(b, s_, scores, b.add(row, I64(c * lanes)))

            return step

        whole = b.mul(b.sdiv(tk, I64(key_block)), I64(key_block))
        loop(b, I64(0), whole, keys(key_block), "keys", step=key_block)
        loop(b, whole, tk, keys(1), "key")

        # each lane's softmax down the keys: its maximum, then p = exp(s - max) in place
        # and their sum
        for c in range(q_vectors):
            col = I64(c * lanes)

            def larger(b, t, acc, col=col):
                s = vload(b, scores, b.add(b.mul(t, I64(qb)), col))
                return (b.select(b.fcmp_ordered(">", s, acc[0]), s, acc[0]),)

            (top,) = reduce(b, tk, (like(float("-inf")),), larger, "max")
            finite = b.fcmp_ordered("<", b.call(fabs, [top]), like(float("inf")))
            for i in range(lanes):  # lanes of real rows whose maximum is not finite
                real = b.icmp_signed("<", I64(c * lanes + i), n)
                bad = b.and_(real, b.not_(b.extract_element(finite, i32(i))))
                b.store(b.add(b.load(undone), b.zext(bad, I64)), undone)
            top = b.select(finite, top, like(0.0))  # keeps the rest defined; redone anyway

            def expo(b, t, acc, col=col, top=top):
                at = b.add(b.mul(t, I64(qb)), col)
                gap = b.fsub(top, vload(b, scores, at))
                p = exp_neg(b, module, gap)
                p = b.select(b.fcmp_ordered(">", gap, like(-EXP_MIN)), like(0.0), p)
                vstore(b, p, scores, at)
                return (b.fadd(acc[0], p),)

            def span_sum(b, t0, acc, expo=expo):
                """a span's sum from 0, then added to the total: each lane sums its own
                query's keys, and one running sum of 1,500 terms lost digits (6x the
                BLAS tiles' error against float64 in Whisper's encoder)"""
                t1 = b.add(t0, I64(KEY_SPAN))
                t1 = b.select(b.icmp_signed("<", t1, tk), t1, tk)
                (part,) = reduce(b, t1, (like(0.0),), expo, "exp", start=t0)
                return (b.fadd(acc[0], part),)

            (total,) = reduce(b, tk, (like(0.0),), span_sum, "exps", stride=KEY_SPAN)
            vstore(b, total, sums, col)

        # acc[r] = p . v for the block's real rows, KEY_SPAN keys at a time (the span's
        # rows of v, and of the scores, stay in L1 while every row of the block takes
        # them), `count` rows from g0 by pv_vectors vectors of v's row, then the rest one
        # vector at a time; acc [qb, dv] in scratch between spans
        def product(count, t0, t1):
            def columns(width):
                def body(b, c0, g0):
                    first = b.icmp_signed("==", t0, I64(0))
                    slots = [
                        b.add(b.mul(b.add(g0, I64(r)), dv), b.add(c0, I64(c * lanes)))
                        for r in range(count)
                        for c in range(width)
                    ]

                    def term(b, t, accs):
                        vrow = b.gep(v, [b.mul(t, ldv)])
                        vv = [vload(b, vrow, b.add(c0, I64(c * lanes))) for c in range(width)]
                        prow = b.gep(scores, [b.add(b.mul(t, I64(qb)), g0)])
                        terms = []
                        for r in range(count):
                            px = splat(b, b.load(b.gep(prow, [I64(r)])), vec)
                            for c in range(width):
                                terms.append(b.call(fma, [px, vv[c], accs[r * width + c]]))
                        return tuple(terms)

                    # the span's products from 0, then added to the rows' totals (a
                    # two-level sum, as the softmax's)
                    zeros = (like(0.0),) * (count * width)
                    parts = reduce(b, t1, zeros, term, "pv", start=t0)
                    for part, at in zip(parts, slots, strict=True):
                        before = b.select(first, like(0.0), vload(b, acc, at))
                        vstore(b, b.fadd(before, part), acc, at)

                return body

            span = pv_vectors * lanes

            def run(b, g0):
                wide = b.mul(b.sdiv(dv, I64(span)), I64(span))
                wide_body, one_body = columns(pv_vectors), columns(1)
                loop(b, I64(0), wide, lambda b, c0: wide_body(b, c0, g0), "cols", step=span)
                loop(b, wide, dv, lambda b, c0: one_body(b, c0, g0), "col", step=lanes)

            return run

        whole_rows = b.mul(b.sdiv(n, I64(pv_rows)), I64(pv_rows))

        def key_span(b, t0):
            t1 = b.add(t0, I64(KEY_SPAN))
            t1 = b.select(b.icmp_signed("<", t1, tk), t1, tk)
            loop(b, I64(0), whole_rows, product(pv_rows, t0, t1), "rows", step=pv_rows)
            loop(b, whole_rows, n, product(1, t0, t1), "row")

        loop(b, I64(0), tk, key_span, "span", step=KEY_SPAN)

        # out[r] = acc[r] / the row's sum
        def finish(b, r):
            total = splat(b, b.load(b.gep(sums, [r])), vec)
            orow = b.gep(out, [b.mul(b.add(r0, r), ldo)])
            arow = b.mul(r, dv)

            def one(b, c0):
                vstore(b, b.fdiv(vload(b, acc, b.add(arow, c0)), total), orow, c0)

            loop(b, I64(0), dv, one, "out", step=lanes)

        loop(b, I64(0), n, finish, "finish")

    loop(b, I64(0), rows, query_block, "block", step=qb)
    b.ret(b.load(undone))
    return fn
