"""Gemma 2/3 from GGUF: tiny random models written as llama.cpp's converter writes them
(its tensor names and metadata keys, 1 added to every norm weight, Gemma 3's implicit
every-6th-layer-global pattern and local rope base), the architecture registry's refusal
of an unknown architecture, the reader's error for a file joined from too few parts, the
Gemma tokenizer conventions, and the real Gemma 3 270M Q4_K_M against transformers
loading the same file.
"""
import json
import os
import shutil

import numpy as np
import pytest

from helpers import require
from packaged_fixtures import gemma3_gguf  # noqa: F401  (session fixture)

from ember.errors import FormatError
from ember.generation import generate
from ember.io.gguf import GGUFFile
from ember.models.gemma import GemmaForCausalLM
from ember.models.gguf_llama import ARCHITECTURES, config_from_gguf, load_gguf_model

TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, vocab_size=96, max_position_embeddings=128, sliding_window=5,
            query_pre_attn_scalar=16)  # llama.cpp scales by the head size
# Gemma 3 in GGUF: layers 0-4 slide, layer 5 is global; local base 10,000 (implicit).
GEMMA3 = dict(TINY, num_hidden_layers=6, rope_parameters={
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
GEMMA2 = dict(TINY, num_hidden_layers=3, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
              rope_parameters={"rope_type": "default", "rope_theta": 500.0})


@pytest.fixture(scope="module")
def torch():
    return require("torch")


@pytest.fixture(scope="module")
def gguf():
    return require("gguf")


def _tiny_vocab(n):
    """A Gemma-style SentencePiece vocabulary of n pieces: (pieces, token types)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "\u2581"] + list(letters)
    pieces += ["\u2581" + c for c in letters] + ["th", "he", "\u2581th", "\u2581the", "at", "\u2581cat"]
    types = [3, 3, 3, 2] + [1] * (len(pieces) - 4)
    pieces += [f"<unused{i}>" for i in range(n - len(pieces))]
    return pieces, types + [5] * (n - len(types))


def _write_gemma_gguf(path, hf, arch, gguf, qtypes=None):
    """`hf` written as llama.cpp writes Gemma 2/3 (f32 tensors, or those named in `qtypes`,
    {GGUF name suffix: gguf.GGMLQuantizationType}, quantized by gguf's own encoder), with
    a tokenizer."""
    cfg = hf.config
    sd = {k: v.detach().float().numpy() for k, v in hf.state_dict().items()}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_sliding_window(cfg.sliding_window)
    if arch == "gemma3":
        full = cfg.rope_parameters["full_attention"]
        w.add_rope_freq_base(full["rope_theta"])
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(full["factor"])
    else:
        w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
        w.add_float32(f"{arch}.attn_logit_softcapping", cfg.attn_logit_softcapping)
        w.add_float32(f"{arch}.final_logit_softcapping", cfg.final_logit_softcapping)
    pieces, types = _tiny_vocab(cfg.vocab_size)
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_types(types)
    w.add_token_scores([-float(i) for i in range(len(pieces))])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)

    def put(name, arr):
        qtype = next((t for k, t in (qtypes or {}).items() if name.endswith(f"{k}.weight")), None)
        if qtype is not None:
            w.add_tensor(name, gguf.quants.quantize(np.ascontiguousarray(arr), qtype), raw_dtype=qtype)
            return
        w.add_tensor(name, np.ascontiguousarray(arr + 1.0 if name.endswith("norm.weight") else arr))

    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    put("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(cfg.num_hidden_layers):
        for hf_name, g_name in names.items():
            key = f"model.layers.{i}.{hf_name}.weight"
            if key in sd:
                put(f"blk.{i}.{g_name}.weight", sd[key])
    put("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module", params=["gemma3", "gemma2"])
def tiny_gguf(request, torch, gguf, tmp_path_factory):
    """(arch, transformers model, GGUF path)."""
    transformers = require("transformers")
    arch = request.param
    cfg = (transformers.Gemma3TextConfig(**GEMMA3) if arch == "gemma3"
           else transformers.Gemma2Config(**GEMMA2))
    torch.manual_seed(99)
    hf = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_((0.3 if "norm" in name else 0.15) * torch.randn_like(p))
    path = tmp_path_factory.mktemp(arch) / f"tiny-{arch}.gguf"
    _write_gemma_gguf(path, hf, arch, gguf)
    return arch, hf, str(path)


@pytest.fixture(scope="module")
def tiny_quantized_gemma3(torch, gguf, tmp_path_factory):
    """A tiny Gemma 3 GGUF quantized as a Q4_K_M file mixes types: q and k Q5_0, v Q8_0
    (a ConcatLinear), the rest Q8_0."""
    transformers = require("transformers")
    torch.manual_seed(7)
    hf = transformers.AutoModelForCausalLM.from_config(
        transformers.Gemma3TextConfig(**GEMMA3)).eval()
    q = gguf.GGMLQuantizationType
    qtypes = {"attn_q": q.Q5_0, "attn_k": q.Q5_0, "attn_v": q.Q8_0, "attn_output": q.Q8_0,
              "ffn_gate": q.Q8_0, "ffn_up": q.Q8_0, "ffn_down": q.Q8_0}
    path = tmp_path_factory.mktemp("gemma3q") / "tiny-gemma3-q.gguf"
    _write_gemma_gguf(path, hf, "gemma3", gguf, qtypes)
    return str(path)


def _decode_logits(model, ids, steps, fused, monkeypatch=None, taken=None):
    """The logits of `steps` greedy decode steps after `ids`, through the fused step or
    the modules' path; `taken` (a list) gets whether each fused step ran fused."""
    from ember.models.llama_step import DecodeStep

    if taken is not None:
        run = DecodeStep.run

        def counted(self, *args):
            out = run(self, *args)
            taken.append(out is not None)
            return out

        monkeypatch.setattr(DecodeStep, "run", counted)
    model.fused_decode = fused
    cache = model.new_cache(1, len(ids) + steps + 1)
    logits = model([ids], cache=cache, last_only=True).numpy()
    out = []
    for _ in range(steps):
        logits = model([[int(logits[0, -1].argmax())]], cache=cache, last_only=True).numpy()
        out.append(logits)
    return out


def test_a_fused_gemma3_decode_step_has_the_modules_bits(tiny_quantized_gemma3, device,
                                                         monkeypatch):
    """llama_step.DecodeStep takes Gemma 3's layers (q/k norms, four norms a layer, the
    mixed-type q/k/v joined): its logits equal the modules' bit for bit, inside the
    sliding window (steps 1-2 of a 3-token prompt, window 5) and past it, where the
    window's mask sends every step back to the modules."""
    from ember.models.llama_step import DecodeStep
    from ember.models.quant_layers import ConcatLinear

    model = load_gguf_model(tiny_quantized_gemma3, device=device)
    assert isinstance(model.layers[0].self_attn.qkv_proj, ConcatLinear)
    assert DecodeStep.of(model) is not None
    ids, taken = [5, 17, 40], []
    fused = _decode_logits(model, ids, 6, True, monkeypatch, taken)
    assert taken == [True, True, False, False, False, False]
    for a, b in zip(fused, _decode_logits(model, ids, 6, False), strict=True):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_gemma2_capped_scores_keep_the_modules_path(torch, gguf, tmp_path):
    from ember.models.llama_step import DecodeStep

    transformers = require("transformers")
    torch.manual_seed(8)
    hf = transformers.AutoModelForCausalLM.from_config(transformers.Gemma2Config(**GEMMA2)).eval()
    q8 = gguf.GGMLQuantizationType.Q8_0
    qtypes = {n: q8 for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                              "ffn_up", "ffn_down")}
    _write_gemma_gguf(tmp_path / "g2.gguf", hf, "gemma2", gguf, qtypes)
    model = load_gguf_model(str(tmp_path / "g2.gguf"))
    assert DecodeStep.of(model) is None  # quantized, but capped scores are not the fused op's
    for layer in model.layers:  # uncapped, still no: Gemma 2 has no q/k norms
        layer.self_attn.softcap = None
    assert DecodeStep.of(model) is None


def test_real_gemma3_fused_decode_steps_have_the_modules_bits(gemma3_gguf, monkeypatch):  # noqa: F811
    model = load_gguf_model(gemma3_gguf)
    ids, taken = [2, 818, 5279, 529, 7001, 563], []
    fused = _decode_logits(model, ids, 3, True, monkeypatch, taken)
    assert taken == [True] * 3
    for a, b in zip(fused, _decode_logits(model, ids, 3, False), strict=True):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_gguf_config_fills_in_what_llama_cpp_leaves_implicit(tiny_gguf):
    arch, hf, path = tiny_gguf
    cfg = config_from_gguf(GGUFFile(path))
    assert cfg.layer_types == hf.config.layer_types
    assert "full_attention" in cfg.layer_types and "sliding_attention" in cfg.layer_types
    assert cfg.norm_plus_one is False and cfg.qk_norm == (arch == "gemma3")
    assert cfg.attn_logit_softcapping == hf.config.attn_logit_softcapping


def test_tiny_gguf_logits_match_transformers(tiny_gguf, device, torch):
    arch, hf, path = tiny_gguf
    ids = np.random.default_rng(3).integers(0, 96, 16).tolist()  # past the window of 5
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
    model = load_gguf_model(path, device=device)
    assert isinstance(model, GemmaForCausalLM)
    got = model([ids]).numpy()[0]
    tol = 1e-4 if device.kind == "cpu" else 1e-3
    assert np.abs(got - ref).max() <= tol, np.abs(got - ref).max()


def test_cli_generates_gemma_from_gguf_and_from_a_directory(tiny_gguf, tmp_path, capsys, torch):
    """`ember generate --gguf` and `--model DIR` reach the Gemma model through the
    registries: the greedy tokens are transformers' for the same prompt."""
    from ember.cli import main
    from ember.models.gguf_llama import tokenizer_from_gguf
    from ember.models.gguf_tokenizer import tokenizer_json_from_metadata
    arch, hf, path = tiny_gguf
    ids = tokenizer_from_gguf(path).encode("the cat").ids
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=6, eos_token_id=1,
                          attention_mask=torch.ones(1, len(ids), dtype=torch.long), pad_token_id=0)
    want = out[0, len(ids):].tolist()
    folder = tmp_path / "dir"
    hf.save_pretrained(folder, safe_serialization=True)
    tj = tokenizer_json_from_metadata(GGUFFile(path).metadata, path)
    tj.pop("_eos_token_id")
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    for source in (["--gguf", path], ["--model", str(folder)]):
        code = main(["generate", *source, "--max-new-tokens", "6", "--json", "the cat"])
        printed = capsys.readouterr().out
        assert code == 0, printed
        assert json.loads(printed)["token_ids"] == want, source


def test_unknown_architecture_lists_the_registry(tmp_path, gguf):
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(FormatError) as info:
        load_gguf_model(str(path))
    msg = str(info.value)
    assert "general.architecture 'mamba'" in msg and str(path) in msg
    assert "gemma3" in ARCHITECTURES and "llama" in ARCHITECTURES
    assert f"(supported: {', '.join(ARCHITECTURES)})" in msg


def test_file_joined_from_too_few_parts_names_where_it_ends(tiny_gguf, tmp_path):
    """Three of four parts: the header is whole, the tensor data stops short."""
    arch, hf, path = tiny_gguf
    cut = tmp_path / "joined.gguf"
    shutil.copy(path, cut)
    size = os.path.getsize(cut) * 3 // 4
    os.truncate(cut, size)
    with pytest.raises(FormatError) as info:
        load_gguf_model(str(cut))
    msg = str(info.value)
    assert str(cut) in msg and f"ends at offset {size}" in msg


def test_gemma_tokenizer_conventions_match_transformers(gguf):
    """Pieces of spaces stored as spaces, no merges and scores out of merge order, no
    space prefix: ember's tokenizer equals transformers' reading of the same metadata."""
    ggml = require("transformers.integrations.gguf.gguf_tokenizer_mapping")
    from ember.models.gguf_tokenizer import tokenizer_from_metadata
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "\n", "  ", "   ", "\u2581", "a", "b", "c",
              "t", "h", "e", "\u2581t", "he", "\u2581the", "ab", "abc", "bc", "\u2581a", "ca",
              "\u2581b"]
    pieces += [f"<0x{i:02X}>" for i in range(256)]
    types = [3, 3, 3, 2, 4, 4, 4] + [1] * (len(pieces) - 7 - 256) + [6] * 256
    scores = [0.0] * 7 + [-float(i % 5) for i in range(len(pieces) - 7)]  # not the merge order
    md = {"general.architecture": "gemma3", "tokenizer.ggml.model": "llama",
          "tokenizer.ggml.tokens": pieces, "tokenizer.ggml.token_type": types,
          "tokenizer.ggml.scores": scores, "tokenizer.ggml.bos_token_id": 2,
          "tokenizer.ggml.eos_token_id": 1, "tokenizer.ggml.unknown_token_id": 3,
          "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_space_prefix": False}
    ours = tokenizer_from_metadata(md, "tiny.gguf")
    ref, _ = ggml.convert_gguf_tokenizer("gemma3", {
        "tokens": pieces, "token_type": types, "scores": scores, "tokenizer_type": "llama"})
    for text in ["the abc", "  the\n\nabcab  ca b", "   bcab", "thé", "    a", "     the"]:
        want = ref.encode(text, add_special_tokens=False).ids
        assert ours.encode(text, add_special_tokens=False).ids == want, text
        assert ours.decode(want) == ref.decode(want), text


def test_real_gemma3_270m_matches_transformers_on_the_same_gguf(gemma3_gguf, torch):  # noqa: F811
    """Gemma's own weights (fetched, never committed): ember dequantizing to f32 gives
    transformers' logits within 1e-4 of their spread and the same greedy tokens; the
    tokenizer's ids for the prompt are the ones fed to both."""
    require("accelerate")  # transformers needs it to load a GGUF
    transformers = require("transformers")
    from ember.models.gguf_llama import tokenizer_from_gguf
    folder, name = os.path.split(gemma3_gguf)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                           dtype=torch.float32).eval()
    ids = tokenizer_from_gguf(gemma3_gguf).encode("The capital of France is").ids
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
        out = hf.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=8,
                          attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          eos_token_id=None, pad_token_id=0)
    model = load_gguf_model(gemma3_gguf, dequantize=True)
    got = model([ids]).numpy()[0]
    spread = float(ref.max() - ref.min())
    assert np.abs(got - ref).max() <= 1e-4 * spread, np.abs(got - ref).max() / spread
    assert generate(model, ids, max_new_tokens=8, stop_token_ids=()) == out[0, len(ids):].tolist()
