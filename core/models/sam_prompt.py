"""Segment Anything's prompt encoder, in transformers' SamPromptEncoder layout.

Points and box corners are encoded by a random Fourier feature map (a fixed Gaussian
matrix from the checkpoint: sin and cos of 2 pi (2 c - 1) @ G for coordinates c in
[0, 1]), then the label's learned embedding is added: 1 positive, 0 negative, box
corners their own two; label -1 (the padding point appended when there is no box) is
replaced by `not_a_point_embed` and -10 (a padding entry) by zeros. A mask prompt is
downscaled by two strided convolutions; without one, `no_mask_embed` is added to every
position of the image embedding.
"""

import math

from .. import functional as F
from ..nn import LayerNorm, Module, activation_op
from ..tensor import cat, tensor, zeros

# Row of the label table each point label takes (its embedding is added; labels -1 and
# -10 also drop the point's positional part); any other label adds nothing.
NOT_A_POINT, NEGATIVE, POSITIVE, NOTHING = range(4)
PADDING_LABEL = -10


def _label_row(label):
    return {-1: NOT_A_POINT, 0: NEGATIVE, 1: POSITIVE}.get(label, NOTHING)


class FourierEmbedding(Module):
    """transformers' SamPositionalEmbedding: coordinates [..., 2] (x, y) in [0, 1] ->
    [..., 2 * num_pos_feats]."""

    def __init__(self, matrix):
        super().__init__()
        self.positional_embedding = matrix  # (2, num_pos_feats)

    def forward(self, coords):
        c = coords * 2.0 - 1.0
        c = F.linear(c, self.positional_embedding.transpose(0, 1)) * (2 * math.pi)
        return cat([c.sin(), c.cos()], -1)

    def grid(self, size):
        """The embedding of every cell centre of a size x size grid: [1, C, size, size]."""
        dev = self.positional_embedding.device
        centres = tensor([i + 0.5 for i in range(size)], device=dev) / float(size)
        xs = centres.reshape(1, size, 1).expand(size, size, 1)
        ys = centres.reshape(size, 1, 1).expand(size, size, 1)
        pe = self.forward(cat([xs, ys], -1))  # [size, size, C]
        return pe.permute(2, 0, 1).unsqueeze(0).contiguous()


class MaskEmbedding(Module):
    """A mask prompt [B, 1, 4 S, 4 S] -> [B, hidden, S, S]: conv 2x2/2, LayerNorm2d, act,
    conv 2x2/2, LayerNorm2d, act, conv 1x1."""

    def __init__(self, cfg, vb):
        super().__init__()
        c, quarter, eps = cfg.mask_input_channels, cfg.mask_input_channels // 4, cfg.layer_norm_eps
        self.conv1_weight = vb.get((quarter, 1, 2, 2), "conv1.weight")
        self.conv1_bias = vb.get((quarter,), "conv1.bias")
        self.layer_norm1 = LayerNorm(quarter, eps, vb=vb.pp("layer_norm1"))
        self.conv2_weight = vb.get((c, quarter, 2, 2), "conv2.weight")
        self.conv2_bias = vb.get((c,), "conv2.bias")
        self.layer_norm2 = LayerNorm(c, eps, vb=vb.pp("layer_norm2"))
        self.conv3_weight = vb.get((cfg.hidden_size, c, 1, 1), "conv3.weight")
        self.conv3_bias = vb.get((cfg.hidden_size,), "conv3.bias")
        self.act = activation_op(cfg.hidden_act)

    def _norm_act(self, x, norm):
        x = norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return x._unary(self.act) if self.act else x

    def forward(self, masks):
        x = F.conv2d(masks, self.conv1_weight, self.conv1_bias, stride=2)
        x = self._norm_act(x, self.layer_norm1)
        x = F.conv2d(x, self.conv2_weight, self.conv2_bias, stride=2)
        x = self._norm_act(x, self.layer_norm2)
        return F.conv2d(x, self.conv3_weight, self.conv3_bias)


class SamPromptEncoder(Module):
    def __init__(self, cfg, vb, fourier):
        super().__init__()
        d = cfg.hidden_size
        self.cfg, self.fourier = cfg, fourier
        self.mask_embed = MaskEmbedding(cfg, vb.pp("mask_embed"))
        self.no_mask_embed = vb.get((1, d), "no_mask_embed.weight")
        self.not_a_point_embed = vb.get((1, d), "not_a_point_embed.weight")
        # negative, positive, box top-left, box bottom-right: one (4, d) table
        self.point_embed = cat([vb.get((1, d), f"point_embed.{i}.weight") for i in range(4)], 0)

    def _normalized(self, coords):
        """Pixel coordinates (of the resized image_size input) -> cell centres in [0, 1]."""
        return (coords + 0.5) / float(self.cfg.image_size)

    def embed_points(self, points, labels, pad):
        """points [B, P, N, 2] (Tensor), labels [B][P][N] (ints) -> [B, P, N (+1), d]."""
        b, p, n, _ = points.shape
        if pad:  # the padding point: label -1, so its coordinates (0, 0) never show
            points = cat([points, zeros((b, p, 1, 2), device=points.device)], 2)
            labels = [[list(row) + [-1] for row in per_image] for per_image in labels]
            n += 1
        flat = [int(v) for per_image in labels for row in per_image for v in row]
        dev = points.device
        pe = self.fourier(self._normalized(points))
        keep = tensor([0.0 if v in (-1, PADDING_LABEL) else 1.0 for v in flat], device=dev)
        rows = tensor([_label_row(v) for v in flat], dtype="i64", device=dev)
        nothing = zeros((1, self.cfg.hidden_size), device=dev)
        table = cat([self.not_a_point_embed, self.point_embed.narrow(0, 0, 2), nothing], 0)
        added = table.index_select(0, rows).reshape(b, p, n, -1)
        return pe * keep.reshape(b, p, n, 1) + added

    def embed_boxes(self, boxes):
        """boxes [B, nb, 4] (x0, y0, x1, y1) -> [B, nb, 2, d]."""
        b, nb, _ = boxes.shape
        corners = self._normalized(boxes).reshape(b, nb, 2, 2)
        return self.fourier(corners) + self.point_embed.narrow(0, 2, 2)

    def forward(self, points=None, labels=None, boxes=None, masks=None):
        """(sparse [B, P, tokens, d] or None, dense: [B or 1, d, S, S] to add to the image
        embedding)."""
        sparse = None
        if points is not None:
            sparse = self.embed_points(points, labels, pad=boxes is None)
        if boxes is not None:
            box = self.embed_boxes(boxes)
            sparse = box if sparse is None else cat([sparse, box], 2)
        if masks is not None:
            dense = self.mask_embed(masks)
        else:
            dense = self.no_mask_embed.reshape(1, -1, 1, 1)
        return sparse, dense
