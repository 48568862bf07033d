"""A Llama decode step's layers driven on the backend directly.

A decode step (one new position, a KV cache, no mask) of SmolLM2-135M makes ~300
backend calls, and on the CPU each of them once cost 40-80 us of Python around its
kernel: the Modules' __call__, Tensor's checks and Layouts, the functional ops' checks.
Those checks hold for every step alike once they held for one. `DecodeStep` makes, per
layer, the very backend calls the modules make, with the same arguments, in the same
order (so the same bits on every backend): rms_norm, qlinear (q/k/v), attention_step,
qlinear (o), binary add, rms_norm, qlinear (gate/up), gated_activation, qlinear (down),
binary add. Only the Python between them is gone.

Gemma 3's layer (`GemmaDecoderLayer`) is taken too, with the calls its modules add: the
q and k heads' RMS norms on their views of the projection and the heads joined again
(`cat`: empty, three copy_into), a norm after attention and on each side of the MLP,
each output norm before its residual add. A projection of parts quantized with
different types (`ConcatLinear`, Q4_K_M files) is its parts' qlinear calls joined the
same way.

It takes a model whose every layer is one of those (`DecoderLayer` with `Attention`, or
Gemma 3's without soft-capping; `MLP`, `RmsNorm`) with bias-free quantized projections
(`QuantLinear`, or a `ConcatLinear` of them) and a fusable gated activation, in f32;
`DecodeStep.of` returns None for anything else (Gemma 2's capped scores, dense
projections, other dtypes), which keeps the modules' path.
"""

from .. import dtype as dt
from ..layout import Layout
from ..nn.layers import RmsNorm
from ..tensor import Tensor
from .layer_factory import loaded_quant_layers, placed_f32


class DecodeStep:
    """The layers of one decode step of a model (see the module's note)."""

    def __init__(self, layers, device):
        self.layers = layers  # one _Layer each
        self.device = device

    @classmethod
    def of(cls, model):
        """The model's DecodeStep, or None where its layers are not all ones it takes."""
        quant_layers = loaded_quant_layers()
        if quant_layers is None or model.dtype is not dt.f32:
            return None
        layers = []
        for layer in model.layers:
            kind = _kind_of(layer, quant_layers)
            if kind is None:
                return None
            layers.append(kind(layer, model.device))
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


def _kind_of(layer, quant_layers):
    """The step class for `layer` (_Layer, _GemmaLayer), or None where it takes none."""
    from .gemma import GemmaAttention, GemmaDecoderLayer
    from .llama import MLP, Attention, DecoderLayer

    attn, mlp = layer.self_attn, layer.mlp
    if type(layer) is DecoderLayer and type(attn) is Attention:
        kind = _Layer
    elif (
        type(layer) is GemmaDecoderLayer
        and type(attn) is GemmaAttention
        and attn.qk_norm
        and attn.softcap is None
    ):
        kind = _GemmaLayer
    else:
        return None
    norms = [getattr(layer, name) for name in kind.NORMS]
    norms += [attn.q_norm, attn.k_norm] if kind is _GemmaLayer else []
    projections = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
    if (
        type(mlp) is not MLP
        or mlp._gated_op is None
        or any(type(n) is not RmsNorm or n.weight.dtype is not dt.f32 for n in norms)
        or any(_parts(p, quant_layers) is None for p in projections)
    ):
        return None
    return kind


def _parts(projection, quant_layers):
    """A projection as [its bias-free QuantLinear parts] (one, or a ConcatLinear's, whose
    outputs it joins), or None where it is not that."""
    parts = (
        [getattr(projection, n) for n in projection.names]
        if type(projection) is quant_layers.ConcatLinear
        else [projection]
    )
    if any(type(p) is not quant_layers.QuantLinear or p.bias is not None for p in parts):
        return None
    return parts


