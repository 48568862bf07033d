"""The default bodies of the backend contract's fused ops, composed from its primitives.

`Backend` (base.py) calls these when a backend does not implement an op itself, so every
backend has every op: a new backend writes the primitives and overrides a fused op only
where it has something faster. Operands are (storage, layout) pairs of one dtype; every
function returns a new contiguous storage.
"""

from typing import TYPE_CHECKING, NamedTuple

from .. import dtype as dt
from ..hostdata import pack
from ..layout import Layout
from ..shape import broadcast_shapes, numel

if TYPE_CHECKING:  # base.py imports this module: the name is for the type checker only
    from .base import Backend

# Elements of one tile of attention scores: a long sequence's (Tq, Tk) score matrix is
# computed about this many at a time, never all at once (Backend.attention_tile_elements
# picks one of these for its device). 1M (4 MiB of f32) keeps a GPU's tile well inside the
# storage-binding limits.
ATTENTION_TILE_ELEMENTS = 1 << 20
# The CPU's: 4M scores (16 MiB of f32; the composite holds at most three tiles' worth at
# once). A SAM ViT-B global layer (12 x 4096 x 4096 scores, 805 MB whole) then goes in
# tiles of 85 queries; 1M made tiles of 21, and windowed layers (300 windows x heads of
# 196 x 196) 12 tiles of 17 queries, each a batch of 300 tiny GEMMs.
CPU_ATTENTION_TILE_ELEMENTS = 1 << 22


def _binary(be: "Backend", op, x, y, dtype):
    """x op y for (storage, layout) operands broadcast against each other; y may be a
    Python scalar."""
    if not isinstance(y, tuple):
        return be.binary(op, x[0], x[1], y, None, dtype), Layout(x[1].shape)
    shape = broadcast_shapes(op, x[1].shape, y[1].shape)
    return (
        be.binary(op, x[0], x[1].broadcast_to(shape), y[0], y[1].broadcast_to(shape), dtype),
        Layout(shape),
    )


def _reduce(be: "Backend", op, x, dim, dtype):
    kept = tuple(1 if d == dim else n for d, n in enumerate(x[1].shape))
    return be.reduce(op, x[0], x[1], [dim], dtype), Layout(kept)


def _unary(be: "Backend", op, x, dtype):
    return be.unary(op, x[0], x[1], dtype), Layout(x[1].shape)


def softmax(be: "Backend", storage, layout, dim, dtype, log=False):
    """exp(x - max) / sum, or (x - max) - log(sum), along dim."""
    x = (storage, layout)
    shifted = _binary(be, "sub", x, _reduce(be, "max", x, dim, dtype), dtype)
    e = _unary(be, "exp", shifted, dtype)
    total = _reduce(be, "sum", e, dim, dtype)
    if log:
        return _binary(be, "sub", shifted, _unary(be, "log", total, dtype), dtype)[0]
    return _binary(be, "div", e, total, dtype)[0]


def layer_norm(
    be: "Backend", storage, layout, w, lw, b, lb, eps, dtype, rms=False, residual=None, lres=None
):
    """(x - mean) / sqrt(var + eps) * w + b over the last dim (RMS: x / sqrt(mean(x^2) +
    eps) * w), of x + residual when given."""
    x = (storage, layout)
    if residual is not None:
        x = _binary(be, "add", x, (residual, lres), dtype)
    last = len(layout.shape) - 1
    if not rms:
        x = _binary(be, "sub", x, _reduce(be, "mean", x, last, dtype), dtype)
    mean_square = _reduce(be, "mean", _unary(be, "square", x, dtype), last, dtype)
    inv = _unary(be, "rsqrt", _binary(be, "add", mean_square, float(eps), dtype), dtype)
    y = _binary(be, "mul", x, inv, dtype)
    if w is not None:
        y = _binary(be, "mul", y, (w, lw), dtype)
    if b is not None:
        y = _binary(be, "add", y, (b, lb), dtype)
    return y[0]


