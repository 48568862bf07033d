"""Llama models from GGUF files written with the `gguf` package's GGUFWriter, as
llama.cpp lays them out (tensor names, metadata keys, q/k permuted for interleaved rope).

References: transformers on torch CPU for the f32 file; for quantized files, the same
transformers model with every weight replaced by the `gguf` package's dequantization of
what was written (so ember's quantized matmul is checked, not the quantizer's error).
"""
import copy
import json

import numpy as np
import pytest

import ember

from ggml_encode import quantize_q4_k, write_llama_gguf
from helpers import require
from reference_bpe import train_byte_level_bpe

from ember import exact_cpu_products
from ember.errors import FormatError, ShapeMismatch
from ember.generation import generate
from ember.io.gguf import GGUFFile
from ember.io.quant import QTensor, dequantize
from ember.models.gguf_llama import (config_from_gguf, device_weight_bytes, load_gguf_model,
                                     tokenizer_from_gguf)
from wgpu_device import wgpu  # noqa: F401  (fixture)

CORPUS = ["The quick brown fox jumps over the lazy dog.", "Ünïcödé text: naïve café, 東京, emoji 🙂!",
          "def generate(model, prompt):\n    return model(prompt)\n", "1234567890 + 42 = 1234567932",
          "Once upon a time there was a small model that generated text."] * 4
TEXTS = ["The lazy fox", "naïve café 東京 🙂", "  spaces\tand\nnewlines ", "return 42"]


@pytest.fixture(scope="module")
def torch():
    return require("torch")


@pytest.fixture(scope="module")
def gguf():
    return require("gguf")


@pytest.fixture(scope="module")
def hf_tokenizer():
    return train_byte_level_bpe(CORPUS, vocab_size=320)


@pytest.fixture(scope="module")
def hf_llama(torch, hf_tokenizer):
    transformers = require("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=hf_tokenizer.get_vocab_size(),
        max_position_embeddings=128, tie_word_embeddings=False, rms_norm_eps=1e-5,
        bos_token_id=hf_tokenizer.token_to_id("<s>"), eos_token_id=hf_tokenizer.token_to_id("</s>"))
    torch.manual_seed(7)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.04)
    return model


def _write(tmp_path_factory, hf_llama, hf_tokenizer, qtypes, tag):
    path = tmp_path_factory.mktemp("gguf") / f"tiny-{tag}.gguf"
    seen = write_llama_gguf(path, hf_llama, qtypes, hf_tokenizer.to_str())
    return str(path), seen


@pytest.fixture(scope="module")
def f32_file(tmp_path_factory, hf_llama, hf_tokenizer):
    return _write(tmp_path_factory, hf_llama, hf_tokenizer, {}, "f32")


QUANT = {
    "Q8_0": {"linear": "Q8_0", "embed": "Q8_0", "output": "Q8_0"},
    "Q4_K": {"linear": "Q4_K", "embed": "Q8_0", "output": "Q4_K"},
    # mixed types in one layer, as llama.cpp's Q4_K_M does (q/k/v cannot be stacked)
    "mixed": {"linear": "Q4_K", "v": "Q8_0", "embed": "Q8_0", "output": "Q8_0"},
    # halves: kept as F16 QTensors where the CPU computes with them (llvm_f16), dense elsewhere
    "F16": {"linear": "F16", "embed": "F16", "output": "F16"},
}


@pytest.fixture(scope="module", params=sorted(QUANT))
def quant_file(request, tmp_path_factory, hf_llama, hf_tokenizer):
    path, seen = _write(tmp_path_factory, hf_llama, hf_tokenizer, QUANT[request.param], request.param)
    return request.param, path, seen


@pytest.fixture(scope="module", params=sorted(k for k in QUANT if k != "F16"))
def block_quant_file(request, tmp_path_factory, hf_llama, hf_tokenizer):
    """The files of ggml block types (what WebGPU's kernel keeps quantized)."""
    path, seen = _write(tmp_path_factory, hf_llama, hf_tokenizer, QUANT[request.param], request.param)
    return request.param, path, seen


