"""A Whisper decode step's layers driven on the backend directly.

A decode step of Whisper base (one new position per row, no mask) makes 13 backend calls
a layer, and the modules around them (each Module's __call__, Tensor's checks and
Layouts, the functional ops' checks) cost more than the kernels of the small ones: 12-15
ms a step on two cores, where its weights and cross-attention keys take ~7 ms to read.
Those checks hold for every step of a window once they held for the first. `DecoderStep`
makes, per layer, the very backend calls DecoderLayer.forward makes, with the same
arguments, in the same order (so the same bits on every backend): layer_norm, qlinear
(the fused q/k/v), attention_step, qlinear (out_proj, with the residual), layer_norm,
qlinear (the cross-attention's q), scaled_dot_product_attention over the window's cross
keys and values, qlinear (its out_proj, with the residual), layer_norm, qlinear (fc1 with
GELU), qlinear (fc2, with the residual). Only the Python between them is gone.

It takes a decoder whose every projection is a QuantLinear (the f16 halves the CPU keeps,
whisper_load), its norms and activations f32, its self-attention fused (fuses_step) and
no forward hook on any of the layers' modules (ember.verify watches through hooks):
`DecoderStep.of` returns None otherwise, which keeps the modules' path, as does `run`
for a step it does not take (more than one position, another dtype or device).
"""

import math

from .. import dtype as dt
from ..layout import Layout
from ..tensor import Tensor
from .layer_factory import loaded_quant_layers, placed_f32


class DecoderStep:
    """The layers of one decode step of a Whisper decoder (see the module's note)."""

    def __init__(self, layers, device):
        self.layers = layers  # one _Layer each
        self.device = device

    @classmethod
    def of(cls, decoder):
        """The decoder's DecoderStep, or None where its layers are not all ones it takes."""
        quant_layers = loaded_quant_layers()
        if quant_layers is None or decoder.layer_norm.weight.dtype is not dt.f32:
            return None
        layers = []
        for layer in decoder.layers:
            if not _takes(layer, quant_layers.QuantLinear):
                return None
            layers.append(_Layer(layer, decoder.layer_norm.weight.device))
        return cls(layers, decoder.layer_norm.weight.device)

    def run(self, x, cache):
        """The layers over x [b, 1, d] (the step's embedded tokens), as `for layer in
        decoder.layers: x = layer(x, cache)` computes it without a mask; None where this
        step is not one it takes, before anything is written. The self-attention cache is
        written at its length but not advanced."""
        b, t, d = x.shape
        if t != 1 or x.dtype is not dt.f32 or x.device != self.device:
            return None
        kv = cache.self_kv
        if len(kv.keys) != len(self.layers) or len(cache.cross) != len(self.layers):
            return None  # another decoder's cache: the modules' path says what is wrong
        kv._check_room(1)
        be = x.backend
        lx = Layout((b, 1, d))
        xs = x.storage if x.layout.is_contiguous() and x.layout.offset == 0 else None
        if xs is None:
            xs = x.contiguous().storage
        for layer, keys, values, (ck, cv) in zip(
            self.layers, kv.keys, kv.values, cache.cross, strict=True
        ):
            xs = layer.run(be, xs, lx, b, (keys, values), kv.length, (ck, cv))
        return Tensor(xs, lx, dt.f32, self.device)


def _takes(layer, quant_linear):
    """Whether DecoderStep drives this DecoderLayer: quantized projections, f32 norms, the
    fused self-attention, no hooks."""
    a, c = layer.self_attn, layer.encoder_attn
    projections = (a.q_proj, a.k_proj, a.v_proj, a.out_proj)
    projections += (c.q_proj, c.out_proj, layer.fc1, layer.fc2)
    norms = (layer.self_attn_layer_norm, layer.encoder_attn_layer_norm, layer.final_layer_norm)
    return (
        a.fuses_step()
        and all(type(p) is quant_linear for p in projections)
        and type(a._qkv or a._fused()) is quant_linear
        and all(p.bias is None or p.bias.dtype is dt.f32 for p in projections)
        and all(n.weight.dtype is dt.f32 and n.bias is not None for n in norms)
        and not any(m._forward_hooks for m in layer.modules())
    )


class _Layer:
    """One DecoderLayer's weights and settings as its modules' backend calls take them."""

    def __init__(self, layer, device):
        a, c = layer.self_attn, layer.encoder_attn
        self.norms = [
            _norm_args(n)
            for n in (
                layer.self_attn_layer_norm,
                layer.encoder_attn_layer_norm,
                layer.final_layer_norm,
            )
        ]
        self.qkv = _Projection(a._qkv or a._fused(), device)
        self.out, self.cross_q, self.cross_out, self.fc1, self.fc2 = (
            _Projection(p, device) for p in (a.out_proj, c.q_proj, c.out_proj, layer.fc1, layer.fc2)
        )
        self.heads, self.head_dim = a.n_heads, a.head_dim
        self.cross_heads, self.cross_dim = c.n_heads, c.head_dim
        self.inner = layer.fc1.out_features

    def run(self, be, xs, lx, b, self_kv, length, cross):
        f32 = dt.f32
        # self-attention (Attention.step through KVCache.attend_step)
        h = _norm(be, xs, lx, self.norms[0])
        y = self.qkv(be, h, lx)
        keys, values = self_kv
        heads = be.attention_step(
            y,
            Layout((b, 1, 3 * self.heads, self.head_dim)),
            keys.storage,
            keys.layout,
            values.storage,
            values.layout,
            int(length),
            int(self.heads),
            1.0 / math.sqrt(self.head_dim),
            f32,
            None,
            False,
        )
        xs = self.out(be, heads, Layout((b, 1, self.heads * self.head_dim)), xs, lx)
        # cross-attention (Attention.heads, functional.scaled_dot_product_attention, and
        # Attention.attend's view of the heads joined again)
        h = _norm(be, xs, lx, self.norms[1])
        q = self.cross_q(be, h, lx)
        n, hd = self.cross_heads, self.cross_dim
        lq = Layout((b, 1, n, hd)).transpose(1, 2)
        ck, cv = cross
        out = be.scaled_dot_product_attention(
            q,
            lq,
            ck.storage,
            ck.layout,
            cv.storage,
            cv.layout,
            None,
            None,
            1.0 / math.sqrt(hd),
            f32,
            causal=False,
        )
        # [b, heads, 1, hd] read as [b, 1, heads * hd]: one position, so the same order
        xs = self.cross_out(be, out, Layout((b, 1, n * hd)), xs, lx)
        # feed-forward
        h = _norm(be, xs, lx, self.norms[2])
        inner = self.fc1(be, h, lx, activation="gelu")
        return self.fc2(be, inner, Layout((b, 1, self.inner)), xs, lx)


class _Projection:
    """A QuantLinear's backend call (QuantLinear.forward's qlinear, its bias included)."""

    def __init__(self, linear, device):
        self.placed = placed_f32(linear, device)
        bias = linear.bias
        self.bias = (bias.storage, bias.layout) if bias is not None else (None, None)

    def __call__(self, be, x, lx, residual=None, lres=None, activation=None):
        st, _ = be.qlinear(x, lx, self.placed, *self.bias, dt.f32, residual, lres, activation)
        return st


def _norm(be, storage, layout, args):
    """LayerNorm.forward's backend call (tensor._norm's), without a residual."""
    w, lw, b, lb, eps = args
    return be.layer_norm(storage, layout, w, lw, b, lb, eps, dt.f32, residual=None, lres=None)


def _norm_args(norm):
    w, b = norm.weight, norm.bias
    return w.storage, w.layout, b.storage, b.layout, float(norm.eps)
