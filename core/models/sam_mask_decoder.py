"""Segment Anything's mask decoder, in transformers' SamMaskDecoder layout.

Output tokens (one IoU token, 1 + num_multimask_outputs mask tokens) followed by the
prompt's sparse tokens attend to the image embedding through a two-way transformer
(token self-attention, token-to-image and image-to-token cross-attention, the prompt
tokens' and the image's positional embeddings added to queries and keys at each step).
The image side is then upscaled 4x by two 2x2/2 transposed convolutions, each mask token
becomes a per-pixel weight vector through its own MLP (a hypernetwork), and the IoU
token predicts each mask's quality. Every (image, prompt set) pair is one row of the
batch: B images with P prompt sets each run as B * P rows.
"""

from .. import functional as F
from ..nn import LayerNorm, Linear, Module, ModuleList, activation_op
from ..tensor import cat, stack


class DecoderAttention(Module):
    """transformers' SamAttention: projections to hidden_size / downsample_rate, heads,
    softmax attention, projection back."""

    def __init__(self, cfg, vb, downsample):
        super().__init__()
        d, inner = cfg.hidden_size, cfg.hidden_size // downsample
        self.heads = cfg.num_attention_heads
        self.q_proj = Linear(d, inner, vb=vb.pp("q_proj"))
        self.k_proj = Linear(d, inner, vb=vb.pp("k_proj"))
        self.v_proj = Linear(d, inner, vb=vb.pp("v_proj"))
        self.out_proj = Linear(inner, d, vb=vb.pp("out_proj"))

    def _heads(self, x):
        n, t, c = x.shape
        return x.reshape(n, t, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, query, key, value, residual=None):
        return self.attend(self.q_proj(query), self.k_proj(key), self.v_proj(value), residual)

    def attend(self, q, k, v, residual=None):
        """The attention of projected q, k, v [n, t, inner] (views welcome), projected back."""
        out = F.scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v))
        n, _, t, c = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(n, t, self.heads * c), residual=residual)

    def attend_to_image(self, q, keys, keys_pe, residual=None):
        """attend(q, k_proj(keys_pe), v_proj(keys), residual) for a few token queries q
        [n, T, inner] (projected) over image keys [n, S*S, d], keys_pe = keys + the
        positional embedding, without projecting the image. Head h's scores are
        (q_h W_k,h) keys_pe^T plus q_h . b_k,h, a constant of each score row, which the
        softmax takes out; as each row of weights sums to 1, its output is
        (weights keys) W_v,h^T + b_v,h. So it is one attention of heads * T queries
        q_h W_k,h (d wide, scale 1) over keys_pe with values keys: ViT-B's keys and
        values GEMMs over the image (2 x 4096 x 256 x 128) become products of
        56 x 4096 x 256 for a point's 7 tokens."""
        n, t, inner = q.shape
        h, d = self.heads, keys.shape[-1]
        dh = inner // h
        qh = self._heads(q * dh**-0.5)  # [n, h, T, dh], scaled as the attention scales q
        a = (qh @ self.k_proj.weight.reshape(h, dh, d)).reshape(n, 1, h * t, d)
        z = F.scaled_dot_product_attention(a, keys_pe.unsqueeze(1), keys.unsqueeze(1), scale=1.0)
        wv = self.v_proj.weight.reshape(h, dh, d).transpose(1, 2)  # [h, d, dh]
        out = z.reshape(n, h, t, d) @ wv + self.v_proj.bias.reshape(h, 1, dh)  # [n, h, T, dh]
        return self.out_proj(out.transpose(1, 2).reshape(n, t, inner), residual=residual)

    def attend_from_image(self, keys_pe, k, v):
        """attend(q_proj(keys_pe), k, v) for image queries keys_pe [n, S*S, d]
        over a few projected token keys and values k, v [n, T, inner], without
        projecting the image: head h's scores are keys_pe (W_q,h^T k_h^T) plus
        b_q,h k_h^T (scaled), a softmax over each head's T columns, and its share of
        out_proj is weights_h (v_h W_o,h^T); out_proj's bias, split evenly over the heads'
        rows, comes out whole since each head's weights sum to 1. ViT-B's image-sized
        GEMMs (4096 x 256 x 128 for the queries, 4096 x 128 x 256 out) become
        4096 x 256 x 56 and 4096 x 56 x 256 for a point's 7 tokens."""
        n, t, inner = k.shape
        h, d = self.heads, keys_pe.shape[-1]
        dh = inner // h
        kh = self._heads(k * dh**-0.5)  # [n, h, T, dh], the scale moved from the queries
        qk = (kh @ self.q_proj.weight.reshape(h, dh, d)).reshape(n, h * t, d)
        qk_bias = (kh @ self.q_proj.bias.reshape(h, dh, 1)).reshape(n, 1, h * t)
        scores = keys_pe @ qk.transpose(1, 2) + qk_bias  # [n, S*S, h * T]
        weights = scores.reshape(n, -1, h, t).softmax(-1).reshape(n, -1, h * t)
        w_out = self.out_proj.weight.reshape(d, h, dh).permute(1, 2, 0)  # [h, dh, d]
        vo = self._heads(v) @ w_out + self.out_proj.bias * (1.0 / h)  # [n, h, T, d]
        return weights @ vo.reshape(n, h * t, d)