def _reference_from(hf_llama, seen, torch):
    """The transformers model with the weights ember reads (dequantized, q/k un-permuted)."""
    ref = copy.deepcopy(hf_llama)
    cfg = ref.config
    sd = ref.state_dict()

    def unpermute(w, n_heads):
        out, inp = w.shape
        return w.reshape(n_heads, out // n_heads // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)

    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    tails = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
             "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    with torch.no_grad():
        for gname, value in seen.items():
            if gname in names:
                hname = names[gname]
            else:
                _, i, tail, _ = gname.split(".")
                hname = f"model.layers.{i}.{tails[tail]}.weight"
                if tail == "attn_q":
                    value = unpermute(value, cfg.num_attention_heads)
                elif tail == "attn_k":
                    value = unpermute(value, cfg.num_key_value_heads)
            sd[hname].copy_(torch.from_numpy(np.ascontiguousarray(value)))
    return ref


def _prompt(vocab, n=12, seed=0):
    return np.random.default_rng(seed).integers(2, vocab, n).tolist()


def _hf_greedy(model, ids, torch, n=32):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


def test_q4_k_encoder_decodes_with_the_reference(gguf):
    """The test-side Q4_K encoder writes valid blocks: gguf's decoder reads back values
    within half a quantization step, and ember's dequantization equals gguf's exactly."""
    w = np.random.default_rng(3).standard_normal((8, 512)).astype(np.float32)
    raw = quantize_q4_k(w)
    ref = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q4_K).reshape(w.shape)
    step = (w.reshape(-1, 32).max(1) - np.minimum(w.reshape(-1, 32).min(1), 0)) / 15
    assert np.all(np.abs(ref - w).reshape(-1, 32).max(1) <= step * 0.75 + 1e-3)
    np.testing.assert_array_equal(dequantize(raw, "Q4_K", w.shape), ref)


def test_f32_gguf_matches_transformers(f32_file, hf_llama, torch):
    """Name mapping, metadata and the interleaved rope of permuted q/k rows."""
    path, _ = f32_file
    model = load_gguf_model(path)
    assert model.config.rope_interleaved and model.config.num_key_value_heads == 2
    ids = _prompt(hf_llama.config.vocab_size)
    with torch.no_grad():
        ref = hf_llama(torch.tensor([ids])).logits[0, -1].numpy()
    got = model([ids], last_only=True).numpy()[0, -1]
    assert np.abs(got - ref).max() <= 1e-4
    assert generate(model, ids, max_new_tokens=32, stop_token_ids=()) == _hf_greedy(hf_llama, ids, torch)


def test_quantized_gguf_matches_its_dequantized_reference(quant_file, hf_llama, torch):
    qname, path, seen = quant_file
    model = load_gguf_model(path)
    attn = model.layers[0].self_attn
    if qname == "mixed":
        assert attn.qkv_proj.v_proj.qweight.ggml_type.name == "Q8_0"   # one qkv_proj over mixed types
        assert attn.qkv_proj.q_proj.qweight.ggml_type.name == "Q4_K"
    elif qname == "F16" and not ember.Device.cpu().backend.computes_quantized(1):
        assert attn.qkv_proj.weight.dtype == ember.f32  # dequantized: no kernel for halves
    else:
        assert attn.qkv_proj.qweight.ggml_type.name == QUANT[qname]["linear"]
    ref_model = _reference_from(hf_llama, seen, torch)
    ids = _prompt(hf_llama.config.vocab_size, seed=1)
    with torch.no_grad():
        ref = ref_model(torch.tensor([ids])).logits[0, -1].numpy()
    with exact_cpu_products():  # x in f32 through every product, as the reference has it
        exact = model([ids], last_only=True).numpy()[0, -1]
    assert np.abs(exact - ref).max() <= 1e-4
    # by default a prompt's products round x to 16 bits where the CPU has the integer
    # kernels (llvm_integer_gemm): within wgpu's bound, and the same greedy tokens
    got = model([ids], last_only=True).numpy()[0, -1]
    assert np.abs(got - ref).max() <= 1e-3
    assert generate(model, ids, max_new_tokens=32, stop_token_ids=()) == _hf_greedy(ref_model, ids, torch)


