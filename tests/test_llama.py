"""Llama-family parity with transformers (torch CPU) on tiny random models of each family.

Each family is built with transformers' own config class, its parameters are all drawn
at random (biases and norm weights included, so every switch matters), and it is saved
with save_pretrained(safe_serialization=True); ember loads the directory.
"""
import numpy as np
import pytest

from helpers import missing, require

import ember
from ember.errors import EmberError, FormatError, ShapeMismatch
from ember.generation import generate
from ember.models.llama import LlamaForCausalLM
from ember.models.llama_config import LlamaConfig

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=96, max_position_embeddings=128)
PROMPT_LEN = 20   # longer than the Mistral window below


def _configs(T):
    return {
        # GQA 4/2, llama3 rope scaling (original context shorter than the prompt), tied embeddings
        "llama": T.LlamaConfig(**TINY, tie_word_embeddings=True, rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
        # biases everywhere, linear rope scaling, MHA
        "llama_bias": T.LlamaConfig(**dict(TINY, num_key_value_heads=4), attention_bias=True,
                                    mlp_bias=True, rope_parameters={
                                        "rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}),
        "mistral": T.MistralConfig(**TINY, head_dim=16, sliding_window=6),
        "qwen2": T.Qwen2Config(**TINY),
        "gemma": T.GemmaConfig(**TINY, head_dim=16),
        "phi3": T.Phi3Config(**TINY, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    }


FAMILIES = ["llama", "llama_bias", "mistral", "qwen2", "gemma", "phi3"]


@pytest.fixture(scope="module")
def torch():
    return require("torch")


@pytest.fixture(scope="module")
def transformers():
    return require("transformers")


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, torch, transformers, tmp_path_factory):
    """(name, transformers model, saved directory)."""
    name = request.param
    cfg = _configs(transformers)[name]
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1.0 + 0.3 * torch.randn_like(p) if name != "gemma" else 0.3 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.15)
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path, safe_serialization=True)
    return name, model, str(path)


def _prompt(vocab, n, seed):
    return np.random.default_rng(seed).integers(3, vocab, n).tolist()


def _tolerance(device):
    return 1e-4 if device.kind == "cpu" else 1e-3


def test_config_reads_each_family(family):
    name, hf, path = family
    cfg = LlamaConfig.from_file(path)
    assert cfg.model_type == hf.config.model_type
    assert cfg.num_key_value_heads == hf.config.num_key_value_heads
    assert cfg.tie_word_embeddings == hf.config.tie_word_embeddings


def test_last_token_logits_match_transformers(family, device, torch):
    name, hf, path = family
    ids = _prompt(hf.config.vocab_size, PROMPT_LEN, 0)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0, -1].numpy()
    model = LlamaForCausalLM.from_pretrained(path, device=device)
    got = model([ids], last_only=True).numpy()[0, -1]
    assert np.abs(got - ref).max() <= _tolerance(device), np.abs(got - ref).max()


def test_cached_decoding_matches_full_logits(family, torch):
    """Prefill 8 tokens, then feed one at a time: every position's logits equal the
    reference's full-sequence logits (the cache and the causal/sliding masks agree)."""
    name, hf, path = family
    ids = _prompt(hf.config.vocab_size, PROMPT_LEN, 1)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
    model = LlamaForCausalLM.from_pretrained(path)
    cache = model.new_cache(1, 32)
    first = model([ids[:8]], cache=cache).numpy()[0]
    np.testing.assert_allclose(first, ref[:8], atol=1e-4, rtol=0)
    for i in range(8, PROMPT_LEN):
        step = model([[ids[i]]], cache=cache).numpy()[0, -1]
        assert np.abs(step - ref[i]).max() <= 1e-4, (i, np.abs(step - ref[i]).max())
    assert cache.length == PROMPT_LEN


def test_greedy_generation_matches_transformers(family, device, torch):
    name, hf, path = family
    ids = _prompt(hf.config.vocab_size, 7, 2)
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          do_sample=False, max_new_tokens=32, eos_token_id=None, pad_token_id=0)
    ref = out[0, len(ids):].tolist()
    model = LlamaForCausalLM.from_pretrained(path, device=device)
    got = generate(model, ids, max_new_tokens=32, stop_token_ids=())
    assert len(ref) == 32
    assert got == ref