class _Layer:
    """One DecoderLayer's weights and settings as its modules' backend calls take them."""

    NORMS = ("input_layernorm", "post_attention_layernorm")

    def __init__(self, layer, device):
        attn, mlp = layer.self_attn, layer.mlp
        self.attn = attn
        self.norms = [_norm_args(getattr(layer, name)) for name in self.NORMS]
        self.qkv, self.o, self.gate_up, self.down = (
            _Projection(p, device)
            for p in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        )
        self.heads = attn.n_heads + 2 * attn.n_kv
        self.gated_op = mlp._gated_op
        self.inter = mlp.inter

    def run(self, be, xs, lx, b, laid, cache, length):
        f32 = dt.f32
        h = _norm(be, xs, lx, self.norms[0])
        heads = self.attend(be, self.step_heads(be, self.qkv(be, h, lx), b), b, laid, cache, length)
        lheads = Layout((b, 1, self.attn.n_heads * self.attn.head_dim))
        xs = be.binary("add", xs, lx, self.o(be, heads, lheads), lx, f32)
        return be.binary(
            "add", xs, lx, self.mlp(be, _norm(be, xs, lx, self.norms[1]), lx, b), lx, f32
        )

    def step_heads(self, be, qkv, b):
        """The projection's heads as the fused attention takes them (Attention.step_heads)."""
        return qkv

    def attend(self, be, qkv, b, laid, cache, length):
        attn = self.attn
        keys, values = cache.keys[attn.layer_idx], cache.values[attn.layer_idx]
        return be.attention_step(
            qkv,
            Layout((b, 1, self.heads, attn.head_dim)),
            keys.storage,
            keys.layout,
            values.storage,
            values.layout,
            length,
            attn.n_heads,
            float(attn.scale),
            dt.f32,
            *laid[attn.rope_kind],
        )

    def mlp(self, be, h, lx, b):
        gu = self.gate_up(be, h, lx)
        act = be.gated_activation(gu, Layout((b, 1, 2 * self.inter)), self.gated_op, dt.f32)
        return self.down(be, act, Layout((b, 1, self.inter)))


class _GemmaLayer(_Layer):
    """Gemma 3's layer (GemmaDecoderLayer.forward): q/k head norms before the fused
    attention, and each branch's output normed before its residual add."""

    NORMS = (
        "input_layernorm",
        "post_attention_layernorm",
        "pre_feedforward_layernorm",
        "post_feedforward_layernorm",
    )

    def __init__(self, layer, device):
        super().__init__(layer, device)
        self.q_norm = _norm_args(self.attn.q_norm)
        self.k_norm = _norm_args(self.attn.k_norm)

    def run(self, be, xs, lx, b, laid, cache, length):
        f32, (n_in, n_attn, n_pre, n_post) = dt.f32, self.norms
        h = _norm(be, xs, lx, n_in)
        heads = self.attend(be, self.step_heads(be, self.qkv(be, h, lx), b), b, laid, cache, length)
        lheads = Layout((b, 1, self.attn.n_heads * self.attn.head_dim))
        attn = _norm(be, self.o(be, heads, lheads), lx, n_attn)
        xs = be.binary("add", xs, lx, attn, lx, f32)
        mlp = _norm(be, self.mlp(be, _norm(be, xs, lx, n_pre), lx, b), lx, n_post)
        return be.binary("add", xs, lx, mlp, lx, f32)

    def step_heads(self, be, qkv, b):
        """GemmaAttention.step_heads: cat([q_norm(q heads), k_norm(k heads), v heads], 2)."""
        nh, nkv, hd = self.attn.n_heads, self.attn.n_kv, self.attn.head_dim
        whole = Layout((b, 1, self.heads, hd))
        q = _norm(be, qkv, whole.narrow(2, 0, nh), self.q_norm)
        k = _norm(be, qkv, whole.narrow(2, nh, nkv), self.k_norm)
        parts = [(q, Layout((b, 1, nh, hd))), (k, Layout((b, 1, nkv, hd)))]
        parts.append((qkv, whole.narrow(2, nh + nkv, nkv)))
        return _cat(be, parts, whole, 2)


class _Projection:
    """A bias-free quantized projection's backend calls (QuantLinear.forward's qlinear),
    a ConcatLinear's parts' joined as tensor.cat joins them."""

    def __init__(self, projection, device):
        parts = _parts(projection, loaded_quant_layers())
        self.placed = [placed_f32(p, device) for p in parts]
        self.widths = [p.out_features for p in parts]

    def __call__(self, be, x, lx):
        f32 = dt.f32
        outs = [be.qlinear(x, lx, p, None, None, f32, None, None, None)[0] for p in self.placed]
        if len(outs) == 1:
            return outs[0]
        lead = lx.shape[:-1]
        whole = Layout(lead + (sum(self.widths),))
        parts = [(o, Layout(lead + (n,))) for o, n in zip(outs, self.widths, strict=True)]
        return _cat(be, parts, whole, len(lead))


def _cat(be, parts, whole, dim):
    """tensor.cat's backend calls: [(storage, layout)] joined along `dim` of `whole`."""
    out = be.empty(whole.shape, dt.f32)  # every element is written below
    at = 0
    for storage, layout in parts:
        n = layout.shape[dim]
        be.copy_into(out, whole.narrow(dim, at, n), storage, layout, dt.f32)
        at += n
    return out


def _norm(be, storage, layout, args):
    """RmsNorm.forward's backend call (tensor._norm's), without a residual."""
    w, lw, eps = args
    return be.rms_norm(storage, layout, w, lw, eps, dt.f32, residual=None, lres=None)


def _norm_args(norm):
    w = norm.weight
    return w.storage, w.layout, float(norm.eps)