def test_quantized_greedy_agreement_with_f32(quant_file, f32_file, hf_llama, capsys):
    """Reports how many of 32 greedy tokens the quantized file shares with f32 over 4
    prompts (random tiny models have flat logits, so greedy paths part early), and
    bounds the logit error against the logits' spread."""
    qname, path, _ = quant_file
    qmodel, fmodel = load_gguf_model(path), load_gguf_model(f32_file[0])
    same = total = first = 0
    rel = []
    for seed in range(4):
        ids = _prompt(hf_llama.config.vocab_size, seed=100 + seed)
        a = generate(qmodel, ids, max_new_tokens=32, stop_token_ids=())
        b = generate(fmodel, ids, max_new_tokens=32, stop_token_ids=())
        same += sum(x == y for x, y in zip(a, b, strict=True))
        total += len(b)
        first += a[0] == b[0]
        lq = qmodel([ids], last_only=True).numpy()[0, -1]
        lf = fmodel([ids], last_only=True).numpy()[0, -1]
        rel.append(np.abs(lq - lf).max() / lf.std())
    with capsys.disabled():
        print(f"\n[gguf {qname}] greedy token agreement with f32: {same}/{total} "
              f"({100.0 * same / total:.0f}%), first token {first}/4; "
              f"max logit error / logit std: {max(rel):.3f}")
    # A loose sanity bound: random tiny models amplify weight noise about 13x (measured:
    # 0.5% Q8_0 / 7.8% Q4_K per-weight noise gave 0.07 / 0.9 of the logit std). The exact
    # check is test_quantized_gguf_matches_its_dequantized_reference.
    assert max(rel) < {"Q8_0": 0.15, "Q4_K": 2.0, "mixed": 2.0, "F16": 0.05}[qname]


def test_q4_k_weights_take_under_0_3_of_f32(tmp_path_factory, hf_llama, hf_tokenizer, f32_file):
    path, _ = _write(tmp_path_factory, hf_llama, hf_tokenizer,
                     {"linear": "Q4_K", "embed": "Q4_K", "output": "Q4_K"}, "q4k-all")
    q = load_gguf_model(path).weight_bytes()
    f = load_gguf_model(f32_file[0]).weight_bytes()
    assert q <= 0.3 * f, (q, f)


def test_gguf_on_each_device_matches_cpu(quant_file, hf_llama, device, monkeypatch):
    """Off the CPU, quantized weights run on the device's quantized kernel (WebGPU) or are
    dequantized in row chunks by the contract's default qmatmul (chunks made small here
    so every weight takes several)."""
    import ember.backends.composites as composites
    monkeypatch.setattr(composites, "QMATMUL_CHUNK_BYTES", 64 * 1024)
    qname, path, _ = quant_file
    ids = _prompt(hf_llama.config.vocab_size, seed=2)
    cpu = load_gguf_model(path)([ids], last_only=True).numpy()[0, -1]
    got = load_gguf_model(path, device=device)([ids], last_only=True).numpy()[0, -1]
    tol = 1e-4 if device.kind == "cpu" else 1e-3
    assert np.abs(got - cpu).max() <= tol


