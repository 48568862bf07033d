"""Batched matmul on WebGPU: kernel choice, and splitting of operands that exceed the
adapter's maximum storage binding.

Kernels of the "gpu" set (runtime.kernel_set): every float matmul runs matmul_gpu.py's
shared-memory tiled kernel or, for decoding, its workgroup-reduction GEMV. Of the
"cpu-adapter" set: `matmul_nt` (floats, both operands run along K: x @ W.T of a Linear
layer), `matmul_nn` (floats, B with unit column stride: x @ W); on CPU adapters with
subgroups (lavapipe) both float layouts run `matmul_nt_sg`, which shares A's loads across
lanes (x @ W on a copy of W transposed by `matmul_transpose`). Both sets: the general
strided `matmul` for integers (and floats in the cpu-adapter set's other layouts). Float
math runs in f32; f16 is read as f16 where the adapter has shader-f16, bf16 and f16
elsewhere are f32 rounded on store.

A K longer than 32,768 is split into partial products accumulated into the output.
An operand too large for one binding is split along its outermost dim: rows of A,
columns of B (output columns), K (partial products accumulated into the output), or a
batch dim; the halves recurse until every binding fits.

`linear` is the same matmul with an epilogue (epilogue.py: bias, activation, residual)
applied as the kernels store; split launches bind bias and residual for their own rows
and columns, and of a split K only the last partial product applies it.
"""

from ...errors import UnsupportedOp
from ...intmath import ceil_div
from ...shape import contiguous_strides
from . import epilogue as _epilogue
from . import matmul_gpu as _gpu
from . import overflow as _overflow
from .epilogue import Epilogue
from .shapes import collapse, span


class _Operand:
    """A strided 2-D (+ batch) view: storage, offset, batch strides, row/col strides."""

    __slots__ = ("st", "off", "bs", "rs", "cs")

    def __init__(self, st, off, bs, rs, cs):
        self.st, self.off, self.bs, self.rs, self.cs = st, off, list(bs), rs, cs

    def moved(self, delta):
        return _Operand(self.st, self.off + delta, self.bs, self.rs, self.cs)


# The end of matmul_nt and matmul_nt_sg, shared: store (or accumulate) the invocation's
# TM x TN tile of sums, then, for a fused linear, apply the epilogue in a second pass over
# those outputs. The templates name it {{STORE_TILE}}; its own placeholders are filled in
# render's second pass.
STORE_TILE = """    let ob = strided(bi, {{NB}}u, P_BATCH, P_O_BS, p(P_O_OFF));
    for (var r = 0u; r < {{TM}}u; r++) {
        for (var c = 0u; c < {{TN}}u; c++) {
            if (m0 + r < m_total && n0 + c < n_total) {
                let o = ob + (m0 + r) * p(P_O_RS) + n0 + c;
                var v = acc[r][c];
                if (p(P_ACC) != 0u) { v += f32(O[o]); }
                O[o] = {{S}}({{ROUND}}(v));
            }
        }
    }
    // The epilogue in a second pass over this invocation's outputs (re-read, still in
    // cache): inside the loop above it made lavapipe's kernel slower by more than the
    // separate elementwise passes it replaces (1024x1536 @ 1536x384: 52 ms against 39).
    if (epilogue_on()) {
        for (var r = 0u; r < {{TM}}u; r++) {
            for (var c = 0u; c < {{TN}}u; c++) {
                if (m0 + r < m_total && n0 + c < n_total) {
                    let o = ob + (m0 + r) * p(P_O_RS) + n0 + c;
                    O[o] = {{S}}({{ROUND}}(epilogue(f32(O[o]), m0 + r, n0 + c)));
                }
            }
        }
    }"""


