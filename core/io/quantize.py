"""ggml block quantizers on numpy: float32 rows in, the raw blocks GGUF stores out.

The inverse of `quant.py` (whose dequantizers read what this writes). Rows are the last
numpy axis (ggml's ne0) and must be whole blocks; `quantize` works a bounded chunk of
rows at a time, so its temporaries stay small whatever the tensor's size.

Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 follow ggml's reference quantizers (the ones the `gguf`
package reproduces) operation for operation in float32, so their blocks are bit-exact
with it. The K-quants (Q2_K..Q6_K) follow the public algorithm of llama.cpp's reference
quantizers: a per-sub-block scale (and min) chosen by a small search that minimises the
weighted squared error, then the sub-block scales quantized against one f16 super-block
scale, then every weight requantized with the scale it will actually be decoded with.
The `gguf` package has no K-quantizer to compare against; ember's dequantizer checks them.
"""

import numpy as np

from ..errors import ShapeMismatch, UnsupportedDType, fmt_shape
from .quant import BLOCK_SIZES, QK_K, GGMLType, as_ggml_type

_F32 = np.float32
_CHUNK_VALUES = 1 << 18  # weights quantized per step: bounds the temporaries

# the smallest maximum a group may have and still be scaled (ggml's GROUP_MAX_EPS)
_GROUP_MAX_EPS = 1e-15


def _f16_bytes(values):
    """float32 (n,) -> (n, 2) uint8 of IEEE half, rounded to nearest even."""
    return values.astype(np.float16).reshape(-1, 1).view(np.uint8)


def _inverse(d):
    """1/d where d != 0, else 0, in float32 (ggml: `id = d ? 1.0f/d : 0.0f`)."""
    out = np.zeros_like(d)
    np.divide(_F32(1), d, out=out, where=d != 0)
    return out


def _round_half_away(x):
    """C's roundf: halves away from zero (np.rint rounds them to even)."""
    a = np.abs(x)
    whole = np.floor(a)
    return np.copysign(whole + (a - whole >= 0.5), x)


def _signed_absmax(blocks):
    """Per row the value of largest magnitude, with its sign (the first one on ties)."""
    i = np.abs(blocks).argmax(axis=-1)[..., None]
    return np.take_along_axis(blocks, i, axis=-1)


def _nibbles(q):
    """(n, 32) values 0..15 -> (n, 16) bytes: value j low, value j + 16 high."""
    return q[:, :16] | (q[:, 16:] << np.uint8(4))


def _high_bits(q):
    """(n, 32) 5-bit values -> (n, 4) bytes: bit j of a little-endian u32 is q[j] >> 4."""
    bits = (q >> np.uint8(4)).astype(np.uint32) << np.arange(32, dtype=np.uint32)
    return bits.sum(axis=-1, dtype=np.uint32).reshape(-1, 1).view(np.uint8)


def _truncated(x, top):
    """ggml's `MIN(top, (int8_t)(x))` for the non-negative x these formats produce."""
    return np.minimum(np.trunc(x), top).astype(np.uint8)


# --- the 32-weight formats --------------------------------------------------------------------
def _q4_0(b):
    d = _signed_absmax(b) / _F32(-8)
    q = _truncated(b * _inverse(d) + _F32(8.5), 15)
    return np.concatenate([_f16_bytes(d), _nibbles(q)], axis=1)


def _q4_1(b):
    lo, hi = b.min(axis=1, keepdims=True), b.max(axis=1, keepdims=True)
    d = (hi - lo) / _F32(15)
    q = _truncated((b - lo) * _inverse(d) + _F32(0.5), 15)
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), _nibbles(q)], axis=1)


def _q5_0(b):
    d = _signed_absmax(b) / _F32(-16)
    q = _truncated(b * _inverse(d) + _F32(16.5), 31)
    return np.concatenate([_f16_bytes(d), _high_bits(q), _nibbles(q & np.uint8(15))], axis=1)


def _q5_1(b):
    lo, hi = b.min(axis=1, keepdims=True), b.max(axis=1, keepdims=True)
    d = (hi - lo) / _F32(31)
    q = _truncated((b - lo) * _inverse(d) + _F32(0.5), 31)
    return np.concatenate(
        [_f16_bytes(d), _f16_bytes(lo), _high_bits(q), _nibbles(q & np.uint8(15))], axis=1
    )