def test_gguf_on_wgpu_keeps_weights_quantized(block_quant_file, hf_llama, wgpu):
    """On WebGPU the linear layers keep their GGUF blocks (dequantized inside the matmul):
    the same greedy tokens as the CPU, and device memory for the weights is about the
    file's tensor bytes (f32 would be 3.8x for Q8_0, 7.1x for Q4_K)."""
    qname, path, _ = block_quant_file
    f = GGUFFile(path)
    quantized = sum(int(f.tensors[n].nbytes) for n in f.tensors
                    if n != "token_embd.weight" and f.tensors[n].ggml_type not in (0, 1, 30)
                    and len(f.tensors[n].shape) == 2)
    be = wgpu.backend
    before = be.memory_stats()["bytes_in_use"]
    model = load_gguf_model(f, device=wgpu)
    held = device_weight_bytes(model)
    grown = be.memory_stats()["bytes_in_use"] - before
    # every quantized linear weight is on the device at its raw size (+ at most 7 bytes of
    # padding each); all the model's buffers (norms, rope tables) add little to that
    assert quantized <= held <= quantized + 8 * 64, (held, quantized)
    assert grown <= 1.25 * quantized, (grown, quantized)
    # The host keeps no stacked copy (fused q/k/v, gate/up) next to the device's: what it
    # holds of the weights are views of the file's memory map.
    from ember.io.quant import StackedQTensor
    from ember.models.quant_layers import QuantLinear, _owns_its_memory
    layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    kept = [m for m in layers if isinstance(m.qweight, QTensor)]
    assert layers and not any(_owns_its_memory(m.qweight.raw) for m in kept)
    stacked = [m for m in layers if isinstance(m.qweight, StackedQTensor)]
    assert len(kept) + len(stacked) == len(layers)
    assert stacked or qname == "mixed"   # same-type q/k/v and gate/up are stacked
    assert not any(_owns_its_memory(p.raw) for m in stacked for p in m.qweight.parts)
    if stacked:   # the stack is views of the file, so the layer still runs on the CPU too
        x = np.random.default_rng(5).standard_normal((2, stacked[0].in_features), np.float32)
        dense = np.concatenate([p.dequantize() for p in stacked[0].qweight.parts])
        got = stacked[0](ember.tensor(x)).numpy()
        assert np.abs(got - x @ dense.T).max() <= 1e-4 * max(1.0, np.abs(x @ dense.T).max())
    cpu = load_gguf_model(f)
    for seed in range(3):
        ids = _prompt(hf_llama.config.vocab_size, seed=40 + seed)
        want = generate(cpu, ids, max_new_tokens=16, stop_token_ids=())
        got = generate(model, ids, max_new_tokens=16, stop_token_ids=())
        assert got == want, (qname, seed)


def test_gguf_in_f16_on_each_device(quant_file, hf_llama, device):
    """dtype=f16: quantized layers and the host-side embedding hand back the model's dtype
    (the matmul itself runs in f32), close to the f32 logits."""
    import ember
    _, path, _ = quant_file
    ids = _prompt(hf_llama.config.vocab_size, seed=5)
    ref = load_gguf_model(path)([ids], last_only=True).numpy()[0, -1]
    out = load_gguf_model(path, device=device, dtype=ember.f16)([ids], last_only=True)
    assert out.dtype is ember.f16
    got = out.to(ember.f32).numpy()[0, -1]
    assert np.abs(got - ref).max() <= 0.05 * ref.std()


def test_tokenizer_from_gguf_matches_the_source_tokenizer(f32_file, hf_tokenizer):
    tok = tokenizer_from_gguf(f32_file[0])
    for text in TEXTS + CORPUS[:5]:
        ref = hf_tokenizer.encode(text).ids
        assert tok.encode(text).ids == ref, text
        assert tok.decode(ref) == hf_tokenizer.decode(ref)


def test_config_reads_llama_cpp_keys(f32_file, hf_llama):
    cfg = config_from_gguf(GGUFFile(f32_file[0]))
    h = hf_llama.config
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.vocab_size) == (
        h.hidden_size, h.intermediate_size, h.num_hidden_layers, h.num_attention_heads,
        h.num_key_value_heads, h.vocab_size)
    assert cfg.rms_norm_eps == pytest.approx(h.rms_norm_eps)
    assert cfg.eos_token_ids == [h.eos_token_id]


def test_non_llama_architecture_is_refused(tmp_path, gguf):
    path = tmp_path / "bert.gguf"
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(FormatError, match="general.architecture 'bert'"):
        load_gguf_model(str(path))