def linear(
    be: "Backend", a, la, b, lb, bias, lbias, dtype, activation=None, residual=None, lres=None
):
    """activation(a @ b + bias) + residual, for a (rows, in) and b (in, out)."""
    y = (be.matmul(a, la, b, lb, dtype), Layout((la.shape[0], lb.shape[1])))
    if bias is not None:
        y = _binary(be, "add", y, (bias, lbias), dtype)
    if activation is not None:
        y = _unary(be, activation, y, dtype)
    if residual is not None:
        y = _binary(be, "add", y, (residual, lres), dtype)
    return y[0]


def gated_activation(be: "Backend", storage, layout, activation, dtype):
    """activation(gate) * up over the two halves of x's last dim: the unary op on the
    first half, then its product with the second."""
    n = layout.shape[-1] // 2
    gate = _unary(be, activation, (storage, layout.narrow(-1, 0, n)), dtype)
    return _binary(be, "mul", gate, (storage, layout.narrow(-1, n, n)), dtype)[0]


def rope(be: "Backend", storage, layout, cos, lcos, sin, lsin, dtype, interleaved=False):
    """Rotary embedding (see Backend.rope): the pair halves a and b of every D become
    a*cos - b*sin and b*cos + a*sin, written into their places in a new storage."""
    shape = layout.shape
    half = shape[-1] // 2
    lc, ls = table_layout(lcos, shape), table_layout(lsin, shape)
    if interleaved:
        pairs = Layout(shape[:-1] + (half, 2))
        x = layout.reshape(shape[:-1] + (half, 2))
        if x is None:  # a view that cannot be split into pairs: copy it first
            storage, x = be.copy_strided(storage, layout, dtype), pairs
        a, b = x.select(-1, 0), x.select(-1, 1)
        first, second = pairs.select(-1, 0), pairs.select(-1, 1)
    else:
        a, b = layout.narrow(-1, 0, half), layout.narrow(-1, half, half)
        whole = Layout(shape)
        first, second = whole.narrow(-1, 0, half), whole.narrow(-1, half, half)
    a, b, c, s = (storage, a), (storage, b), (cos, lc), (sin, ls)

    def mul(p, q):
        return _binary(be, "mul", p, q, dtype)

    out = be.empty(shape, dtype)
    for place, (p, q, op) in (
        (first, (mul(a, c), mul(b, s), "sub")),
        (second, (mul(b, c), mul(a, s), "add")),
    ):
        value = _binary(be, op, p, q, dtype)
        be.copy_into(out, place, value[0], value[1], dtype)
    return out


