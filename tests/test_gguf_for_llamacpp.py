"""What llama.cpp needs of a GGUF that `ember convert` / `ember quantize` write from a
Hugging Face Llama directory, checked with the `gguf` package's reader (llama.cpp itself is
a benchmark peer: benchmarks/llamacpp_roundtrip.py runs these files in it).

1-D tensors (norms) must be F32: llama.cpp's CPU kernels multiply f32 activations by f32
norm weights only and abort the process on an F16 or BF16 one ("binary_op: unsupported
types: dst: f32, src0: f32, src1: bf16"), which is what a bf16 checkpoint converted as-is,
or any model converted with --dtype f16, used to give."""
import numpy as np
import pytest
from ember.cli import main
from helpers import require

torch = require("torch")
gguf = require("gguf")
transformers = require("transformers")

F32, F16, BF16 = (gguf.GGMLQuantizationType[t] for t in ("F32", "F16", "BF16"))


@pytest.fixture(scope="module")
def bf16_llama(tmp_path_factory):
    """A tiny bf16 Llama checkpoint (norm weights away from 1, so a cast would show)."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32,
                                   tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    model = model.to(torch.bfloat16)
    d = tmp_path_factory.mktemp("hf")
    model.save_pretrained(d)
    return d, {k: v.float().numpy() for k, v in model.state_dict().items()}


def _tensors(path):
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


@pytest.mark.parametrize("dtype, matrices", [(None, BF16), ("f16", F16), ("bf16", BF16),
                                             ("f32", F32)])
def test_norms_are_f32_whatever_the_matrices_are(bf16_llama, tmp_path, dtype, matrices):
    d, sd = bf16_llama
    out = tmp_path / "m.gguf"
    assert main(["convert", str(d), str(out), "--quiet"] + (["--dtype", dtype] if dtype else [])) == 0
    tensors = _tensors(out)
    one_d = {n: t for n, t in tensors.items() if len(t.shape) == 1}
    assert len(one_d) == 2 * 2 + 1   # two norms per layer and the final one
    assert {t.tensor_type for t in one_d.values()} == {F32}
    assert {t.tensor_type for n, t in tensors.items() if n not in one_d} == {matrices}
    # bf16 -> f32 is exact: the norms hold the checkpoint's values
    np.testing.assert_array_equal(np.asarray(tensors["blk.1.ffn_norm.weight"].data),
                                  sd["model.layers.1.post_attention_layernorm.weight"])
    np.testing.assert_array_equal(np.asarray(tensors["output_norm.weight"].data),
                                  sd["model.norm.weight"])


def test_quantized_file_keeps_norms_f32(bf16_llama, tmp_path):
    d, _ = bf16_llama
    out = tmp_path / "q.gguf"
    assert main(["quantize", str(d), str(out), "--type", "Q8_0", "--quiet"]) == 0
    tensors = _tensors(out)
    assert {t.tensor_type for t in tensors.values() if len(t.shape) == 1} == {F32}
    assert tensors["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