def _q8_0(b):
    d = np.abs(b).max(axis=1, keepdims=True) / _F32(127)
    q = _round_half_away(b * _inverse(d)).astype(np.int8).view(np.uint8)
    return np.concatenate([_f16_bytes(d), q], axis=1)


# --- scale searches shared by the K-quants ------------------------------------------------------
def _symmetric_scale(x, nmax):
    """Per group (last axis) a scale s and levels l in [-nmax, nmax) with x ~ s * l,
    chosen among 19 candidate scales around max/nmax by the x²-weighted error."""
    big = _signed_absmax(x)
    live = np.abs(big) >= _GROUP_MAX_EPS
    safe = np.where(live, big, _F32(1))
    w = x * x
    best_l = best_scale = best_score = None
    for step in [0] + [s for s in range(-9, 10) if s]:
        iscale = -(_F32(nmax) + _F32(0.1) * _F32(step)) / safe
        lv = np.clip(np.rint(iscale * x), -nmax, nmax - 1)
        sumlx = (w * x * lv).sum(axis=-1, keepdims=True)
        suml2 = (w * lv * lv).sum(axis=-1, keepdims=True)
        scale = np.divide(sumlx, suml2, out=np.zeros_like(sumlx), where=suml2 > 0)
        score = scale * sumlx
        if best_l is None:
            best_l, best_scale, best_score = lv, scale, score
            continue
        better = (suml2 > 0) & (score > best_score)
        best_l = np.where(better, lv, best_l)
        best_scale = np.where(better, scale, best_scale)
        best_score = np.where(better, score, best_score)
    return np.where(live, best_scale, 0)[..., 0]


def _scale_and_min(x, w, nmax, rmin, rdelta, nstep, use_mad):
    """Per group (last axis) a scale s >= 0 and offset m >= 0 with x ~ s * l - m for levels
    l in [0, nmax], searched over nstep + 1 candidate scales by weighted least squares."""
    lo = np.minimum(x.min(axis=-1, keepdims=True), 0)
    hi = x.max(axis=-1, keepdims=True)
    span = hi - lo
    live = span > 0
    span = np.where(live, span, _F32(1))
    sum_w = w.sum(axis=-1, keepdims=True)
    sum_x = (w * x).sum(axis=-1, keepdims=True)

    def error(scale, offset, lv):
        diff = scale * lv + offset - x
        return (w * (np.abs(diff) if use_mad else diff * diff)).sum(axis=-1, keepdims=True)

    shifted = x - lo
    iscale = _F32(nmax) / span
    best_scale, best_min = _F32(1) / iscale, lo
    best_err = error(best_scale, best_min, np.clip(np.rint(iscale * shifted), 0, nmax))
    for step in range(nstep + 1):
        iscale = (_F32(rmin) + _F32(rdelta) * _F32(step) + _F32(nmax)) / span
        lv = np.clip(np.rint(iscale * shifted), 0, nmax)
        wl = w * lv
        sum_l = wl.sum(axis=-1, keepdims=True)
        sum_l2 = (wl * lv).sum(axis=-1, keepdims=True)
        sum_xl = (wl * x).sum(axis=-1, keepdims=True)
        det = sum_w * sum_l2 - sum_l * sum_l
        ok = det > 0
        det = np.where(ok, det, _F32(1))
        scale = (sum_w * sum_xl - sum_x * sum_l) / det
        offset = (sum_l2 * sum_x - sum_l * sum_xl) / det
        positive = offset > 0  # an offset above zero would not fit an unsigned min
        scale = np.where(
            positive, np.divide(sum_xl, sum_l2, out=np.zeros_like(sum_xl), where=sum_l2 > 0), scale
        )
        offset = np.where(positive, 0, offset)
        err = error(scale, offset, lv)
        better = ok & (err < best_err)
        best_scale = np.where(better, scale, best_scale)
        best_min = np.where(better, offset, best_min)
        best_err = np.where(better, err, best_err)
    return np.where(live, best_scale, 0)[..., 0], np.where(live, -best_min, -lo)[..., 0]


def _super_scale(values, levels):
    """Quantize non-negative per-sub-block values (n, k) to integers 0..levels against one
    f16 step per super-block: (step as f16 bytes, step as f32, integers)."""
    top = values.max(axis=1, keepdims=True)
    inv = np.divide(_F32(levels), top, out=np.zeros_like(top), where=top > 0)
    ints = np.minimum(np.rint(inv * values), levels).astype(np.uint8)
    step = (top / _F32(levels)).astype(np.float16)
    return step.view(np.uint8).reshape(-1, 2), step.astype(_F32), ints