def table_layout(table, shape):
    """A (T, D/2) or (B, T, D/2) table's layout broadcast over x's shape [B, ..., T, D]
    with D halved: a batched table follows x's first dim."""
    target = shape[:-1] + (shape[-1] // 2,)
    if len(table.shape) == 3 and len(shape) > 3:
        lay = table
        for _ in range(len(shape) - 3):
            lay = lay.unsqueeze(1)
        return lay.broadcast_to(target)
    return table.broadcast_to(target)


def attention_tiles(batch, tq, tk, budget):
    """[(b0, nb, q0, n)]: the tiles of about `budget` scores that attention over batch
    dims `batch` computes one at a time, each nb entries of the leading batch dim (from
    b0) by n queries (from q0). Whole slices of the leading dim with all their queries
    when one fits (a ViT's windows: full-size GEMMs per window), else rows of queries
    across the whole batch (a long sequence)."""
    if numel(batch) * tq * tk <= budget:
        return [(0, batch[0] if batch else 1, 0, tq)]
    per_lead = numel(batch[1:]) * tq * tk
    if batch and per_lead <= budget:
        nb = budget // max(1, per_lead)
        return [(b0, min(nb, batch[0] - b0), 0, tq) for b0 in range(0, batch[0], nb)]
    step = max(1, budget // max(1, numel(batch) * tk))
    lead = batch[0] if batch else 1
    return [(0, lead, q0, min(step, tq - q0)) for q0 in range(0, tq, step)]


def scaled_dot_product_attention(
    be: "Backend", q, lq, k, lk, v, lv, mask, lmask, scale, dtype, causal=False, grid_bias=None
):
    """softmax((q * scale) @ k^T + mask + grid bias) @ v over q [..., Tq, D], k [..., Tk,
    D], v [..., Tk, Dv], with `mask` (or None) laid out as [..., Tq, Tk], `causal` hiding
    keys after a query's own position (the last query sees every key) and `grid_bias`
    (see Backend.scaled_dot_product_attention) added row by row of the key grid. The
    scores go in tiles of about be.attention_tile_elements (attention_tiles), so a long
    sequence's score matrix (and a grid bias as big as it) never exists at once."""
    tq, tk = lq.shape[-2], lk.shape[-2]
    batch = lq.shape[:-2]
    dv = lv.shape[-1]
    out_shape = batch + (tq, dv)
    if numel(out_shape) == 0:
        return be.empty(out_shape, dtype)
    kt = lk.transpose(-2, -1)
    tiles = attention_tiles(batch, tq, tk, be.attention_tile_elements)

    def lead(lay, b0, nb):
        return lay.narrow(0, b0, nb) if batch and nb != batch[0] else lay

    def tile(b0, nb, q0, n):
        sub = ((nb,) + batch[1:]) if batch else ()
        # q scaled before the product (as transformers' SAM and torch's SDPA do): a pass over
        # n x D elements instead of n x Tk scores
        qs, lqs = _binary(be, "mul", (q, lead(lq, b0, nb).narrow(-2, q0, n)), float(scale), dtype)
        scores = (be.matmul(qs, lqs, k, lead(kt, b0, nb), dtype), Layout(sub + (n, tk)))
        if mask is not None:
            scores = _binary(
                be, "add", scores, (mask, lead(lmask, b0, nb).narrow(-2, q0, n)), dtype
            )
        if causal:
            scores = _binary(be, "add", scores, _causal_tile(be, q0, n, tq, tk, dtype), dtype)
        if grid_bias is not None:
            rows, lrows, cols, lcols = grid_bias
            part = (rows, lead(lrows, b0, nb), cols, lead(lcols, b0, nb))
            scores = _add_grid_bias(be, scores, part, q0, n, dtype)
        weights = be.softmax(scores[0], scores[1], len(batch) + 1, dtype)
        return be.matmul(weights, scores[1], v, lead(lv, b0, nb), dtype), Layout(sub + (n, dv))

    if len(tiles) == 1:  # one tile (every decode step): its result is the output, no copy
        return tile(*tiles[0])[0]
    out = be.empty(out_shape, dtype)
    for b0, nb, q0, n in tiles:
        value, lvalue = tile(b0, nb, q0, n)
        be.copy_into(out, lead(Layout(out_shape), b0, nb).narrow(-2, q0, n), value, lvalue, dtype)
    return out


class StepLayouts(NamedTuple):
    """The views one decode step's attention reads and writes (attention_step): the ones
    a model's own Tensor steps make, so that both give the same bits. `heads` is the
    layout of what k and the queries are read from: rope's contiguous output of the q and
    k heads, or without rope qkv itself."""

    qk: Layout  # the q and k heads of qkv, heads first: [B, H + KV, 1, D]
    new_keys: Layout  # the k heads in `heads`: [B, KV, 1, D]
    new_values: Layout  # qkv's v heads, heads first: [B, KV, 1, D]
    key_slot: Layout  # the cache's position `length`: [B, KV, 1, D]
    value_slot: Layout
    queries: Layout  # the q heads in `heads` grouped by KV head: [B, KV, H / KV, D]
    keys: Layout  # the cache's first length + 1 positions: [B, KV, length + 1, D]
    values: Layout


def step_layouts(lqkv, lkeys, lvalues, length, n_heads, rotated):
    """StepLayouts for qkv laid out as lqkv; `rotated`: k and the queries come from rope's
    contiguous output [B, H + KV, 1, D], else from qkv's own heads."""
    b, _, heads, d = lqkv.shape
    kv = (heads - n_heads) // 2
    qk = lqkv.narrow(2, 0, n_heads + kv).transpose(1, 2)
    source = Layout((b, n_heads + kv, 1, d)) if rotated else qk
    # splitting one dim (the heads into KV groups) is always a view
    queries = source.narrow(1, 0, n_heads).reshape((b, kv, n_heads // kv, d))
    return StepLayouts(
        qk=qk,
        new_keys=source.narrow(1, n_heads, kv),
        new_values=lqkv.narrow(2, n_heads + kv, kv).transpose(1, 2),
        key_slot=lkeys.narrow(2, length, 1),
        value_slot=lvalues.narrow(2, length, 1),
        queries=queries,
        keys=lkeys.narrow(2, 0, length + 1),
        values=lvalues.narrow(2, 0, length + 1),
    )


def attention_step(
    be: "Backend", qkv, lqkv, keys, values, length, n_heads, scale, dtype, rope, interleaved
):
    """Backend.attention_step through the backend's own rope (where `rope` is given),
    copy_into and attention (keys and values as (storage, layout) pairs). The attention's
    [B, KV, H / KV, D] output is [B, 1, H * D] as it lies."""
    at = step_layouts(lqkv, keys[1], values[1], length, n_heads, rope is not None)
    heads = qkv
    if rope is not None:
        cos, lcos, sin, lsin = rope
        heads = be.rope(qkv, at.qk, cos, lcos, sin, lsin, dtype, interleaved)
    be.copy_into(keys[0], at.key_slot, heads, at.new_keys, dtype)
    be.copy_into(values[0], at.value_slot, qkv, at.new_values, dtype)
    return be.scaled_dot_product_attention(
        heads, at.queries, keys[0], at.keys, values[0], at.values, None, None, scale, dtype
    )


def _add_grid_bias(be: "Backend", scores, grid_bias, q0, n, dtype):
    """scores (batch + (n, Kh * Kw), contiguous) of queries q0..q0+n plus rows[i, kh] +
    cols[i, kw], broadcast over the tile viewed as batch + (n, Kh, Kw)."""
    rows, lrows, cols, lcols = grid_bias
    kh, kw = lrows.shape[-1], lcols.shape[-1]
    lead = scores[1].shape[:-1]
    grid = (scores[0], Layout(lead + (kh, kw)))
    grid = _binary(be, "add", grid, (rows, lrows.narrow(-2, q0, n).unsqueeze(-1)), dtype)
    grid = _binary(be, "add", grid, (cols, lcols.narrow(-2, q0, n).unsqueeze(-2)), dtype)
    return grid[0], Layout(lead + (kh * kw,))


def _causal_tile(be: "Backend", q0, n, tq, tk, dtype):
    """(storage, layout) of an additive (n, tk) mask for queries q0..q0+n: -inf on keys
    after each query's position (queries are the last tq of tk positions)."""
    shift = tk - tq
    values = [0.0 if j <= q0 + i + shift else float("-inf") for i in range(n) for j in range(tk)]
    return be.from_host(pack(values, dtype), dtype, (n, tk)), Layout((n, tk))


# Bytes of dense f32 weight rows a host weight's qmatmul dequantizes at a time.
QMATMUL_CHUNK_BYTES = 1 << 20


class DenseWeight:
    """A quantized weight dequantized once into an f32 (N, K) storage on the device."""

    __slots__ = ("storage", "shape", "nbytes")

    def __init__(self, storage, shape):
        self.storage, self.shape = storage, tuple(shape)
        self.nbytes = 4 * self.shape[0] * self.shape[1]


def dense_weight(be: "Backend", weight):
    """`weight` (a QTensor) dequantized a chunk of rows at a time into one f32 storage on
    `be`: the dense form is never whole in host memory."""
    n_out, n_in = weight.shape
    out = be.empty((n_out, n_in), dt.f32)
    step = max(1, min(n_out, QMATMUL_CHUNK_BYTES // max(1, 4 * n_in)))
    for r0 in range(0, n_out, step):
        r1 = min(n_out, r0 + step)
        part = be.from_host(weight.dequantize_rows(r0, r1), dt.f32, (r1 - r0, n_in))
        be.copy_into(
            out, Layout((n_out, n_in)).narrow(0, r0, r1 - r0), part, Layout((r1 - r0, n_in)), dt.f32
        )
    return DenseWeight(out, (n_out, n_in))


def qmatmul_dense(be: "Backend", x, lx, weight, dtype):
    """x [..., K] @ weight.T for a DenseWeight; returns (storage, shape)."""
    n_out, n_in = weight.shape
    lead = lx.shape[:-1]
    rows = numel(lead)
    x2 = lx.reshape((rows, n_in))
    if x2 is None:
        x, x2 = be.copy_strided(x, lx, dtype), Layout((rows, n_in))
    w, lw = weight.storage, Layout((n_out, n_in))
    if dtype is not dt.f32:
        w = be.cast(w, lw, dt.f32, dtype)
    return be.matmul(x, x2, w, lw.transpose(0, 1), dtype), lead + (n_out,)


def qmatmul_host_weight(be: "Backend", x, lx, weight, dtype):
    """x [..., K] @ dequantize(weight).T for a host weight (an object with `shape` (N, K)
    and `dequantize_rows(start, stop)`, such as ember.io.quant.QTensor): rows of the
    weight are dequantized a chunk at a time, uploaded and multiplied, so the weight is
    never whole in dense form. Returns (storage, shape)."""
    n_out, n_in = weight.shape
    lead = lx.shape[:-1]
    rows = numel(lead)
    x2 = lx.reshape((rows, n_in))
    if x2 is None:
        x, x2 = be.copy_strided(x, lx, dtype), Layout((rows, n_in))
    out = be.empty((rows, n_out), dtype)
    step = max(1, min(n_out, QMATMUL_CHUNK_BYTES // max(1, 4 * n_in)))
    for r0 in range(0, n_out if rows else 0, step):
        r1 = min(n_out, r0 + step)
        host = weight.dequantize_rows(r0, r1)
        w = be.from_host(host, dt.f32, (r1 - r0, n_in))
        if dtype is not dt.f32:
            w = be.cast(w, Layout((r1 - r0, n_in)), dt.f32, dtype)
        part = be.matmul(x, x2, w, Layout((r1 - r0, n_in)).transpose(0, 1), dtype)
        be.copy_into(
            out, Layout((rows, n_out)).narrow(1, r0, r1 - r0), part, Layout((rows, r1 - r0)), dtype
        )
    return out, lead + (n_out,)


def qlinear(
    be: "Backend", x, lx, qweight, bias, lbias, dtype, residual=None, lres=None, activation=None
):
    """qmatmul, then + bias, the activation, + residual; returns (storage, shape)."""
    storage, shape = be.qmatmul(x, lx, qweight, dtype)
    y = (storage, Layout(shape))
    if bias is not None:
        y = _binary(be, "add", y, (bias, lbias), dtype)
    if activation is not None:
        y = _unary(be, activation, y, dtype)
    if residual is not None:
        y = _binary(be, "add", y, (residual, lres), dtype)
    return y[0], shape


def conv2d(
    be: "Backend", x, lx, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation
):
    """im2col + matmul (see Backend.conv2d): the sliding windows of the zero-padded input
    are a strided layout (kernel offsets as extra dims), copied contiguous once as
    (N, G, Cg*KH*KW, OH*OW), then one GEMM per group batched over images, so the product
    lands in NCHW order; then bias and activation."""
    n, c, h, wd = lx.shape
    o, cg, kh, kw = lw.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    if ph or pw:
        shape = (n, c, h + 2 * ph, wd + 2 * pw)
        padded = be.full(shape, 0.0 if dtype.is_float else 0, dtype)
        be.copy_into(padded, Layout(shape).narrow(2, ph, h).narrow(3, pw, wd), x, lx, dtype)
        x, lx = padded, Layout(shape)
    oh = (lx.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (lx.shape[3] - dw * (kw - 1) - 1) // sw + 1
    s = lx.strides
    windows = Layout(
        (n, groups, cg, kh, kw, oh, ow),
        (s[0], s[1] * cg, s[1], s[2] * dh, s[3] * dw, s[2] * sh, s[3] * sw),
        lx.offset,
    )
    k = cg * kh * kw
    cols = be.copy_strided(x, windows, dtype)
    lw2 = lw.reshape((groups, o // groups, k))
    if lw2 is None:  # a weight view the strides cannot regroup: copy it first
        w, lw2 = be.copy_strided(w, lw, dtype), Layout((groups, o // groups, k))
    lw2 = lw2.broadcast_to((n, groups, o // groups, k))
    y = (be.matmul(w, lw2, cols, Layout((n, groups, k, oh * ow)), dtype), Layout((n, o, oh, ow)))
    if bias is not None:
        y = _binary(be, "add", y, (bias, lbias.reshape((1, o, 1, 1))), dtype)
    if activation is not None:
        y = _unary(be, activation, y, dtype)
    return y[0]
