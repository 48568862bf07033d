"""Gemma 2 and Gemma 3 parity with transformers (torch CPU) on tiny random models.

Each is built with transformers' own config class so that every Gemma switch is on and
matters within a 20-token prompt: a sliding window of 6 beside full layers, two rotary
bases (and linear scaling on the global one) for Gemma 3, soft caps small enough to bend
random scores and logits for Gemma 2, a query_pre_attn_scalar unlike the head size. All
parameters are random (norm weights included), saved as safetensors directories.
"""
import json

import numpy as np
import pytest

from helpers import record_attention_steps, require

from ember.errors import FormatError
from ember.generation import generate
from ember.models.gemma import GemmaForCausalLM
from ember.models.gemma_config import GemmaConfig

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=96, max_position_embeddings=128,
            sliding_window=6, query_pre_attn_scalar=24,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"])
PROMPT_LEN = 20  # past the window of 6


def _configs(T):
    return {
        "gemma3": T.Gemma3TextConfig(**TINY, rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}),
        "gemma2": T.Gemma2Config(**TINY, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                                 rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
    }


@pytest.fixture(scope="module")
def torch():
    return require("torch")


@pytest.fixture(scope="module", params=["gemma3", "gemma2"])
def family(request, torch, tmp_path_factory):
    """(name, transformers model, saved directory)."""
    transformers = require("transformers")
    name = request.param
    torch.manual_seed(4321)
    model = transformers.AutoModelForCausalLM.from_config(_configs(transformers)[name]).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(0.3 * torch.randn_like(p) if "norm" in pname else 0.15 * torch.randn_like(p))
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path, safe_serialization=True)
    return name, model, str(path)


def _prompt(vocab, n, seed):
    return np.random.default_rng(seed).integers(3, vocab, n).tolist()


def test_config_reads_each_switch(family):
    name, hf, path = family
    cfg = GemmaConfig.from_file(path)
    assert cfg.layer_types == hf.config.layer_types
    assert cfg.query_pre_attn_scalar == 24 and cfg.sliding_window == 6
    assert cfg.qk_norm == (name == "gemma3")
    assert cfg.attn_logit_softcapping == hf.config.attn_logit_softcapping
    assert cfg.final_logit_softcapping == hf.config.final_logit_softcapping
    if name == "gemma3":
        assert (cfg.rope_theta, cfg.rope_local_theta) == (10000.0, 100.0)
        assert cfg.rope_scaling["factor"] == 2.0


def test_logits_match_transformers(family, device, torch):
    """Every position (the window cuts in after 6) within 1e-4 on cpu, 1e-3 on wgpu."""
    name, hf, path = family
    ids = _prompt(hf.config.vocab_size, PROMPT_LEN, 0)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
    model = GemmaForCausalLM.from_pretrained(path, device=device)
    got = model([ids]).numpy()[0]
    tol = 1e-4 if device.kind == "cpu" else 1e-3
    assert np.abs(got - ref).max() <= tol, np.abs(got - ref).max()
    if name == "gemma2":  # the final cap is in force
        assert np.abs(ref).max() < 3.0 and np.abs(ref).max() > 1.5


def test_cached_decoding_matches_full_logits(family, torch):
    name, hf, path = family
    ids = _prompt(hf.config.vocab_size, PROMPT_LEN, 1)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
    model = GemmaForCausalLM.from_pretrained(path)
    cache = model.new_cache(1, 32)
    np.testing.assert_allclose(model([ids[:8]], cache=cache).numpy()[0], ref[:8], atol=1e-4, rtol=0)
    for i in range(8, PROMPT_LEN):
        step = model([[ids[i]]], cache=cache).numpy()[0, -1]
        assert np.abs(step - ref[i]).max() <= 1e-4, (i, np.abs(step - ref[i]).max())


