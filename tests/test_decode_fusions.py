"""The backend contract's fused ops a decode step of a Llama-family model uses, on every
device: `gated_activation` (act(gate) * up over the two halves of one GEMM's output) and
`qlinear` (a quantized matmul with its bias and the block's residual added), each against
the contract's composite (the same bits: the array backend's own forms run the
composite's steps in place) and against torch or numpy; and the Llama MLP (through
gated_activation) and layer, against the same steps spelled out. The layer keeps its
residual adds outside its attention and MLP modules (ember.verify compares each module with
transformers'), so QuantLinear's residual is tested on its own."""

import numpy as np
import pytest
from helpers import require
from strided import VARIANTS, rng_for, variant
from test_fused_linear import TORCH_ACT
from packaged_fixtures import smollm2_gguf  # noqa: F401 (a fixture)
from test_qmatmul_cpu import jit, weight  # noqa: F401 (jit: a fixture)

import ember
import ember.functional as F
from ember.backends import composites
from ember.io.quant import GGMLType
from ember.layout import Layout
from ember.models.quant_layers import QuantLinear
from ember.tensor import Tensor

ACTIVATIONS = sorted(F.LINEAR_ACTIVATIONS)


def _tensor(storage, shape, dtype, device):
    return Tensor(storage, Layout(shape), dtype, device)


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_gated_activation_is_the_composite_and_matches_torch(device, act, kind):
    torch = require("torch")
    x, xs = variant(kind, (3, 2, 8), "f32", device, rng_for("gated", act, kind))
    got = F.gated_activation(x, act)
    assert got.shape == (3, 2, 4) and got.dtype is ember.f32
    composite = composites.gated_activation(device.backend, x.storage, x.layout, act, x.dtype)
    np.testing.assert_array_equal(
        got.numpy(), _tensor(composite, (3, 2, 4), ember.f32, device).numpy()
    )
    t = torch.from_numpy(np.ascontiguousarray(xs))
    want = (TORCH_ACT[act](torch, t[..., :4]) * t[..., 4:]).numpy()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gated_activation_in_half_precision_rounds_between_the_steps(device, dtype):
    x = ember.tensor(rng_for("half", dtype).standard_normal((4, 6)).astype(np.float32),
                     device=device).to(getattr(ember, dtype))
    got = F.gated_activation(x, "silu")
    assert got.dtype is x.dtype and got.shape == (4, 3)
    want = x.narrow(-1, 0, 3).silu() * x.narrow(-1, 3, 3)  # each step rounds to the dtype
    np.testing.assert_array_equal(got.to(ember.f32).numpy(), want.to(ember.f32).numpy())


def test_gated_activation_refuses_what_it_cannot_split_or_apply(cpu):
    with pytest.raises(ember.ShapeMismatch, match=r"\[\.\.\., 2n\]"):
        F.gated_activation(ember.zeros(2, 5, device=cpu), "silu")
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        F.gated_activation(ember.zeros(2, 4, device=cpu), "swish")
    with pytest.raises(ember.UnsupportedDType, match="silu"):
        F.gated_activation(ember.zeros(2, 4, dtype=ember.i32, device=cpu), "silu")


def _qlinear_inputs(device, t, kind, with_bias, with_res):
    rng = rng_for("qlinear", int(t), kind, with_bias, with_res)
    w = weight(rng, t, 10, 2)  # (10, 2 blocks) quantized
    x, xs = variant(kind, (3, w.shape[1]), "f32", device, rng)
    bias = rng.standard_normal(10).astype(np.float32) if with_bias else None
    res = rng.standard_normal((3, 10)).astype(np.float32) if with_res else None
    return w, x, xs, bias, res