def test_missing_metadata_key_is_named(tmp_path, gguf):
    path = tmp_path / "partial.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_embedding_length(32)
    w.add_head_count(2)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(FormatError, match="llama.feed_forward_length"):
        load_gguf_model(str(path))


def _sentencepiece_style(tokenizers):
    """A Llama-2-style tokenizer: '▁' for spaces, byte-fallback <0xNN> pieces, BPE merges;
    returns (the reference tokenizer, tokens, token types, merges)."""
    base = tokenizers.Tokenizer(tokenizers.models.BPE())
    base.normalizer = tokenizers.normalizers.Sequence(
        [tokenizers.normalizers.Prepend("\u2581"), tokenizers.normalizers.Replace(" ", "\u2581")])
    base.pre_tokenizer = tokenizers.pre_tokenizers.Split("\u2581", "merged_with_next")
    base.train_from_iterator(CORPUS[:5], tokenizers.trainers.BpeTrainer(vocab_size=200))
    learned = json.loads(base.to_str())["model"]
    specials = ["<unk>", "<s>", "</s>"]
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    pieces = [p for p, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1])]
    tokens = specials + byte_pieces + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    merges = [m if isinstance(m, str) else " ".join(m) for m in learned["merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    ref = tokenizers.Tokenizer(tokenizers.models.BPE(
        vocab=vocab, merges=[tuple(m.split(" ")) for m in merges], unk_token="<unk>",
        byte_fallback=True, fuse_unk=True))
    ref.add_special_tokens(specials)
    ref.normalizer = base.normalizer
    ref.decoder = tokenizers.decoders.Sequence([
        tokenizers.decoders.Replace("\u2581", " "), tokenizers.decoders.ByteFallback(),
        tokenizers.decoders.Fuse(), tokenizers.decoders.Strip(" ", 1, 0)])
    ref.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 1)])
    return ref, tokens, types, merges


@pytest.mark.parametrize("with_merges", [True, False])
def test_sentencepiece_style_gguf_tokenizer(tmp_path, gguf, with_merges):
    """tokenizer.ggml.model "llama": byte fallback for unseen characters, bos added; without
    stored merges they are derived from the scores (here: later pieces score lower)."""
    tokenizers = require("tokenizers")
    ref, tokens, types, merges = _sentencepiece_style(tokenizers)
    path = tmp_path / "sp.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)])
    if with_merges:
        w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tok = tokenizer_from_gguf(str(path))
    unseen = "unseen: ß 漢字 €"
    assert any(tokens[i].startswith("<0x") for i in ref.encode(unseen).ids)
    for text in TEXTS + CORPUS[:5] + [unseen]:
        ids = ref.encode(text).ids
        assert tok.encode(text).ids == ids, text
        assert tok.decode(ids) == ref.decode(ids)


def test_cli_generate_from_gguf_matches_transformers(f32_file, hf_llama, hf_tokenizer, torch, capsys):
    """`ember generate --gguf FILE --json`: tokenizer and weights both from the file."""
    from ember.cli import main
    prompt = "The lazy fox"
    ids = hf_tokenizer.encode(prompt).ids
    ref = _hf_greedy(hf_llama, ids, torch, n=10)
    eos = hf_tokenizer.token_to_id("</s>")
    if eos in ref:
        ref = ref[:ref.index(eos) + 1]
    assert main(["generate", "--gguf", f32_file[0], "--device", "cpu", "--max-new-tokens", "10",
                 "--json", prompt]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["token_ids"] == ref
    assert got["text"] == hf_tokenizer.decode([t for t in ref if t != eos])


def test_llama3_rope_scaling_from_rope_freqs(tmp_path, torch):
    """llama.cpp keeps llama3 rope scaling as a rope_freqs.weight tensor of divisors."""
    transformers = require("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=128,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8})
    torch.manual_seed(5)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.3)
    scaled = hf.model.rotary_emb.inv_freq.double().numpy()
    plain = 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16.0)
    assert not np.allclose(scaled, plain)      # the scaling changes these frequencies
    path = tmp_path / "llama3.gguf"
    write_llama_gguf(path, hf, {}, rope_freqs=plain / scaled)
    model = load_gguf_model(str(path))
    ids = _prompt(64, n=24, seed=3)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0, -1].numpy()
    assert np.abs(model([ids], last_only=True).numpy()[0, -1] - ref).max() <= 1e-4