def test_decode_steps_through_the_fused_step_keep_the_general_paths_bits(family, monkeypatch):
    """Gemma 3's q/k-normed heads go through attention_step (its sliding layers while
    their window holds the whole cache), Gemma 2's capped scores never: the same logits,
    bit for bit, as with the step turned off."""
    from ember.models.gemma import GemmaAttention

    name, hf, path = family
    model = GemmaForCausalLM.from_pretrained(path)
    ids = _prompt(hf.config.vocab_size, 4, 3)
    calls = record_attention_steps(monkeypatch, model.device.backend)

    def steps():
        cache = model.new_cache(1, 16)
        out = [model([ids], cache=cache).numpy()[0, -1]]
        for _ in range(6):  # positions 4 to 9: the window of 6 is passed on the way
            out.append(model([[int(out[-1].argmax())]], cache=cache).numpy()[0, -1])
        return np.stack(out)

    fused = steps()
    taken = list(calls)
    monkeypatch.setattr(GemmaAttention, "fuses_step", lambda self, tables: False)
    general = steps()
    np.testing.assert_array_equal(fused, general)
    assert calls == taken  # nothing more with the step off
    if name == "gemma2":
        assert taken == []
    else:  # the full layer at every step, the two sliding ones at positions 4 and 5
        assert taken == [4, 4, 4, 5, 5, 5, 6, 7, 8, 9]


def test_greedy_generation_matches_transformers(family, device, torch):
    name, hf, path = family
    ids = _prompt(hf.config.vocab_size, 7, 2)
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          do_sample=False, max_new_tokens=24, eos_token_id=None, pad_token_id=0)
    ref = out[0, len(ids):].tolist()
    model = GemmaForCausalLM.from_pretrained(path, device=device)
    got = generate(model, ids, max_new_tokens=24, stop_token_ids=())
    assert len(ref) == 24 and got == ref


def test_left_padded_batch_matches_each_alone(family):
    name, hf, path = family
    model = GemmaForCausalLM.from_pretrained(path)
    prompts = [_prompt(hf.config.vocab_size, n, 10 + n) for n in (9, 3)]
    together = generate(model, prompts, max_new_tokens=10, stop_token_ids=())
    assert together == [generate(model, p, max_new_tokens=10, stop_token_ids=()) for p in prompts]


def test_older_config_form_and_pattern(tmp_path):
    """Hub configs of Gemma 3 name rope_theta / rope_local_base_freq and a pattern."""
    d = dict(TINY, model_type="gemma3_text", num_hidden_layers=6, rope_theta=1e6,
             rope_local_base_freq=1e4, sliding_window_pattern=3)
    del d["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(d))
    cfg = GemmaConfig.from_file(str(tmp_path))
    assert cfg.layer_types == ["sliding_attention", "sliding_attention", "full_attention"] * 2
    assert (cfg.rope_theta, cfg.rope_local_theta) == (1e6, 1e4)
    assert [cfg.window_for_layer(i) for i in range(3)] == [6, 6, None]


def test_bad_config_names_the_field(tmp_path):
    d = dict(TINY, model_type="gemma2", sliding_window=None)
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(FormatError, match="sliding_window"):
        GemmaConfig.from_file(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps(dict(TINY, model_type="llama")))
    with pytest.raises(FormatError, match="model_type 'llama' is not a Gemma 2/3 model"):
        GemmaConfig.from_file(str(tmp_path))


def test_multimodal_gemma3_directory_runs_its_text_model(tmp_path, torch):
    """A Gemma3ForConditionalGeneration directory (model_type "gemma3", the text config
    nested, weights under language_model.*): its text logits match transformers'."""
    transformers = require("transformers")
    from ember.models.causal_lm import load_causal_lm
    text = dict(TINY)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  image_size=28, patch_size=14)
    cfg = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4)
    torch.manual_seed(7)
    hf = transformers.Gemma3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for pname, p in hf.named_parameters():
            p.copy_(0.3 * torch.randn_like(p) if "norm" in pname else 0.15 * torch.randn_like(p))
    hf.save_pretrained(tmp_path, safe_serialization=True)
    ids = _prompt(TINY["vocab_size"], 12, 5)
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([ids])).logits[0].numpy()
    model = load_causal_lm(str(tmp_path))
    assert isinstance(model, GemmaForCausalLM)
    got = model([ids]).numpy()[0]
    assert np.abs(got - ref).max() <= 1e-4, np.abs(got - ref).max()