class TwoWayBlock(Module):
    def __init__(self, cfg, vb, skip_first_layer_pe):
        super().__init__()
        d, eps, rate = cfg.hidden_size, cfg.layer_norm_eps, cfg.attention_downsample_rate
        self.skip_first_layer_pe = skip_first_layer_pe
        self.self_attn = DecoderAttention(cfg, vb.pp("self_attn"), 1)
        self.layer_norm1 = LayerNorm(d, eps, vb=vb.pp("layer_norm1"))
        self.cross_attn_token_to_image = DecoderAttention(
            cfg, vb.pp("cross_attn_token_to_image"), rate
        )
        self.layer_norm2 = LayerNorm(d, eps, vb=vb.pp("layer_norm2"))
        self.lin1 = Linear(d, cfg.mlp_dim, vb=vb.pp("mlp.lin1"))
        self.lin2 = Linear(cfg.mlp_dim, d, vb=vb.pp("mlp.lin2"))
        self.act = activation_op(cfg.hidden_act)
        self.layer_norm3 = LayerNorm(d, eps, vb=vb.pp("layer_norm3"))
        self.layer_norm4 = LayerNorm(d, eps, vb=vb.pp("layer_norm4"))
        self.cross_attn_image_to_token = DecoderAttention(
            cfg, vb.pp("cross_attn_image_to_token"), rate
        )

    def image_side(self, keys, key_pe):
        """What the block's attentions read of an image whose keys [n, S*S, d] are the
        same for every prompt (the first block's): token-to-image's projected keys and
        values, and keys + key_pe for image-to-token (attend_from_image), made once.
        Projected, token-to-image costs less than attend_to_image: its products are
        over the inner width (128), not d (256)."""
        to_image = self.cross_attn_token_to_image
        keys_pe = keys + key_pe
        return to_image.k_proj(keys_pe), to_image.v_proj(keys), keys_pe

    def forward(self, queries, keys, query_pe, key_pe, image_side=None):
        """image_side: what image_side(keys, key_pe) returns, when it was made before
        (the first block's, once per image: see SamMaskDecoder.prepare)."""
        if self.skip_first_layer_pe:  # the first block's queries are the tokens themselves
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = self.self_attn(q, q, queries, residual=queries)
        queries = self.layer_norm1(queries)
        to_image, to_token = self.cross_attn_token_to_image, self.cross_attn_image_to_token
        q = to_image.q_proj(queries + query_pe)
        if image_side is None:  # a prompt's keys: attended without their projections
            keys_pe = keys + key_pe
            queries = to_image.attend_to_image(q, keys, keys_pe, queries)
        else:  # one image's keys for every prompt: projected once
            k_image, v_image, keys_pe = image_side
            queries = to_image.attend(q, k_image, v_image, queries)
        queries = self.layer_norm2(queries)
        queries = self.lin2(self.lin1(queries, activation=self.act), residual=queries)
        queries = self.layer_norm3(queries)
        k, v = to_token.k_proj(queries + query_pe), to_token.v_proj(queries)
        # the residual added in the layer norm's pass
        return queries, self.layer_norm4(to_token.attend_from_image(keys_pe, k, v), keys)


def expand_rows(x, b, p):
    """x [b, T, C], one per image -> [b * p, T, C], one per (image, prompt set) row."""
    return x.unsqueeze(1).expand(b, p, *x.shape[1:]).reshape(b * p, *x.shape[1:])


