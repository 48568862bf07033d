"""ember's ggml quantizers: bit-exact with the `gguf` package's for every type it offers,
K-quants checked by decoding (ember's and gguf's dequantizers agree on ember's blocks),
and `ember quantize`'s llama.cpp mixes and fallbacks."""
import numpy as np
import pytest
from ember.cli import main
from ember.errors import ShapeMismatch
from ember.io.gguf import GGUFFile
from ember.io.quant import dequantize
from ember.io.quantize import quantize
from helpers import require

gguf = require("gguf")        # the reference quantizer
gguf_quantize, gguf_dequantize = gguf.quants.quantize, gguf.quants.dequantize


def _weights(rows=24, cols=512, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * rng.uniform(0.001, 4, (rows, 1))).astype(np.float32)
    x[0, :32] = 0                  # an all-zero block
    x[1, :32] = 1.5                # a constant block
    x[2, 7] = 300.0                # an outlier
    x[3, :32] = np.linspace(-1, 1, 32)   # evenly spaced: ties for the rounding rules
    return x


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16"])
def test_blocks_are_bit_exact_with_the_gguf_quantizer(name):
    x = _weights()
    ours = quantize(x, name)
    ref = np.asarray(gguf_quantize(x, gguf.GGMLQuantizationType[name]))
    assert ours.dtype == np.uint8
    assert ours.tobytes() == ref.tobytes()


# decoded error relative to the weights' RMS: each K-quant below a loose bound, and
# more bits strictly better
_BOUNDS = {"Q2_K": 0.40, "Q3_K": 0.20, "Q4_K": 0.10, "Q5_K": 0.05, "Q6_K": 0.025}


def test_k_quants_decode_close_and_improve_with_bits():
    x = _weights(rows=16, cols=768, seed=1)
    errors = []
    for name, bound in _BOUNDS.items():
        raw = quantize(x, name)
        ours = dequantize(raw, name, x.shape)
        ref = gguf_dequantize(raw, gguf.GGMLQuantizationType[name]).reshape(x.shape)
        assert np.array_equal(ours, ref), name      # the layout is the one ggml reads
        rel = np.sqrt(((ours - x) ** 2).mean() / (x ** 2).mean())
        assert rel < bound, (name, rel)
        assert np.abs(ours[0, :32]).max() == 0, name   # zeros stay zeros
        errors.append(rel)
    assert errors == sorted(errors, reverse=True)


def test_a_k_quant_searches_better_than_plain_min_max():
    # Q4_K by the scale search must beat the one-shot min/max encoder in tests/ggml_encode
    from ggml_encode import quantize_q4_k
    x = _weights(rows=8, cols=512, seed=2)
    searched = dequantize(quantize(x, "Q4_K"), "Q4_K", x.shape)
    simple = dequantize(quantize_q4_k(x), "Q4_K", x.shape)
    assert ((searched - x) ** 2).sum() < ((simple - x) ** 2).sum()


def test_rows_that_are_not_whole_blocks_are_refused():
    with pytest.raises(ShapeMismatch, match="not a multiple of the block size 256"):
        quantize(np.zeros((2, 64), np.float32), "Q4_K")


