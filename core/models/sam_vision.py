"""Segment Anything's image encoder (ViT-Det), in transformers' SamVisionEncoder layout.

Patch embedding, an absolute position embedding, transformer layers whose attention is
windowed (window_size x window_size tokens, the grid padded to a multiple of it) except
in the global layers (global_attn_indexes) which attend over the whole grid, decomposed
relative positions in every layer, and a neck (1x1 conv, LayerNorm2d, 3x3 conv,
LayerNorm2d) to the output_channels-wide image embedding. Activations stay channels-last
([B, H, W, C]) until the neck, as in the reference.
"""

from .. import dtype as dt
from .. import functional as F
from ..errors import ShapeMismatch, fmt_shape
from ..nn import LayerNorm, Linear, Module, ModuleList, activation_op
from ..tensor import tensor


def relative_table(rel_pos, size):
    """rel_pos (2 * size - 1, C) gathered into (size, size, C): entry [q, k] is the
    embedding of the offset q - k (rows stored from offset -(size - 1) up)."""
    ids = [q - k + size - 1 for q in range(size) for k in range(size)]
    index = tensor(ids, dtype=dt.i64, device=rel_pos.device)
    return rel_pos.index_select(0, index).reshape(size, size, rel_pos.shape[1])


class VisionAttention(Module):
    """Multi-head self-attention over an h x w grid of tokens with decomposed relative
    positions: score(i, j) += q_i . Rh[row_i - row_j] + q_i . Rw[col_i - col_j].

    The bias goes to F.scaled_dot_product_attention as `grid_bias` (the (Tq, h) and
    (Tq, w) factors), which adds it per tile of queries. Built whole it would be as big as
    the scores: 12 heads x 4096 x 4096 f32 = 805 MB in a ViT-B global layer. Folding it
    into q and k instead (q augmented with its factors, k with one-hot row and column
    indicators) is exact too, but widens every head's dot products from 64 to 64 + 2 x 64
    terms, three times the score matmul of the global layers; the grid bias costs two
    additions per score."""

    def __init__(self, cfg, vb, size):
        super().__init__()
        c = cfg.hidden_size
        self.heads, self.head_dim, self.size = cfg.num_attention_heads, cfg.head_dim, size
        self.qkv = Linear(c, 3 * c, bias=cfg.qkv_bias, vb=vb.pp("qkv"))
        self.proj = Linear(c, c, vb=vb.pp("proj"))
        self.use_rel_pos = cfg.use_rel_pos
        if cfg.use_rel_pos:
            self.rel_pos_h = vb.get((2 * size - 1, self.head_dim), "rel_pos_h")
            self.rel_pos_w = vb.get((2 * size - 1, self.head_dim), "rel_pos_w")

    def _grid_bias(self, q, h, w):
        """(rows [b, heads, h*w, h], cols [b, heads, h*w, w]): each query's dot products
        with the row and column offset embeddings to every key row and column."""
        b, heads, _, d = q.shape
        n = b * heads
        grid = q.reshape(n, h, w, d)
        rh = relative_table(self.rel_pos_h, h).transpose(1, 2)  # [q row, d, k row]
        rw = relative_table(self.rel_pos_w, w).transpose(1, 2)
        rows = grid.permute(1, 0, 2, 3).reshape(h, n * w, d) @ rh  # [h, n*w, h]
        rows = rows.reshape(h, n, w, h).permute(1, 0, 2, 3).reshape(b, heads, h * w, h)
        cols = grid.permute(2, 0, 1, 3).reshape(w, n * h, d) @ rw  # [w, n*h, w]
        cols = cols.reshape(w, n, h, w).permute(1, 2, 0, 3).reshape(b, heads, h * w, w)
        return rows, cols

    def forward(self, x):
        """x [b, h, w, C] -> [b, h, w, C]"""
        b, h, w, c = x.shape
        qkv = self.qkv(x).reshape(b, h * w, 3, self.heads, self.head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)  # [3, b, heads, tokens, head_dim]
        q, k, v = qkv.select(0, 0), qkv.select(0, 1), qkv.select(0, 2)
        bias = self._grid_bias(q, h, w) if self.use_rel_pos else None
        out = F.scaled_dot_product_attention(q, k, v, grid_bias=bias)
        out = out.reshape(b, self.heads, h, w, self.head_dim).permute(0, 2, 3, 1, 4)
        return self.proj(out.reshape(b, h, w, c))