class PreparedImage:
    """An image embedding with the mask decoder's work that depends on it alone, done
    once for every prompt on it that has no mask prompt (SamModel.prepare_image): the
    image side as rows of cells with the no-mask dense embedding added, and what the
    first two-way block reads of them (TwoWayBlock.image_side: its keys are those rows,
    the same for every such prompt). Made by SamModel.prepare_image, and again at a prompt
    when the weights it was made with are no longer the model's (after load or to)."""

    def __init__(self, embeddings):
        self.embeddings = embeddings
        self._state = None  # (what it was made for, rows, first block's image_side)


class FeedForward(Module):
    """transformers' SamFeedForward: proj_in, (depth - 2) hidden layers, proj_out, with
    ReLU between them."""

    def __init__(self, vb, d_in, hidden, d_out, depth):
        super().__init__()
        self.proj_in = Linear(d_in, hidden, vb=vb.pp("proj_in"))
        self.layers = ModuleList(
            *[Linear(hidden, hidden, vb=vb.pp(f"layers.{i}")) for i in range(depth - 2)]
        )
        self.proj_out = Linear(hidden, d_out, vb=vb.pp("proj_out"))

    def forward(self, x):
        x = self.proj_in(x, activation="relu")
        for layer in self.layers:
            x = layer(x, activation="relu")
        return self.proj_out(x)


def upscale2x(x, weight, bias, activation=None):
    """A 2x2 stride-2 transposed convolution on pixels x [..., Cin] (channels last, in any
    order) with weight (Cin, Cout, 2, 2): the kernel windows do not overlap, so it is one
    GEMM to the (2, 2, Cout) block of output pixels each input pixel makes, then
    `activation` in its epilogue. Returns [..., 2, 2, Cout]: each pixel's block kept
    beside it, for the caller to interleave once (upscaled pixel (2 i + a, 2 j + b) of
    pixel (i, j) is block entry (a, b))."""
    cin, cout = weight.shape[:2]
    blocks = weight.permute(0, 2, 3, 1).reshape(cin, 4 * cout)  # columns (a, b, Cout)
    bias4 = bias.reshape(1, cout).expand(4, cout).reshape(4 * cout)
    y = F.linear(x, blocks.transpose(0, 1), bias4, activation=activation)
    return y.reshape(*x.shape[:-1], 2, 2, cout)


def interleave(blocks):
    """[n, S, S, 2, 2, 2, 2] pixel blocks of two 2x upscalings (the first's block entry
    (a, b), then the second's (a2, b2)) -> the [n, 4S, 4S] image: cell (i, j)'s pixel
    is (4 i + 2 a + a2, 4 j + 2 b + b2)."""
    n, s = blocks.shape[:2]
    return blocks.permute(0, 1, 3, 5, 2, 4, 6).reshape(n, 4 * s, 4 * s)