def _signed_super_scale(scales, half):
    """Signed sub-block scales (n, k) to integers in [-half, half) against one f16 step."""
    big = _signed_absmax(scales)
    live = big != 0
    iscale = np.divide(_F32(-half), big, out=np.zeros_like(big), where=live)
    ints = np.clip(np.rint(iscale * scales), -half, half - 1)
    step = np.divide(_F32(1), iscale, out=np.zeros_like(iscale), where=live).astype(np.float16)
    return step.view(np.uint8).reshape(-1, 2), step.astype(_F32), ints


def _levels_with_min(x, d_eff, m_eff, nmax):
    """Each weight's level for the decoded scale and min; 0 where the scale is zero."""
    safe = np.where(d_eff != 0, d_eff, _F32(1))
    lv = np.clip(np.rint((x + m_eff[..., None]) / safe[..., None]), 0, nmax)
    return np.where(d_eff[..., None] != 0, lv, 0).astype(np.uint8)


def _levels_signed(x, d_eff, half):
    safe = np.where(d_eff != 0, d_eff, _F32(1))
    lv = np.clip(np.rint(x / safe[..., None]), -half, half - 1) + half
    return np.where(d_eff[..., None] != 0, lv, half).astype(np.uint8)


def _pack_crumbs(lv):
    """(n, 256) 2-bit values -> (n, 64): byte 32h + l holds values 128h + 32j + l at bits 2j."""
    v = lv.reshape(-1, 2, 4, 32)
    out = v[:, :, 0] | (v[:, :, 1] << 2) | (v[:, :, 2] << 4) | (v[:, :, 3] << 6)
    return out.reshape(-1, 64)