def test_batched_left_padded_prompts_match_each_alone(family, device):
    name, hf, path = family
    model = LlamaForCausalLM.from_pretrained(path, device=device)
    prompts = [_prompt(hf.config.vocab_size, n, 10 + n) for n in (9, 3, 6)]
    together = generate(model, prompts, max_new_tokens=12, stop_token_ids=())
    alone = [generate(model, p, max_new_tokens=12, stop_token_ids=()) for p in prompts]
    assert together == alone


def test_batched_generation_stops_rows_independently(family):
    """A row that emits a stop token ends there; the others go on."""
    name, hf, path = family
    model = LlamaForCausalLM.from_pretrained(path)
    prompts = [_prompt(hf.config.vocab_size, n, 20 + n) for n in (5, 8)]
    free = [generate(model, p, max_new_tokens=10, stop_token_ids=()) for p in prompts]
    stop = free[0][3]
    got = generate(model, prompts, max_new_tokens=10, stop_token_ids=[stop])
    expect = []
    for row in free:
        cut = row.index(stop) + 1 if stop in row else len(row)
        expect.append(row[:cut])
    assert got == expect


def test_kv_cache_is_written_in_place(family):
    name, hf, path = family
    model = LlamaForCausalLM.from_pretrained(path)
    cache = model.new_cache(1, 12)
    storages = [id(k.storage) for k in cache.keys] + [id(v.storage) for v in cache.values]
    before = cache.keys[0].numpy().copy()
    model([_prompt(hf.config.vocab_size, 4, 3)], cache=cache)
    model([[5]], cache=cache)
    after = cache.keys[0].numpy()
    assert storages == [id(k.storage) for k in cache.keys] + [id(v.storage) for v in cache.values]
    assert np.any(after[:, :, :5] != before[:, :, :5]) and np.all(after[:, :, 5:] == 0)
    with pytest.raises(EmberError, match="overflows the cache of 12"):
        model([_prompt(hf.config.vocab_size, 8, 4)], cache=cache)


def test_a_pass_over_many_positions_gives_freed_memory_back_before_the_head(
    family, monkeypatch
):
    name, hf, path = family
    model = LlamaForCausalLM.from_pretrained(path)
    calls = []
    head = model.logits
    monkeypatch.setattr(model.device.backend, "release_free_memory", lambda: calls.append("free"))
    monkeypatch.setattr(model, "logits", lambda x: (calls.append("head"), head(x))[1])
    cache = model.new_cache(1, 12)
    model([_prompt(hf.config.vocab_size, 4, 3)], cache=cache, last_only=True)
    assert calls == ["free", "head"]
    model([[5]], cache=cache)  # a decode step frees nothing worth a trim
    assert calls == ["free", "head", "head"]


def test_decode_allocates_no_new_gpu_buffers(family):
    """A WebGPU property (buffer pooling), so this test opens the wgpu device itself."""
    name, hf, path = family
    try:
        device = ember.Device.wgpu()
    except ember.DeviceError as exc:
        missing("the wgpu device", str(exc))
    stats = getattr(device.backend, "memory_stats", None)
    if stats is None:
        missing("memory_stats() on this backend", f"{device} has none")
    model = LlamaForCausalLM.from_pretrained(path, device=device)
    cache = model.new_cache(1, 40)
    model([_prompt(hf.config.vocab_size, 8, 5)], cache=cache, last_only=True).numpy()
    for t in (4, 5, 6):   # warm-up: the pool learns the decode step's sizes
        model([[t]], cache=cache, last_only=True).numpy()
    created = stats()["buffers_created"]
    for t in (7, 8, 9, 10, 11):
        model([[t]], cache=cache, last_only=True).numpy()
    assert stats()["buffers_created"] == created


def test_unknown_model_type_names_the_field(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_size": 8}')
    with pytest.raises(FormatError, match="model_type 'bert'"):
        LlamaConfig.from_file(str(tmp_path))


def test_checkpoint_shape_mismatch_names_the_tensor(family, tmp_path):
    name, hf, path = family
    import json
    import shutil
    for f in ("config.json", "model.safetensors"):
        shutil.copy(f"{path}/{f}", tmp_path / f)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ShapeMismatch, match="mlp"):
        LlamaForCausalLM.from_pretrained(str(tmp_path))


def test_attention_mask_shape_is_checked(family):
    name, hf, path = family
    model = LlamaForCausalLM.from_pretrained(path)
    with pytest.raises(ShapeMismatch, match="attention_mask"):
        model([[3, 4, 5]], attention_mask=np.ones((1, 4)))