@pytest.mark.parametrize("with_bias,with_res", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("t", [GGMLType.Q4_1, GGMLType.Q8_0], ids=lambda t: t.name)
def test_qlinear_is_the_composite_and_adds_bias_then_residual(device, t, kind, with_bias,
                                                               with_res):
    w, x, xs, bias, res = _qlinear_inputs(device, t, kind, with_bias, with_res)
    be = device.backend
    placed = be.place_quantized(w)
    b = ember.tensor(bias, device=device) if bias is not None else None
    r = ember.tensor(res, device=device) if res is not None else None
    args = (x.storage, x.layout, placed,
            b.storage if b is not None else None, b.layout if b is not None else None,
            ember.f32, r.storage if r is not None else None, r.layout if r is not None else None)
    got_st, shape = be.qlinear(*args)
    want_st, want_shape = composites.qlinear(be, *args)
    assert shape == want_shape == (3, 10)
    got = _tensor(got_st, shape, ember.f32, device).numpy()
    np.testing.assert_array_equal(got, _tensor(want_st, shape, ember.f32, device).numpy())
    dense = xs.astype(np.float64) @ w.dequantize().astype(np.float64).T
    dense += (bias if bias is not None else 0) + (res if res is not None else 0)
    np.testing.assert_allclose(got, dense, rtol=1e-4, atol=1e-3)


def test_quant_linear_residual_is_its_output_plus_the_residual(device):
    w, x, _, bias, res = _qlinear_inputs(device, GGMLType.Q4_1, "contiguous", True, True)
    layer = QuantLinear(w, ember.tensor(bias, device=device))
    r = ember.tensor(res, device=device)
    np.testing.assert_array_equal(layer(x, residual=r).numpy(), (layer(x) + r).numpy())
    with pytest.raises(ember.ShapeMismatch, match="residual"):
        layer(x, residual=ember.zeros(3, 9, device=device))


def _decoder_layer(device, hidden_act="silu"):
    """One random Llama decoder layer (GQA 2/1, dense weights) and its config."""
    from ember.models.layer_factory import DenseLayers
    from ember.models.llama import DecoderLayer
    from ember.models.llama_config import LlamaConfig
    from ember.nn import VarBuilder

    h, i, hd = 16, 24, 8
    cfg = LlamaConfig.from_dict({
        "model_type": "llama", "vocab_size": 32, "hidden_size": h, "intermediate_size": i,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "max_position_embeddings": 16, "hidden_act": hidden_act,
    })
    rng = rng_for("decoder-layer", hidden_act)
    shapes = {
        "input_layernorm.weight": (h,), "post_attention_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (2 * hd, h), "self_attn.k_proj.weight": (hd, h),
        "self_attn.v_proj.weight": (hd, h), "self_attn.o_proj.weight": (h, 2 * hd),
        "mlp.gate_proj.weight": (i, h), "mlp.up_proj.weight": (i, h),
        "mlp.down_proj.weight": (h, i),
    }
    arrays = {k: (0.3 * rng.standard_normal(v)).astype(np.float32) for k, v in shapes.items()}
    vb = VarBuilder.from_tensors(arrays, device=device)
    return cfg, DecoderLayer(cfg, vb, 0, DenseLayers())


@pytest.mark.parametrize("hidden_act", ["silu", "gelu_pytorch_tanh", "linear"])
def test_mlp_through_gated_activation_is_the_steps_spelled_out(device, hidden_act):
    cfg, layer = _decoder_layer(device, hidden_act)
    mlp, n = layer.mlp, cfg.intermediate_size
    rng = rng_for("mlp", hidden_act)
    x = ember.tensor(rng.standard_normal((2, 3, 16)).astype(np.float32), device=device)
    gu = mlp.gate_up_proj(x)
    want = mlp.down_proj(mlp._act(gu.narrow(-1, 0, n)) * gu.narrow(-1, n, n))
    got = mlp(x)
    if device.kind == "cpu":  # the array backend's fused forms keep the steps' bits
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    else:
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_decoder_layer_is_the_steps_spelled_out(device):
    from ember.models.rope import RotaryEmbedding

    cfg, layer = _decoder_layer(device)
    rng = rng_for("layer")
    x = ember.tensor(rng.standard_normal((1, 4, 16)).astype(np.float32), device=device)
    rope = RotaryEmbedding(cfg.head_dim, 4, cfg.rope_theta, device=device)
    tables = rope.tables(0, 4) + (rope.fused_tables(0, 4),)
    masks = {None: None}
    h = x + layer.self_attn(layer.input_layernorm(x), rope, tables, None, masks)
    want = h + layer.mlp(layer.post_attention_layernorm(h))
    got = layer(x, rope, tables, None, masks)
    if device.kind == "cpu":
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    else:
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def _parts_in_one_buffer(rng, t, rows, gap=0):
    """QTensors of `rows` rows each whose bytes lie one after another in one buffer (with
    `gap` bytes between them), as a GGUF file's consecutive tensors do."""
    from ember.io.quant import QTensor

    pieces = [weight(rng, t, r, 2) for r in rows]
    blob = bytearray()
    spans = []
    for p in pieces:
        spans.append((len(blob), p.nbytes))
        blob += p.raw.tobytes() + bytes(gap)
    buffer = np.frombuffer(bytes(blob), np.uint8)
    return [QTensor(buffer[o : o + n], t, p.shape) for (o, n), p in zip(spans, pieces, strict=True)]


@pytest.mark.parametrize("path", ["numpy", "fused", "decode"])
def test_adjacent_weights_stack_over_one_view_with_the_plain_stacks_bits(request, path):
    from ember.io import quant
    from ember.io.quant import StackedQTensor
    from ember.models.quant_layers import adjacent_stack
    from ember.models.quant_layers import _owns_its_memory

    if path != "numpy":
        request.getfixturevalue("jit")
    rng = rng_for("adjacent", path)
    parts = _parts_in_one_buffer(rng, GGMLType.Q4_1, (6, 4, 3))
    stack = adjacent_stack(parts)
    assert stack is not None and stack.shape == stack.joined.shape == (13, parts[0].shape[1])
    assert not _owns_its_memory(stack.joined.raw)  # a view of the parts' buffer, not a copy
    np.testing.assert_array_equal(stack.raw, np.concatenate([p.raw for p in parts]))
    plain = StackedQTensor(parts)
    for m in (1, 3, 6):
        x = rng.standard_normal((m, stack.shape[1])).astype(np.float32)
        np.testing.assert_array_equal(quant.qmatmul(x, stack, path=path),
                                      quant.qmatmul(x, plain, path=path))


def test_weights_not_one_run_of_bytes_stay_a_plain_stack():
    from ember.models.quant_layers import adjacent_stack

    rng = rng_for("not-adjacent")
    assert adjacent_stack(_parts_in_one_buffer(rng, GGMLType.Q4_1, (4, 4), gap=32)) is None
    # an odd part before the last would pair its last row with the next part's first
    assert adjacent_stack(_parts_in_one_buffer(rng, GGMLType.Q4_1, (3, 4))) is None
    a, b = _parts_in_one_buffer(rng, GGMLType.Q4_1, (4, 4))
    assert adjacent_stack([b, a]) is None  # out of order
    apart = [weight(rng, GGMLType.Q4_1, 4, 2), weight(rng, GGMLType.Q4_1, 4, 2)]
    assert adjacent_stack(apart) is None  # arrays of their own


def test_smollm2_gate_up_is_one_view_and_decodes_the_plain_stacks_bits(smollm2_gguf):
    from ember.io.quant import StackedQTensor
    from ember.models.gguf_llama import load_gguf_model
    from ember.models.quant_layers import AdjacentStack
    from ember.models.quant_layers import QuantLinear

    def steps(model):
        cache = model.new_cache(1, 16)
        out = [model([[1, 504, 3458, 282]], cache=cache, last_only=True).numpy()]
        for _ in range(3):
            out.append(model([[int(out[-1][0, -1].argmax())]], cache=cache, last_only=True).numpy())
        return np.concatenate(out)

    model = load_gguf_model(smollm2_gguf, max_len=64)
    stacks = [layer.mlp.gate_up_proj.qweight for layer in model.layers]
    assert all(isinstance(s, AdjacentStack) for s in stacks)  # gate, up: one run of the file
    joined = steps(model)
    for layer, s in zip(model.layers, stacks, strict=True):
        layer.mlp.gate_up_proj = QuantLinear(StackedQTensor(s.parts))
    np.testing.assert_array_equal(joined, steps(model))