def test_cli_chat_from_gguf_uses_its_template(tmp_path, hf_llama, hf_tokenizer, torch, monkeypatch, capsys):
    """`ember chat --gguf FILE`: tokenizer.chat_template and tokenizer from the file."""
    import io
    import sys
    transformers = require("transformers")
    template = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n"
                "{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}")
    path = tmp_path / "chat.gguf"
    write_llama_gguf(path, hf_llama, {}, hf_tokenizer.to_str(), chat_template=template)
    ref_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=hf_tokenizer, bos_token="<s>",
                                                   eos_token="</s>", chat_template=template)
    prompt = ref_tok.apply_chat_template([{"role": "user", "content": "Hi there"}], tokenize=False,
                                         add_generation_prompt=True)
    ids = hf_tokenizer.encode(prompt).ids
    eos = hf_tokenizer.token_to_id("</s>")
    new = _hf_greedy(hf_llama, ids, torch, n=6)
    new = new[:new.index(eos)] if eos in new else new
    from ember.cli import main
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hi there\n"))
    assert main(["chat", "--gguf", str(path), "--device", "cpu", "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out == hf_tokenizer.decode(new) + "\n"


@pytest.mark.parametrize("batch", [1, 2])
def test_a_fused_decode_step_has_the_modules_bits(quant_file, hf_llama, device, batch):
    """llama_step.DecodeStep makes the modules' backend calls with their arguments: each
    decode step's logits equal the modules' path bit for bit, on every device, mixed
    types whose q/k/v are concatenated (ConcatLinear) included (a model it does not
    take, dense Linears, keeps that path)."""
    from ember.models.llama_step import DecodeStep
    from ember.models.quant_layers import ConcatLinear, QuantLinear

    qname, path, _ = quant_file
    model = load_gguf_model(path, device=device)
    # F16 weights off the CPU are dense Linears
    qkv = model.layers[0].self_attn.qkv_proj
    takes = isinstance(qkv, (QuantLinear, ConcatLinear))
    assert takes == (qname != "F16" or device.kind == "cpu")
    assert (DecodeStep.of(model) is not None) == takes
    ids = [_prompt(hf_llama.config.vocab_size, seed=3 + i) for i in range(batch)]

    def steps(fused):
        model.fused_decode = fused
        cache = model.new_cache(batch, 12 + 6)
        logits = model(ids, cache=cache, last_only=True).numpy()
        out = []
        for _ in range(5):
            tok = [[int(t)] for t in logits[:, -1].argmax(-1)]
            logits = model(tok, cache=cache, last_only=True).numpy()
            out.append(logits)
        return out

    for fused, modules in zip(steps(True), steps(False), strict=True):
        np.testing.assert_array_equal(fused.view(np.uint32), modules.view(np.uint32))


def test_a_cache_of_another_shape_takes_the_modules_path_and_its_error(quant_file):
    """A cache of another model never reaches the fused step's backend calls: the
    modules' path runs, and its check names what is wrong."""
    from ember.models.kv_cache import KVCache

    qname, path, _ = quant_file
    model = load_gguf_model(path)
    cfg = model.config
    wrong = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, 20, cfg.head_dim + 2)
    model([[3, 4, 5]], cache=model.new_cache(1, 20), last_only=True)  # a good cache works
    shape = rf"\[1, {cfg.num_key_value_heads}, 20, {cfg.head_dim + 2}\]"
    with pytest.raises(ShapeMismatch, match=rf"attention_step: qkv .* \(the cache's {shape}\)"):
        model([[3]], cache=wrong, last_only=True)