def _pack_6bit_scales(sc, mn):
    """Eight 6-bit scales and mins (n, 8) into ggml's 12-byte K-quant layout."""
    out = np.empty((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    return out


# --- the K-quants (256-weight super-blocks) ---------------------------------------------------
def _q2_k(b):
    x = b.reshape(-1, 16, 16)
    scale, offset = _scale_and_min(x, np.abs(x), 3, -0.5, 0.1, 15, True)
    d_bytes, d, sc = _super_scale(scale, 15)
    m_bytes, dm, mn = _super_scale(offset, 15)
    lv = _levels_with_min(x, d * sc, dm * mn, 3).reshape(-1, QK_K)
    return np.concatenate([sc | (mn << 4), _pack_crumbs(lv), d_bytes, m_bytes], axis=1)


def _q3_k(b):
    x = b.reshape(-1, 16, 16)
    d_bytes, d, ints = _signed_super_scale(_symmetric_scale(x, 4), 32)
    lv = _levels_signed(x, d * ints, 4).reshape(-1, QK_K)  # 0..7
    u = (ints + 32).astype(np.uint8)  # 6-bit scales
    scales = np.empty((b.shape[0], 12), np.uint8)
    scales[:, 0:8] = (u[:, 0:8] & 15) | ((u[:, 8:16] & 15) << 4)
    hi = (u >> 4).reshape(-1, 4, 4)  # scale 4g + k: bits 2g of byte 8 + k
    scales[:, 8:12] = hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)
    hbit = (lv >> 2).reshape(-1, 8, 32)  # bit k of byte l: value 32k + l
    hmask = (hbit << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1, dtype=np.uint8)
    return np.concatenate([hmask, _pack_crumbs(lv & 3), scales, d_bytes], axis=1)


def _k_search(b, nmax, rmin, rdelta, nstep):
    x = b.reshape(-1, 8, 32)
    spread = np.sqrt((b * b).sum(axis=1) / _F32(QK_K))[:, None, None]
    scale, offset = _scale_and_min(x, spread + np.abs(x), nmax, rmin, rdelta, nstep, False)
    d_bytes, d, sc = _super_scale(scale, 63)
    m_bytes, dm, mn = _super_scale(offset, 63)
    lv = _levels_with_min(x, d * sc, dm * mn, nmax)
    head = np.concatenate([d_bytes, m_bytes, _pack_6bit_scales(sc, mn)], axis=1)
    return head, lv


def _pair_nibbles(lv):
    """(n, 8, 32) 4-bit values -> (n, 128): sub-blocks 2j (low) and 2j + 1 (high)."""
    return (lv[:, 0::2] | (lv[:, 1::2] << 4)).reshape(-1, 128)


def _q4_k(b):
    head, lv = _k_search(b, 15, -1.0, 0.1, 20)
    return np.concatenate([head, _pair_nibbles(lv)], axis=1)


def _q5_k(b):
    head, lv = _k_search(b, 31, -0.5, 0.1, 15)
    qh = ((lv >> 4) << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1, dtype=np.uint8)
    return np.concatenate([head, qh, _pair_nibbles(lv & 15)], axis=1)


def _q6_k(b):
    x = b.reshape(-1, 16, 16)
    d_bytes, d, ints = _signed_super_scale(_symmetric_scale(x, 32), 128)
    ints = np.minimum(ints, 127)
    lv = _levels_signed(x, d * ints, 32).reshape(-1, 2, 4, 32)  # 0..63
    low, high = lv & 15, lv >> 4
    ql = np.concatenate(
        [low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=2
    ).reshape(-1, 128)
    qh = (
        high[:, :, 0] | (high[:, :, 1] << 2) | (high[:, :, 2] << 4) | (high[:, :, 3] << 6)
    ).reshape(-1, 64)
    return np.concatenate([ql, qh, ints.astype(np.int8).view(np.uint8), d_bytes], axis=1)


_QUANTIZERS = {
    GGMLType.Q4_0: _q4_0,
    GGMLType.Q4_1: _q4_1,
    GGMLType.Q5_0: _q5_0,
    GGMLType.Q5_1: _q5_1,
    GGMLType.Q8_0: _q8_0,
    GGMLType.Q2_K: _q2_k,
    GGMLType.Q3_K: _q3_k,
    GGMLType.Q4_K: _q4_k,
    GGMLType.Q5_K: _q5_k,
    GGMLType.Q6_K: _q6_k,
}
# types `quantize` writes: the block formats above and the plain float types
QUANTIZABLE = frozenset(_QUANTIZERS) | {GGMLType.F32, GGMLType.F16, GGMLType.BF16}


def fits(ggml_type, shape):
    """Whether a tensor of `shape` (numpy order) can be stored as `ggml_type`."""
    block = BLOCK_SIZES[as_ggml_type(ggml_type)][0]
    return (int(shape[-1]) if len(shape) else 1) % block == 0


def _bf16(x):
    """float32 -> bf16 bits, rounded to nearest even (NaN kept a quiet NaN)."""
    u = x.view(np.uint32)
    rounded = (u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16
    return np.where(np.isnan(x), (u >> 16) | np.uint32(0x40), rounded).astype(np.uint16)


def quantize(values, ggml_type):
    """The raw bytes of float `values` stored as `ggml_type`: uint8 of shape
    (*values.shape[:-1], bytes per row), as the `gguf` package returns them."""
    t = as_ggml_type(ggml_type)
    if t not in QUANTIZABLE:
        raise UnsupportedDType(
            f"quantize: ember cannot write ggml type {t.name} (it writes "
            f"{', '.join(sorted(x.name for x in QUANTIZABLE))})",
            ggml_type=t,
        )
    x = np.ascontiguousarray(values, dtype=_F32)
    shape = x.shape if x.ndim else (1,)
    block, size = BLOCK_SIZES[t]
    if shape[-1] % block:
        raise ShapeMismatch(
            f"quantize {t.name}: row length {shape[-1]} of shape "
            f"{fmt_shape(shape)} is not a multiple of the block size {block}",
            shape=tuple(shape),
            ggml_type=t,
        )
    flat = x.reshape(-1)
    if t == GGMLType.F32:
        return flat.view(np.uint8).reshape(*shape[:-1], shape[-1] * 4)
    out = np.empty(flat.size // block * size, np.uint8)
    blocks_per_step = max(1, _CHUNK_VALUES // block)
    src = flat.reshape(-1, block)
    dst = out.reshape(-1, size)
    # values beyond f16's range become inf in the scales, as in ggml: no warning
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i in range(0, len(src), blocks_per_step):
            part = src[i : i + blocks_per_step]
            if t == GGMLType.F16:
                dst[i : i + len(part)] = part.astype(np.float16).view(np.uint8).reshape(-1, 2)
            elif t == GGMLType.BF16:
                dst[i : i + len(part)] = _bf16(part).view(np.uint8).reshape(-1, 2)
            else:
                dst[i : i + len(part)] = _QUANTIZERS[t](part)
    return out.reshape(*shape[:-1], shape[-1] // block * size)


__all__ = ["QUANTIZABLE", "fits", "quantize"]