class VisionLayer(Module):
    def __init__(self, cfg, vb, window):
        super().__init__()
        c, eps = cfg.hidden_size, cfg.layer_norm_eps
        self.window = window  # 0: global attention over the whole grid
        self.layer_norm1 = LayerNorm(c, eps, vb=vb.pp("layer_norm1"))
        self.attn = VisionAttention(cfg, vb.pp("attn"), window or cfg.grid)
        self.layer_norm2 = LayerNorm(c, eps, vb=vb.pp("layer_norm2"))
        self.lin1 = Linear(c, cfg.mlp_dim, vb=vb.pp("mlp.lin1"))
        self.lin2 = Linear(cfg.mlp_dim, c, vb=vb.pp("mlp.lin2"))
        self.act = activation_op(cfg.hidden_act)

    def _windowed(self, x):
        """Attention within window x window tiles of x [b, h, w, C], the grid padded with
        zeros at the bottom and right to whole windows (the padding is dropped after)."""
        b, h, w, c = x.shape
        s = self.window
        ph, pw = -h % s, -w % s
        if ph or pw:
            x = F.pad(x, (0, 0, 0, pw, 0, ph))
        hp, wp = h + ph, w + pw
        tiles = x.reshape(b, hp // s, s, wp // s, s, c).permute(0, 1, 3, 2, 4, 5)
        out = self.attn(tiles.reshape(-1, s, s, c))
        out = out.reshape(b, hp // s, wp // s, s, s, c).permute(0, 1, 3, 2, 4, 5)
        out = out.reshape(b, hp, wp, c)
        return out.narrow(1, 0, h).narrow(2, 0, w) if ph or pw else out

    def forward(self, x):
        h = self.layer_norm1(x)
        x = x + (self._windowed(h) if self.window else self.attn(h))
        h = self.lin1(self.layer_norm2(x), activation=self.act)
        return self.lin2(h, residual=x)


class VisionNeck(Module):
    """1x1 conv (no bias), LayerNorm2d, 3x3 conv (no bias), LayerNorm2d; LayerNorm2d
    normalizes each position over channels with eps 1e-6 (transformers' SamLayerNorm)."""

    EPS = 1e-6

    def __init__(self, cfg, vb):
        super().__init__()
        c, o = cfg.hidden_size, cfg.output_channels
        self.conv1 = vb.get((o, c, 1, 1), "conv1.weight")
        self.layer_norm1 = LayerNorm(o, self.EPS, vb=vb.pp("layer_norm1"))
        self.conv2 = vb.get((o, o, 3, 3), "conv2.weight")
        self.layer_norm2 = LayerNorm(o, self.EPS, vb=vb.pp("layer_norm2"))

    def forward(self, x):
        """x [b, h, w, C] -> [b, output_channels, h, w]"""
        o = self.conv1.shape[0]
        x = self.layer_norm1(F.linear(x, self.conv1.reshape(o, -1)))  # 1x1 conv, channels-last
        x = F.conv2d(x.permute(0, 3, 1, 2), self.conv2, padding=1)
        x = self.layer_norm2(x.permute(0, 2, 3, 1))
        return x.permute(0, 3, 1, 2).contiguous()


class SamVisionEncoder(Module):
    """`forward(pixel_values [B, num_channels, image_size, image_size])` -> image
    embeddings [B, output_channels, grid, grid]."""

    def __init__(self, cfg, vb):
        super().__init__()
        self.cfg = cfg
        c, p = cfg.hidden_size, cfg.patch_size
        self.patch_weight = vb.get((c, cfg.num_channels, p, p), "patch_embed.projection.weight")
        self.patch_bias = vb.get((c,), "patch_embed.projection.bias")
        if cfg.use_abs_pos:
            self.pos_embed = vb.get((1, cfg.grid, cfg.grid, c), "pos_embed")
        global_layers = set(cfg.global_attn_indexes)
        self.layers = ModuleList(
            *[
                VisionLayer(cfg, vb.pp(f"layers.{i}"), 0 if i in global_layers else cfg.window_size)
                for i in range(cfg.num_hidden_layers)
            ]
        )
        self.neck = VisionNeck(cfg, vb.pp("neck"))

    def _patches(self, x):
        """The stride = kernel patch convolution as one GEMM: every patch flattened in
        (channel, row, column) order, the weight's own order."""
        b, ch, _, _ = x.shape
        g, p = self.cfg.grid, self.cfg.patch_size
        cols = x.reshape(b, ch, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(b, g, g, ch * p * p)
        w = self.patch_weight.reshape(self.patch_weight.shape[0], -1)
        return F.linear(cols, w, self.patch_bias)

    def forward(self, pixel_values):
        cfg = self.cfg
        want = (cfg.num_channels, cfg.image_size, cfg.image_size)
        if pixel_values.ndim != 4 or tuple(pixel_values.shape[1:]) != want:
            raise ShapeMismatch(
                f"SAM image encoder: pixel_values {fmt_shape(pixel_values.shape)} must be "
                f"[batch, {want[0]}, {want[1]}, {want[2]}] (resize and pad with the processor)",
                op="sam.image_embeddings",
                shapes=(pixel_values.shape,),
            )
        x = self._patches(pixel_values)
        if cfg.use_abs_pos:
            x = x + self.pos_embed
        for layer in self.layers:
            x = layer(x)
        return self.neck(x)