class SamMaskDecoder(Module):
    NORM_EPS = 1e-6  # transformers' SamLayerNorm default (the upscaling LayerNorm2d)
    FINAL_NORM_EPS = 1e-5  # nn.LayerNorm's default (layer_norm_final_attn)

    def __init__(self, cfg, vb):
        super().__init__()
        d, m = cfg.hidden_size, cfg.num_multimask_outputs + 1
        self.cfg, self.num_mask_tokens = cfg, m
        self.iou_token = vb.get((1, d), "iou_token.weight")
        self.mask_tokens = vb.get((m, d), "mask_tokens.weight")
        t = vb.pp("transformer")
        self.layers = ModuleList(
            *[
                TwoWayBlock(cfg, t.pp(f"layers.{i}"), skip_first_layer_pe=i == 0)
                for i in range(cfg.num_hidden_layers)
            ]
        )
        self.final_attn_token_to_image = DecoderAttention(
            cfg, t.pp("final_attn_token_to_image"), cfg.attention_downsample_rate
        )
        self.layer_norm_final_attn = LayerNorm(
            d, self.FINAL_NORM_EPS, vb=t.pp("layer_norm_final_attn")
        )
        self.upscale_conv1_weight = vb.get((d, d // 4, 2, 2), "upscale_conv1.weight")
        self.upscale_conv1_bias = vb.get((d // 4,), "upscale_conv1.bias")
        self.upscale_layer_norm = LayerNorm(d // 4, self.NORM_EPS, vb=vb.pp("upscale_layer_norm"))
        self.upscale_conv2_weight = vb.get((d // 4, d // 8, 2, 2), "upscale_conv2.weight")
        self.upscale_conv2_bias = vb.get((d // 8,), "upscale_conv2.bias")
        self.output_hypernetworks_mlps = ModuleList(
            *[
                FeedForward(vb.pp(f"output_hypernetworks_mlps.{i}"), d, d, d // 8, 3)
                for i in range(m)
            ]
        )
        self.iou_prediction_head = FeedForward(
            vb.pp("iou_prediction_head"), d, cfg.iou_head_hidden_dim, m, cfg.iou_head_depth
        )
        self._weights = object()  # renewed when the weights change: PreparedImage's check

    def _reset_derived(self):
        self._weights = object()

    def image_rows(self, image_embeddings, dense):
        """The image side as rows of cells [B, S*S, d], contiguous once: every later op
        reads it so (the dense prompt added on the way, one pass; [1, d, 1, 1] without a
        mask prompt)."""
        b, d, s, _ = image_embeddings.shape
        rows = image_embeddings.reshape(b, d, s * s).transpose(1, 2)
        return (rows + dense.reshape(dense.shape[0], d, -1).transpose(1, 2)).contiguous()

    def prepare(self, prepared, image_embeddings, key_pe, dense, dense_weight):
        """(rows, first block's image_side) of a PreparedImage whose embeddings are
        image_embeddings, for prompts without a mask (dense: the no-mask embedding, made
        from the prompt encoder's dense_weight), made at its first use and kept while
        these weights, key_pe and dense_weight stay the model's."""
        made_for = (self._weights, image_embeddings, key_pe, dense_weight)
        state = prepared._state
        if state is None or any(a is not b for a, b in zip(state[0], made_for, strict=True)):
            rows = self.image_rows(image_embeddings, dense)
            state = (made_for, rows, self.layers[0].image_side(rows, key_pe))
            prepared._state = state
        return state[1:]

    def forward(self, image_embeddings, key_pe, sparse, dense, multimask_output, prepared=None):
        """image_embeddings [B, d, S, S], key_pe [1, S * S, d] (the image positional
        embedding, a row per cell), sparse [B, P, N, d] or None, dense [B or 1, d, S, S]
        -> (masks [B, P, k, 4S, 4S], iou [B, P, k]) with k = num_multimask_outputs when
        multimask_output, else 1. prepared: what prepare returned for these embeddings
        and this dense, in place of computing it."""
        b, d, s, _ = image_embeddings.shape
        p = sparse.shape[1] if sparse is not None else 1
        out_tokens = cat([self.iou_token, self.mask_tokens], 0)  # [1 + m, d]
        tokens = out_tokens.reshape(1, 1, *out_tokens.shape).expand(b, p, *out_tokens.shape)
        if sparse is not None:
            tokens = cat([tokens, sparse], 2)
        tokens = tokens.reshape(b * p, tokens.shape[2], d)
        if prepared is None:
            rows, side = self.image_rows(image_embeddings, dense), None
        else:
            rows, side = prepared
            side = [expand_rows(t, b, p) for t in side]
        keys = expand_rows(rows, b, p)
        queries = tokens
        for i, layer in enumerate(self.layers):
            queries, keys = layer(queries, keys, tokens, key_pe, side if i == 0 else None)
        final = self.final_attn_token_to_image
        queries = final.attend_to_image(
            final.q_proj(queries + tokens), keys, keys + key_pe, queries
        )
        queries = self.layer_norm_final_attn(queries)
        m = self.num_mask_tokens
        first, count = (1, m - 1) if multimask_output else (0, 1)

        # Upscaling: 4x4 blocks of pixels per cell. The layer norm, the second transposed
        # convolution and the masks' product are per pixel, so the pixels stay in their
        # cells' blocks throughout, and only the masks are interleaved, at the end.
        x = upscale2x(
            keys.reshape(b * p, s, s, d), self.upscale_conv1_weight, self.upscale_conv1_bias
        )
        x = self.upscale_layer_norm(x).gelu()  # [b*p, S, S, 2, 2, d/4]
        x = upscale2x(x, self.upscale_conv2_weight, self.upscale_conv2_bias, "gelu")
        pixels = x.reshape(b * p, 16 * s * s, d // 8)  # rows (S row, S column, a, b, a2, b2)
        hyper = stack(
            [
                self.output_hypernetworks_mlps[i](queries.select(1, 1 + i))
                for i in range(first, first + count)
            ],
            1,
        )  # [b*p, k, d/8]
        masks = (hyper @ pixels.transpose(1, 2)).reshape(b * p * count, s, s, 2, 2, 2, 2)
        masks = interleave(masks).reshape(b, p, count, 4 * s, 4 * s)
        iou = self.iou_prediction_head(queries.select(1, 0)).reshape(b, p, m)
        return masks, iou.narrow(2, first, count)
