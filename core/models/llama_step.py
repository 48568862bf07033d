"""A Llama decode step's layers driven on the backend directly.

A decode step (one new position, a KV cache, no mask) of SmolLM2-135M makes ~300
backend calls, and on the CPU each of them once cost 40-80 us of Python around its
kernel: the Modules' __call__, Tensor's checks and Layouts, the functional ops' checks.
Those checks hold for every step alike once they held for one. `DecodeStep` makes, per
layer, the very backend calls the modules make, with the same arguments, in the same
order (so the same bits on every backend): rms_norm, qlinear (q/k/v), attention_step,
qlinear (o), binary add, rms_norm, qlinear (gate/up), gated_activation, qlinear (down),
binary add. Only the Python between them is gone.

It takes a model whose every layer is the plain Llama one (`DecoderLayer`, `Attention`,
`MLP`, `RmsNorm`) with bias-free quantized projections (`QuantLinear`) and a fusable
gated activation, in f32; `DecodeStep.of` returns None for anything else (Gemma's extra
norms, dense or concatenated projections, other dtypes), which keeps the modules' path.
"""

import sys

from .. import dtype as dt
from ..layout import Layout
from ..nn.layers import RmsNorm
from ..tensor import Tensor


class DecodeStep:
    """The layers of one decode step of a model (see the module's note)."""

    def __init__(self, layers, device):
        self.layers = layers  # one _Layer each
        self.device = device

    @classmethod
    def of(cls, model):
        """The model's DecodeStep, or None where its layers are not all plain Llama ones."""
        from .llama import MLP, Attention, DecoderLayer

        # quant_layers needs numpy (a page's Pyodide has none): where it was never
        # imported, no layer is a QuantLinear
        quant_layers = sys.modules.get(f"{__package__}.quant_layers")
        if quant_layers is None or model.dtype is not dt.f32:
            return None
        QuantLinear = quant_layers.QuantLinear
        layers = []
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            norms = (layer.input_layernorm, layer.post_attention_layernorm)
            projections = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
            if (
                type(layer) is not DecoderLayer
                or type(attn) is not Attention
                or type(mlp) is not MLP
                or mlp._gated_op is None
                or any(type(n) is not RmsNorm or n.weight.dtype is not dt.f32 for n in norms)
                or any(type(p) is not QuantLinear or p.bias is not None for p in projections)
            ):
                return None
            layers.append(_Layer(layer, model.device))
        return cls(layers, model.device)

    def run(self, x, rotations, cache, masks):
        """The layers over x [b, 1, hidden] (the step's embedded token), as
        `for layer in model.layers: x = layer(x, ...)` computes it; None where this step
        is not one the fused path takes (a mask, partial rope), before anything is
        written. The cache is written but not advanced."""
        b, t, hidden = x.shape
        if t != 1 or x.dtype is not dt.f32 or x.device != self.device:
            return None
        for layer in self.layers:
            attn = layer.attn
            if masks.get(attn.window) is not None or not attn.fuses_step(
                rotations[attn.rope_kind][1]
            ):
                return None
        cache._check_room(1)
        be = x.backend
        lx = Layout((b, 1, hidden))
        xs = x.storage if x.layout.is_contiguous() and x.layout.offset == 0 else None
        if xs is None:
            xs = x.contiguous().storage
        keys, values = cache.keys, cache.values
        if len(keys) != len(self.layers) or any(
            k.shape != (b, layer.attn.n_kv, cache.max_len, layer.attn.head_dim)
            or v.shape != k.shape
            or k.dtype is not dt.f32
            or v.dtype is not dt.f32
            or k.device != self.device
            or v.device != self.device
            for k, v, layer in zip(keys, values, self.layers, strict=False)
        ):
            return None  # a cache of another model: the modules' path says what is wrong
        laid = {}
        for kind, (rope, tables) in rotations.items():
            cos, sin = tables[2]
            laid[kind] = (cos.storage, cos.layout, sin.storage, sin.layout), bool(rope.interleaved)
        length = cache.length
        for layer in self.layers:
            xs = layer.run(be, xs, lx, b, laid, cache, length)
        return Tensor(xs, lx, dt.f32, self.device)


class _Layer:
    """One DecoderLayer's weights and settings as its modules' backend calls take them."""

    def __init__(self, layer, device):
        attn, mlp = layer.self_attn, layer.mlp
        self.attn = attn
        self.norm1 = _norm_args(layer.input_layernorm)
        self.norm2 = _norm_args(layer.post_attention_layernorm)
        self.qkv, self.o, self.gate_up, self.down = (
            _placed(p, device)
            for p in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        )
        self.heads = attn.n_heads + 2 * attn.n_kv
        self.gated_op = mlp._gated_op
        self.inter = mlp.inter

    def run(self, be, xs, lx, b, laid, cache, length):
        f32, attn = dt.f32, self.attn
        w, lw, eps = self.norm1
        h = be.rms_norm(xs, lx, w, lw, eps, f32, residual=None, lres=None)
        qkv, _ = be.qlinear(h, lx, self.qkv, None, None, f32, None, None, None)
        lqkv = Layout((b, 1, self.heads, attn.head_dim))
        keys, values = cache.keys[attn.layer_idx], cache.values[attn.layer_idx]
        heads = be.attention_step(
            qkv,
            lqkv,
            keys.storage,
            keys.layout,
            values.storage,
            values.layout,
            length,
            attn.n_heads,
            float(attn.scale),
            f32,
            *laid[attn.rope_kind],
        )
        lheads = Layout((b, 1, attn.n_heads * attn.head_dim))
        out, _ = be.qlinear(heads, lheads, self.o, None, None, f32, None, None, None)
        xs = be.binary("add", xs, lx, out, lx, f32)
        w, lw, eps = self.norm2
        h = be.rms_norm(xs, lx, w, lw, eps, f32, residual=None, lres=None)
        gu, _ = be.qlinear(h, lx, self.gate_up, None, None, f32, None, None, None)
        act = be.gated_activation(gu, Layout((b, 1, 2 * self.inter)), self.gated_op, f32)
        down, _ = be.qlinear(
            act, Layout((b, 1, self.inter)), self.down, None, None, f32, None, None, None
        )
        return be.binary("add", xs, lx, down, lx, f32)


def _norm_args(norm):
    w = norm.weight
    return w.storage, w.layout, float(norm.eps)


def _placed(linear, device):
    linear.place(device, dt.f32)
    return linear._placed[1]