def test_quantize_cli_mix_and_fallbacks(tmp_path, capsys):
    from ember.cli.quantize import planner
    from ember.io.weights import Entry
    names = [f"blk.{i}.{t}.weight" for i in range(8) for t in ("attn_v", "ffn_down", "attn_q")]
    names += ["token_embd.weight", "output.weight", "output_norm.weight"]
    plan = planner("Q4_K_M", names)

    def entry(shape):
        return Entry("x", shape, "F32", 0, None)

    assert plan("output.weight", entry((32, 256))) == ("Q6_K", "Q6_K")
    assert plan("blk.0.attn_v.weight", entry((32, 256)))[0] == "Q6_K"    # first eighth
    assert plan("blk.3.ffn_down.weight", entry((32, 256)))[0] == "Q6_K"  # every third
    assert plan("blk.2.attn_v.weight", entry((32, 256)))[0] == "Q4_K"
    assert plan("blk.2.attn_q.weight", entry((32, 256)))[0] == "Q4_K"
    assert plan("blk.7.attn_v.weight", entry((32, 256)))[0] == "Q6_K"    # last eighth
    assert plan("output_norm.weight", entry((256,)))[0] == "F32"
    assert plan("blk.2.attn_q.weight", entry((32, 64))) == ("Q5_0", "Q4_K")   # fallback
    assert plan("blk.2.attn_q.weight", entry((32, 48))) == ("F16", "Q4_K")

    # end to end: an f32 GGUF quantized to Q8_0; values are what gguf's quantizer gives
    from ember.io.gguf_writer import PlannedTensor, write_gguf
    from ember.io.quant import GGMLType
    w = _weights(rows=8, cols=256)
    odd = _weights(rows=4, cols=48, seed=3)
    src = tmp_path / "in.gguf"
    with open(src, "wb") as fh:
        write_gguf(fh, {"general.architecture": "test"},
                   [PlannedTensor("blk.0.w.weight", w.shape, GGMLType.F32, lambda: w),
                    PlannedTensor("blk.0.odd.weight", odd.shape, GGMLType.F32, lambda: odd)])
    out = tmp_path / "out.gguf"
    assert main(["quantize", str(src), str(out), "--type", "q8_0"]) == 0
    summary = capsys.readouterr().out
    assert "blk.0.odd.weight [4, 48]: rows of 48 are not whole Q8_0 blocks; stored as F16" in summary
    with GGUFFile(out) as f:
        assert f.tensors["blk.0.w.weight"].ggml_type == GGMLType.Q8_0
        assert f.raw("blk.0.w.weight").tobytes() == \
            np.asarray(gguf_quantize(w, gguf.GGMLQuantizationType.Q8_0)).tobytes()
        assert np.array_equal(f.dequantize("blk.0.odd.weight"), odd.astype(np.float16).astype(np.float32))
        assert f.metadata["general.architecture"] == "test"
        assert f.metadata["general.quantization_version"] == 2


def test_q4_k_m_of_a_hugging_face_llama_runs_in_ember_close_to_transformers(tmp_path, capsys):
    torch = require("torch")
    transformers = require("transformers")
    from ember.io.quant import GGMLType
    from ember.models.gguf_llama import load_gguf_model
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=256, intermediate_size=512,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32,
                                   tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).eval()
    model.save_pretrained(tmp_path / "hf")
    out = tmp_path / "q.gguf"
    assert main(["quantize", str(tmp_path / "hf"), str(out), "--type", "Q4_K_M"]) == 0
    assert "not whole" not in capsys.readouterr().out      # every row fits a 256 block
    with GGUFFile(out) as f:
        types = {name: info.ggml_type for name, info in f.tensors.items()}
    assert types["output.weight"] == GGMLType.Q6_K
    assert types["token_embd.weight"] == GGMLType.Q4_K
    # two layers: llama.cpp's "more bits" layers are those at or past 7/8 of the way: blk.1
    assert types["blk.1.attn_v.weight"] == types["blk.1.ffn_down.weight"] == GGMLType.Q6_K
    assert types["blk.0.attn_v.weight"] == types["blk.0.ffn_down.weight"] == GGMLType.Q4_K
    assert types["blk.0.attn_q.weight"] == GGMLType.Q4_K
    assert types["blk.0.attn_norm.weight"] == GGMLType.F32
    theirs = {t.name: (int(t.tensor_type), t.data.tobytes()) for t in gguf.GGUFReader(str(out)).tensors}
    with GGUFFile(out) as f:
        assert theirs == {n: (int(i.ggml_type), f.raw(n).tobytes()) for n, i in f.tensors.items()}
    ids = [3, 17, 42, 8, 1]
    # the reference: transformers running the very weights the file decodes to
    from ember.cli.convert import for_safetensors, permute_rows
    from ember.io.weights import open_weights
    with open_weights(out) as w:
        source = for_safetensors(w)
        state = {}
        for name, entry, heads in source.items:
            values = dequantize(entry.read(), entry.dtype, entry.shape) \
                if entry.dtype not in ("F32",) else np.array(entry.read())
            if heads is not None:
                values = permute_rows(values, heads, inverse=True)
            state[name] = torch.from_numpy(np.ascontiguousarray(values))
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].numpy()
    got = load_gguf_model(out)([ids]).numpy()[0]
    assert np.abs(got - ref).max() <= 1e-4