def matmul(be, a, la, b, lb, dtype):
    t = be.runtime.type_of(dtype, "matmul")
    batch = list(la.shape[:-2])
    m, k = la.shape[-2:]
    n = lb.shape[-1]
    nb = 1
    for d in batch:
        nb *= d
    out = be.runtime.alloc(nb * m * n, dtype, "matmul")
    if nb * m * n == 0:
        return out
    if k == 0:
        return be.full(tuple(batch) + (m, n), 0, dtype)
    ob = [s * m * n for s in contiguous_strides(batch)]
    if batch:
        bshape, (ab, bb, obs) = collapse(batch, [la.strides[:-2], lb.strides[:-2], ob])
    else:
        bshape, ab, bb, obs = [1], [0], [0], [0]
    A = _Operand(a, la.offset, ab, la.strides[-2], la.strides[-1])
    B = _Operand(b, lb.offset, bb, lb.strides[-2], lb.strides[-1])
    C = _Operand(out, 0, obs, n, 1)
    _split_or_launch(be, t, dtype, A, B, C, m, n, k, bshape, False)
    return out


def linear(be, a, la, b, lb, bias, lbias, dtype, activation=None, residual=None, lres=None):
    """activation(a @ b + bias) + residual for a 2-D `a` (m, k) and `b` (k, n), in one
    matmul launch (more where operands are split)."""
    op = "linear"
    t = be.runtime.type_of(dtype, op)
    if not dtype.is_float:
        raise UnsupportedOp(f"linear: the fused path is for float dtypes, not {dtype.name}", op=op)
    if len(la.shape) != 2 or len(lb.shape) != 2:
        raise UnsupportedOp(
            f"linear: takes a 2-D input and weight, not {len(la.shape)}-D and {len(lb.shape)}-D",
            op=op,
        )
    m, k = la.shape
    n = lb.shape[-1]
    epi = Epilogue(
        None if bias is None else (bias, lbias.offset, lbias.strides[0]),
        activation,
        None if residual is None else (residual, lres.offset, lres.strides[0], lres.strides[1]),
    )
    if bias is None and activation is None and residual is None:
        epi = None  # the plain matmul's kernels, no epilogue parameters
    out = be.runtime.alloc(m * n, dtype, op)
    if m * n == 0:
        return out
    A = _Operand(a, la.offset, [0], la.strides[0], la.strides[1])
    B = _Operand(b, lb.offset, [0], lb.strides[0], lb.strides[1])
    if k == 0:
        # No products: the kernel's K loop runs no iteration, so any binding will do.
        zero = be.full((1,), 0, dtype)
        A = B = _Operand(zero, 0, [0], 0, 0)
    C = _Operand(out, 0, [0], n, 1)
    _split_or_launch(be, t, dtype, A, B, C, m, n, k, [1], False, epi)
    return out


def _span(op, bshape, rows, cols):
    return span(list(bshape) + [rows, cols], op.bs + [op.rs, op.cs])


_MAX_K = 32768  # keeps each invocation's K loop under lavapipe's 65,535-iteration cap


def _split_k(be, t, dtype, A, B, C, m, n, k, half, bshape, acc, epi, last):
    """C = A @ B as two launches over K: [0, half) accumulating as `acc` says, then the
    rest added on top; only the last part of the last split applies the epilogue."""
    _split_or_launch(be, t, dtype, A, B, C, m, n, half, bshape, acc, epi, False)
    _split_or_launch(
        be,
        t,
        dtype,
        A.moved(half * A.cs),
        B.moved(half * B.rs),
        C,
        m,
        n,
        k - half,
        bshape,
        True,
        epi,
        last,
    )


