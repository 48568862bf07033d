"""The float matmul kernels of the "gpu" kernel set (runtime.kernel_set), for discrete and
integrated GPUs: which kernel runs a launch, its specialisation, parameters and grid.

- `gemv_nt` / `gemv_nn`: M of at most GEMV_MAX_M (decoding), one workgroup reducing over
  K for a few output columns, where the layout allows vec4 reads of B (x @ W.T and x @ W).
- `matmul_tiled`: everything else, any strides: workgroup tiles staged through workgroup
  memory, each operand loaded along its contiguous axis, 4 elements at a time where its
  layout allows. Large outputs take 128 x 128 blocks (8 x 8 per invocation), smaller ones
  64 x 64 (4 x 4), so that a few hundred rows still fill many workgroups.

matmul.py calls `plan` from its launch, after binding the operands (and the epilogue's),
so splitting over the binding limit and K's partial products are the same as for the
CPU-adapter kernels. No kernel here depends on a subgroup size.
"""

from ...intmath import ceil_div

GEMV_MAX_M = 4
# (TM, TN, WGX, WGY, BK): per-invocation tile, workgroup shape, K step. Both stage 256
# vec4 (or scalar) loads per operand per step, one per invocation at width 4.
_LARGE = (8, 8, 16, 16, 8)
_SMALL = (4, 4, 16, 16, 16)
_LARGE_FROM = 512  # M and N from which the 128 x 128 blocks still give enough workgroups


def _all4(*values):
    return all(v % 4 == 0 for v in values)


def operand_params(A, B, C, rel, m, n, k, bshape, acc):
    """The parameter values every strided matmul kernel takes: sizes, the operands' offsets
    (relative to their bindings) and row, column and batch strides, the accumulate flag."""
    return {
        "m": m,
        "n": n,
        "k": k,
        "a_off": rel[0],
        "b_off": rel[1],
        "o_off": rel[2],
        "acc": int(acc),
        "a_rs": A.rs,
        "a_cs": A.cs,
        "b_rs": B.rs,
        "b_cs": B.cs,
        "o_rs": C.rs,
        "batch": bshape,
        "a_bs": A.bs,
        "b_bs": B.bs,
        "o_bs": C.bs,
    }


def _axis(rs, cs, extent_rows, extent_cols, off, bs, mn_is_rows):
    """How one operand is staged: (along K, width). An operand is loaded along the axis
    it is contiguous in (K, or M for A / N for B), 4 at a time when its offset, its other
    strides and its extent along that axis are multiples of 4."""
    # strides: (along M or N, along K); extents likewise
    s_mn, s_k = (rs, cs) if mn_is_rows else (cs, rs)
    e_mn, e_k = (extent_rows, extent_cols) if mn_is_rows else (extent_cols, extent_rows)
    if s_k == 1:
        return True, 4 if _all4(off, s_mn, e_k, *bs) else 1
    if s_mn == 1:
        return False, 4 if _all4(off, s_k, e_mn, *bs) else 1
    return True, 1


def _load(name, width):
    if width == 4:
        return f"vec4<f32>({name}[i >> 2u])"
    return f"vec4<f32>(f32({name}[i]), 0.0, 0.0, 0.0)"


def plan(be, t, A, B, C, rel, m, n, k, bshape, acc, epi_spec):
    """(kernel name, spec, parameters, grid) of a float matmul launch on the gpu set.
    `rel`: A's, B's and C's element offsets inside their bindings."""
    nb = 1
    for d in bshape:
        nb *= d
    common = {"NB": len(bshape), "S": t.storage, **epi_spec}
    params = operand_params(A, B, C, rel, m, n, k, bshape, acc)
    a_vec = A.cs == 1 and _all4(k, rel[0], A.rs, *A.bs)
    if m <= GEMV_MAX_M and a_vec and B.rs == 1 and _all4(rel[1], B.cs, *B.bs):
        wg = min(256, max(64, 1 << max(0, k // 4 - 1).bit_length()))
        nc = 2
        spec = {**common, "ROUND": t.round, "MR": m, "NC": nc, "MC": m * nc, "WG": wg}
        gx, gy, _ = be.runtime.grid(ceil_div(n, nc), 1)
        return "gemv_nt", spec, params, (gx, gy, nb)
    if m <= GEMV_MAX_M and B.cs == 1 and _all4(n, rel[1], B.rs, *B.bs):
        wgx, wgy = 16, 8
        spec = {
            **common,
            "ROUND4": t.round + "_4" if t.round else "",
            "MR": m,
            "WGX": wgx,
            "WGY": wgy,
            "WG": wgx * wgy,
        }
        gx, gy, _ = be.runtime.grid(ceil_div(n // 4, wgx), 1)
        return "gemv_nn", spec, params, (gx, gy, nb)
    tm, tn, wgx, wgy, bk = _LARGE if min(m, n) >= _LARGE_FROM else _SMALL
    bm, bn = tm * wgy, tn * wgx
    a_k, aw = _axis(A.rs, A.cs, m, k, rel[0], A.bs, True)
    b_k, bw = _axis(B.rs, B.cs, k, n, rel[1], B.bs, False)
    spec = {
        **common,
        "ROUND": t.round,
        "TM": tm,
        "TN": tn,
        "WGX": wgx,
        "WGY": wgy,
        "BK": bk,
        "BM": bm,
        "BN": bn,
        "AS_LEN": bm * bk,
        "BS_LEN": bn * bk,
        "AW": aw,
        "BW": bw,
        "A_T": "vec4<{{S}}>" if aw == 4 else "{{S}}",
        "B_T": "vec4<{{S}}>" if bw == 4 else "{{S}}",
        "LOAD_A": _load("A", aw),
        "LOAD_B": _load("B", bw),
        "A_ALONG_K": str(a_k).lower(),
        "B_ALONG_K": str(b_k).lower(),
    }
    return "matmul_tiled", spec, params, (ceil_div(n, bn), ceil_div(m, bm), nb)