def test_quantized_linear_matches_dequantized_weights():
    """QuantLinear computes x @ dequantize(w).T; checked against numpy on the dequantized weight."""
    gguf = require("gguf")
    from ember.io.quant import QTensor
    from ember.models.quant_layers import QuantLinear
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 64)).astype(np.float32)
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
    deq = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0)
    layer = QuantLinear(QTensor(raw, "Q8_0", w.shape))
    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    with ember.exact_cpu_products():  # 6 rows: x is not rounded to 16 bits (llvm_integer_gemm)
        got = layer(ember.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, x @ deq.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype_name,tol", [("f16", 1e-2), ("bf16", 8e-2)])
def test_half_precision_weights_stay_close(family, torch, dtype_name, tol):
    """Weights, cache and activations in f16/bf16 (masks with that dtype's lowest value,
    no overflow): last-token logits near the f32 reference, relative to the largest logit
    (measured: at most 0.27% for f16, 2.6% for bf16)."""
    name, hf, path = family
    ids = _prompt(hf.config.vocab_size, PROMPT_LEN, 6)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0, -1].numpy()
    model = LlamaForCausalLM.from_pretrained(path, dtype=ember.as_dtype(dtype_name))
    cache = model.new_cache(1, PROMPT_LEN)
    assert cache.keys[0].dtype.name == dtype_name
    model([ids[:-1]], cache=cache)
    got = model([ids[-1:]], cache=cache).to(ember.f32).numpy()[0, -1]
    assert np.isfinite(got).all()
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max(), np.abs(got - ref).max() / np.abs(ref).max()


def test_config_reads_legacy_fields_as_transformers_does(transformers):
    """Old-style files: top-level rope_theta/rope_scaling, Gemma's legacy hidden_act="gelu"."""
    legacy = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
              "rope_theta": 500000.0, "rope_scaling": {
                  "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    ours = LlamaConfig.from_dict(legacy)
    ref = transformers.LlamaConfig(**{k: v for k, v in legacy.items() if k != "model_type"})
    assert ours.rope_theta == ref.rope_parameters["rope_theta"]
    assert ours.rope_scaling["rope_type"] == ref.rope_parameters["rope_type"] == "llama3"
    gemma = {"model_type": "gemma", "hidden_size": 64, "num_attention_heads": 4, "hidden_act": "gelu"}
    assert LlamaConfig.from_dict(gemma).hidden_act == transformers.GemmaConfig(
        hidden_size=64, num_attention_heads=4, hidden_act="gelu").hidden_act


def test_tensor_copy_writes_into_a_view(device):
    """Tensor.copy_ (the KV cache's write): only the view's elements change, src may be
    strided or broadcast; a shape that cannot broadcast names both tensors."""
    base = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    dst = ember.tensor(base, device=device)
    src = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    dst.narrow(2, 2, 4).copy_(ember.tensor(src, device=device).transpose(1, 2))
    expect = base.copy()
    expect[:, :, 2:6] = src.transpose(0, 2, 1)
    np.testing.assert_array_equal(dst.numpy(), expect)
    dst.narrow(1, 0, 1).copy_(ember.tensor([7.0], device=device))
    expect[:, 0] = 7.0
    np.testing.assert_array_equal(dst.numpy(), expect)
    with pytest.raises(ShapeMismatch, match=r"copy_: src \[3\]"):
        dst.narrow(2, 0, 2).copy_(ember.zeros(3, device=device))


def test_the_mlps_widest_activation_is_gone_before_its_down_projection(family):
    """The gate/up product (2 x intermediate wide, a prompt's largest array) is freed
    before the down projection runs, gated or not: held through it, it had topped a
    prompt's memory."""
    import weakref

    _, _, path = family
    model = LlamaForCausalLM.from_pretrained(path)
    mlp = model.layers[0].mlp
    widest, alive_at_down = [], []
    mlp.gate_up_proj.register_forward_hook(lambda m, i, out: widest.append(weakref.ref(out)))
    down = mlp.down_proj.forward

    def checked(x, *args, **kwargs):
        alive_at_down.append(widest[-1]() is not None)
        return down(x, *args, **kwargs)

    mlp.down_proj.forward = checked
    model([_prompt(model.config.vocab_size, 9, seed=4)], last_only=True)
    assert alive_at_down == [False]