def _split_or_launch(be, t, dtype, A, B, C, m, n, k, bshape, acc, epi=None, last=True):
    """C = A @ B over the operands A, B, C. `epi`: a linear's epilogue, applied by the
    launch of the last part of K (`last`)."""
    if k > _MAX_K:
        _split_k(be, t, dtype, A, B, C, m, n, k, k // 2 // 4 * 4, bshape, acc, epi, last)
        return
    limit = be.runtime.max_binding - be.runtime.storage_align - 16
    spans = {
        "A": _span(A, bshape, m, k) * t.size,
        "B": _span(B, bshape, k, n) * t.size,
        "C": _span(C, bshape, m, n) * t.size,
    }
    if epi is not None:
        spans.update(epi.spans(t, m, n))
    worst = max(spans, key=spans.get)
    if spans[worst] <= limit:
        _launch(be, t, dtype, A, B, C, m, n, k, bshape, acc, epi, last)
        return
    # Split the offending operand along its dim of largest stride.
    if worst in ("bias", "res"):
        op, dims = None, epi.dims(worst, m, n)
    else:
        op = {"A": A, "B": B, "C": C}[worst]
        dims = {
            "A": (("m", A.rs, m), ("k", A.cs, k)),
            "B": (("k", B.rs, k), ("n", B.cs, n)),
            "C": (("m", C.rs, m), ("n", C.cs, n)),
        }[worst]
    cands = [(s, name, size) for name, s, size in dims if size > 1]
    if op is not None and epi is None:  # a linear is 2-D: no batch dims
        cands += [
            (s, ("batch", i), size)
            for i, (s, size) in enumerate(zip(op.bs, bshape, strict=True))
            if size > 1
        ]
    if not cands:
        raise UnsupportedOp(
            f"matmul: an operand of {spans[worst]} bytes exceeds the adapter's "
            f"maximum storage binding ({be.runtime.max_binding} bytes)",
            op="matmul",
        )
    _, which, size = max(cands, key=lambda c: c[0])
    half = size // 2
    if which in ("n", "k") and size >= 8:
        half = half // 4 * 4  # keep vec4 kernels usable on both halves
    if which == "m":
        _split_or_launch(be, t, dtype, A, B, C, half, n, k, bshape, acc, epi, last)
        _split_or_launch(
            be,
            t,
            dtype,
            A.moved(half * A.rs),
            B,
            C.moved(half * C.rs),
            m - half,
            n,
            k,
            bshape,
            acc,
            epi and epi.moved(half, 0),
            last,
        )
    elif which == "n":
        _split_or_launch(be, t, dtype, A, B, C, m, half, k, bshape, acc, epi, last)
        _split_or_launch(
            be,
            t,
            dtype,
            A,
            B.moved(half * B.cs),
            C.moved(half * C.cs),
            m,
            n - half,
            k,
            bshape,
            acc,
            epi and epi.moved(0, half),
            last,
        )
    elif which == "k":
        _split_k(be, t, dtype, A, B, C, m, n, k, half, bshape, acc, epi, last)
    else:
        i = which[1]
        lo = list(bshape)
        lo[i] = half
        hi = list(bshape)
        hi[i] = size - half
        _split_or_launch(be, t, dtype, A, B, C, m, n, k, lo, acc)
        _split_or_launch(
            be,
            t,
            dtype,
            A.moved(half * A.bs[i]),
            B.moved(half * B.bs[i]),
            C.moved(half * C.bs[i]),
            m,
            n,
            k,
            hi,
            acc,
        )


_all4 = _gpu._all4  # every value a multiple of 4 (vec4 loads)


# Register tiles and workgroup shapes of matmul_nn (TM, TC, WGX, WGY) and matmul_nt (TM,
# TN, WGX, WGY), which run on CPU adapters only (the gpu set has matmul_gpu.py's kernels).
# CPU adapters (lavapipe) vectorise across invocations; tall tiles that still fit the
# registers suit them. Measured on lavapipe (GFLOP per CPU-second, 1024^3): nn 12x4 tiles
# 8.6 against 8x4 7.0 and 16x4 5.0 (register spills); nt 6x4 7.1 against 8x4 6.2.
_CPU_TILES = {"nn": (12, 1, 8, 16), "nt": (6, 4, 8, 8)}


# CPU adapters with subgroups (lavapipe, native only: naga needs no `enable subgroups`,
# Tint would): matmul_nt_sg broadcasts A across a subgroup's lanes, and x @ W runs through
# it on a transposed copy of W (see _launch_transposed). (TM, TN) tile, 64 invocations along
# N. Measured on lavapipe at 1024^3 (wall GFLOP/s, 2 threads, A read scalar): 12x2 29.5
# against 10x2 28.0, 8x2 26.7, 8x3 26.1, 14x2 22.3, 16x2 22.0, 12x3 19.2 (register
# spills); the plain matmul_nt 6x4 kernel 14.2.
_SG_TILE = (12, 2)
_SG_WG = 64
_SG_MIN_M = 8  # fewer rows (decoding) keep the plain kernels' narrow-M tiles
# x @ W pays a transposed copy of W first (matmul_transpose); measured against the plain
# matmul_nn it is even at M = 8 and ahead from there (2048^2 W, M = 16: 13.1 ms against
# 20.1; M = 128: 45 against 73).


def _use_subgroups(be, m):
    drv = be.driver
    return (
        m >= _SG_MIN_M
        and be.runtime.kernel_set == "cpu-adapter"
        and getattr(drv, "kind", "") == "native"
        and "subgroup" in drv.features
    )


def _fit_rows(tile, m):
    """Fewer rows per invocation when M is small (decoding one token is M = 1): rows
    past M would only repeat the last one. The workgroup then lies along the columns."""
    if m >= tile[0]:
        return tile
    wgx, wgy = tile[-2], tile[-1]
    return (1 << (m - 1).bit_length(),) + tuple(tile[1:-2]) + (min(256, wgx * wgy), 1)


def _launch_transposed(be, t, dtype, A, B, C, m, n, k, bshape, acc, epi, last):
    """x @ W on a CPU adapter with subgroups: W copied to [N, K] by matmul_transpose, then
    matmul_nt_sg. A subgroup-broadcast kernel reading W down its columns ran at 15 or 31
    GFLOP/s at 1024^3 from run to run, by where the buffers landed (W's offset moved by
    4 KiB: 15 every time), and 16 at 2048^3; copy plus matmul_nt_sg gives 29-30 at both."""
    # A broadcast W (batch stride 0) is copied once, and stays broadcast.
    cshape = [d if s else 1 for d, s in zip(bshape, B.bs, strict=True)]
    nc = 1
    for d in cshape:
        nc *= d
    bt = be.runtime.alloc(nc * n * k, dtype, "matmul")
    src, rel = be.runtime.bind(B.st, B.off, B.off + _span(B, cshape, k, n), t.size, "matmul")
    dst, _ = be.runtime.bind(bt, 0, nc * n * k, t.size, "matmul")
    cstr = contiguous_strides(cshape)
    spec = {"S": t.storage, "NB": len(cshape), "WG": 64}
    pipe = be.runtime.kernel("matmul_transpose", t, spec, "matmul")
    params = {
        "k4": k // 4,
        "n": n,
        "w_off": rel,
        "w_rs": B.rs,
        "batch": cshape,
        "w_bs": B.bs,
        "o_bs": [s * n * k // 4 for s in cstr],
    }
    be.runtime.launch(pipe, params, [src, dst], (ceil_div(n, 64), k // 4, nc))
    bs = [c * n * k if s else 0 for c, s in zip(cstr, B.bs, strict=True)]
    Bt = _Operand(bt, 0, bs, 1, k)
    _launch(be, t, dtype, A, Bt, C, m, n, k, bshape, acc, epi, last)


def _launch(be, t, dtype, A, B, C, m, n, k, bshape, acc, epi=None, last=True):
    nb = 1
    for d in bshape:
        nb *= d
    ranges, rel = [], []
    for op, rows, cols in ((A, m, k), (B, k, n), (C, m, n)):
        r, o = be.runtime.bind(
            op.st, op.off, op.off + _span(op, bshape, rows, cols), t.size, "matmul"
        )
        ranges.append(r)
        rel.append(o)
    tail = _epilogue.OFF
    if epi is not None:
        extra, tail = epi.bind(be, t, m, n)
        ranges += extra
        tail["epi_on"] = int(last)
    epi_spec = _epilogue.spec(epi)
    nbd = len(bshape)
    fast = dtype.is_float and nb <= be.runtime.max_groups
    if fast and be.runtime.kernel_set == "gpu":
        name, spec, params, groups = _gpu.plan(be, t, A, B, C, rel, m, n, k, bshape, acc, epi_spec)
        be.runtime.launch(
            be.runtime.kernel(name, t, spec, "matmul"), {**params, **tail}, ranges, groups
        )
        return
    batch4 = _all4(*(A.bs + B.bs + C.bs))
    tile = _CPU_TILES
    if fast and A.cs == 1 and B.rs == 1 and _all4(k, rel[0], A.rs, rel[1], B.cs) and batch4:
        a4 = 4  # A's offset and strides in vec4s; in elements for matmul_nt_sg
        if _use_subgroups(be, m):
            tm, tn = _SG_TILE
            tm = min(tm, 1 << (m - 1).bit_length())
            wgx, wgy, a4 = _SG_WG, 1, 1
            spec = {
                "TM": tm,
                "TN": tn,
                "WG": wgx,
                "NB": nbd,
                "S": t.storage,
                "ROUND": t.round,
                "STORE_TILE": STORE_TILE,
                **epi_spec,
            }
            pipe = be.runtime.kernel("matmul_nt_sg", t, spec, "matmul")
        else:
            tm, tn, wgx, wgy = _fit_rows(tile["nt"], m)
            spec = {
                "TM": tm,
                "TN": tn,
                "WGX": wgx,
                "WGY": wgy,
                "NB": nbd,
                "S": t.storage,
                "ROUND": t.round,
                "STORE_TILE": STORE_TILE,
                **epi_spec,
            }
            pipe = be.runtime.kernel("matmul_nt", t, spec, "matmul")
        params = {
            "m": m,
            "n": n,
            "k": k // 4,
            "a_off": rel[0] // a4,
            "b_off": rel[1] // 4,
            "o_off": rel[2],
            "acc": int(acc),
            "a_rs": A.rs // a4,
            "b_cs": B.cs // 4,
            "o_rs": C.rs,
            "batch": bshape,
            "a_bs": [s // a4 for s in A.bs],
            "b_bs": [s // 4 for s in B.bs],
            "o_bs": C.bs,
        }
        groups = (ceil_div(ceil_div(n, tn), wgx), ceil_div(ceil_div(m, tm), wgy), nb)
    elif (
        fast
        and A.cs == 1
        and B.cs == 1
        and _all4(n, k, rel[0], A.rs, rel[1], B.rs, rel[2], C.rs)
        and batch4
    ):
        if _use_subgroups(be, m):
            _launch_transposed(be, t, dtype, A, B, C, m, n, k, bshape, acc, epi, last)
            return
        tm, tc, wgx, wgy = _fit_rows(tile["nn"], m)
        spec = {
            "TM": tm,
            "TC": tc,
            "WGX": wgx,
            "WGY": wgy,
            "NB": nbd,
            "S": t.storage,
            "ROUND": t.round + "_4" if t.round else "",
            **epi_spec,
        }
        pipe = be.runtime.kernel("matmul_nn", t, spec, "matmul")
        params = {
            "m": m,
            "n": n // 4,
            "k": k // 4,
            "a_off": rel[0] // 4,
            "b_off": rel[1] // 4,
            "o_off": rel[2] // 4,
            "acc": int(acc),
            "a_rs": A.rs // 4,
            "b_rs": B.rs // 4,
            "o_rs": C.rs // 4,
            "batch": bshape,
            "a_bs": [s // 4 for s in A.bs],
            "b_bs": [s // 4 for s in B.bs],
            "o_bs": [s // 4 for s in C.bs],
        }
        groups = (ceil_div(ceil_div(n // 4, tc), wgx), ceil_div(ceil_div(m, tm), wgy), nb)
    else:
        checked = _overflow.checked("matmul", dtype)
        spec = {
            "S": t.storage,
            "ROUND": t.round,
            "NB": nbd,
            "WG": 64,
            **epi_spec,
            **_overflow.MATMUL[0 if checked else 1],
            **_overflow.spec("matmul", "matmul", dtype, epi_spec.get("EPI_READS", 0)),
        }
        pipe = be.runtime.kernel("matmul", t, spec, "matmul")
        if checked:
            ranges.append(be.runtime.overflow_binding())
        total = nb * m * n
        params = {**_gpu.operand_params(A, B, C, rel, m, n, k, bshape, acc), "total": total}
        groups = be.runtime.grid(total, 64)
    be.runtime.launch(pipe, {**params, **tail}, ranges, groups)
