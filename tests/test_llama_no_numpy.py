"""The Llama family and generation without numpy, as in a browser page: a subprocess that
cannot import numpy runs them on the native WebGPU device, and its logits and greedy
tokens are compared with transformers (torch CPU) and with ember's numpy path.

Also: sampling.py (the processors, on Python lists) against numpy formulas."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers import ON_CI, missing, require

import ember
from ember.generation import GenerationConfig, sampling

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=96, max_position_embeddings=128)
FAMILIES = ["llama3_rope_tied", "mistral_window", "gemma", "phi3"]
PROMPTS = [[5, 17, 33, 8, 61, 2, 40, 12, 9, 70, 44, 3, 27, 81, 19, 50, 6, 38, 90, 11],
           [7, 29, 64, 15, 88]]   # the second is left-padded in the batch
NEW = 8

# Runs with numpy made unimportable; prints JSON: per model, last-token logits of the
# first prompt, greedy tokens for the padded batch, and the first prompt's greedy tokens
# through the async loop and the sync one.
CHILD = textwrap.dedent("""
    import asyncio, json, sys
    sys.modules["numpy"] = None
    import ember
    from ember.generation import generate, generate_steps_async
    from ember.models.llama import LlamaForCausalLM
    try:
        dev = ember.Device.wgpu()
    except ember.DeviceError as exc:
        print(json.dumps({"no_device": str(exc)}))
        sys.exit(0)
    paths, prompts, new = json.loads(sys.argv[1])
    out = {}
    for path in paths:
        model = LlamaForCausalLM.from_pretrained(path, device=dev)
        logits = model([prompts[0]], last_only=True).tolist()[0][-1]
        out[path] = {"logits": logits, "tokens": generate(model, prompts, max_new_tokens=new,
                                                          stop_token_ids=())}

        async def steps():   # the async readback, as a page's loop awaits it
            return [int(s[0]) async for s in generate_steps_async(
                model, prompts[0], max_new_tokens=new, stop_token_ids=())]
        out[path]["async"] = asyncio.run(steps())
        out[path]["sync"] = generate(model, prompts[0], max_new_tokens=new, stop_token_ids=())
    print(json.dumps(out))
""")


def _configs(T):
    return {
        "llama3_rope_tied": T.LlamaConfig(**TINY, tie_word_embeddings=True, rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}),
        "mistral_window": T.MistralConfig(**TINY, head_dim=16, sliding_window=6),
        "gemma": T.GemmaConfig(**TINY, head_dim=16),
        "phi3": T.Phi3Config(**TINY, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    }


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    torch = require("torch")
    transformers = require("transformers")
    out = {}
    for name, cfg in _configs(transformers).items():
        torch.manual_seed(7)
        model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "norm" in pname:
                    p.copy_(0.3 * torch.randn_like(p) + (0.0 if name == "gemma" else 1.0))
                else:
                    p.normal_(0.0, 0.15)
        path = str(tmp_path_factory.mktemp(name))
        model.save_pretrained(path, safe_serialization=True)
        out[name] = (model, path)
    return out


@pytest.fixture(scope="module")
def without_numpy(saved_models):
    paths = [path for _, path in saved_models.values()]
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps([paths, PROMPTS, NEW])],
                          capture_output=True, text=True, env=dict(os.environ))
    if done.returncode != 0:
        pytest.fail(f"the no-numpy run failed:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "no_device" in result:
        if ON_CI:
            pytest.fail(f"the native wgpu device is required under CI=true: {result['no_device']}")
        missing("the native wgpu device", result["no_device"])
    return result


@pytest.mark.parametrize("name", FAMILIES)
def test_logits_without_numpy_match_transformers(name, saved_models, without_numpy):
    torch = require("torch")
    model, path = saved_models[name]
    with torch.no_grad():
        expected = model(torch.tensor([PROMPTS[0]])).logits[0, -1].numpy()
    np.testing.assert_allclose(np.asarray(without_numpy[path]["logits"]), expected,
                               atol=1e-3, rtol=0)


@pytest.mark.parametrize("name", FAMILIES)
def test_padded_batch_greedy_without_numpy_matches_the_numpy_path(name, saved_models,
                                                                   without_numpy):
    from ember.generation import generate
    from ember.models.llama import LlamaForCausalLM
    _, path = saved_models[name]
    device = ember.Device.wgpu()   # the child opened it, so it exists here too
    model = LlamaForCausalLM.from_pretrained(path, device=device)
    expected = generate(model, PROMPTS, max_new_tokens=NEW, stop_token_ids=())
    assert without_numpy[path]["tokens"] == expected


@pytest.mark.parametrize("name", FAMILIES)
def test_async_loop_without_numpy_gives_the_sync_tokens(name, saved_models, without_numpy):
    result = without_numpy[saved_models[name][1]]
    assert result["async"] == result["sync"]
    assert len(result["sync"]) == NEW


def test_async_text_generation_streams_what_the_sync_one_does(saved_models):
    """With numpy (CPU): `async for` over TextGeneration gives the same deltas and ids."""
    import asyncio

    from ember.generation import TextGeneration
    from ember.models.llama import LlamaForCausalLM

    class Letters:   # a toy tokenizer: id i decodes to one letter
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(97 + i % 26) for i in ids)

    model = LlamaForCausalLM.from_pretrained(saved_models["gemma"][1], device="cpu")
    sync = TextGeneration(model, Letters(), PROMPTS[0], max_new_tokens=NEW, stop_token_ids=())
    deltas = list(sync)

    async def collect():
        gen = TextGeneration(model, Letters(), PROMPTS[0], max_new_tokens=NEW,
                             stop_token_ids=())
        return [d async for d in gen], gen.token_ids
    async_deltas, ids = asyncio.run(collect())
    assert async_deltas == deltas and ids == sync.token_ids and len(ids) == NEW


def _rows(seed, b=3, v=50):
    return np.random.default_rng(seed).normal(0, 2, (b, v)).astype(np.float32)


def _numpy_top_p(scores, p):
    """transformers' TopPLogitsWarper written with numpy (the mask it leaves)."""
    order = np.argsort(scores, axis=-1, kind="stable")
    sorted_scores = np.take_along_axis(scores, order, axis=-1)
    e = np.exp(sorted_scores - sorted_scores.max(-1, keepdims=True))
    remove = np.cumsum(e / e.sum(-1, keepdims=True), axis=-1) <= (1 - p)
    remove[:, -1] = False
    out = scores.copy()
    np.put_along_axis(out, order, np.where(remove, -np.inf, sorted_scores), axis=-1)
    return out


def test_list_processors_match_numpy_formulas():
    scores = _rows(1)
    history = [[1, 4, 4, 9], [], [49, 0]]
    want = scores.copy()
    for r, seen in enumerate(history):
        ids = np.unique(np.asarray(seen, dtype=np.int64))
        s = want[r, ids]
        want[r, ids] = np.where(s < 0, s * np.float32(1.3), s / np.float32(1.3))
    got = sampling.apply_repetition_penalty(scores.tolist(), history, 1.3)
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), want)
    for k in (1, 5, 49):
        kth = np.partition(scores, -k, axis=-1)[:, -k][:, None]
        got = sampling.apply_top_k(scores.tolist(), k)
        np.testing.assert_array_equal(np.asarray(got), np.where(scores < kth, -np.inf, scores))
    for p in (0.05, 0.5, 0.9):
        got = sampling.apply_top_p(scores.tolist(), p)
        np.testing.assert_array_equal(np.isinf(np.asarray(got)), np.isinf(_numpy_top_p(scores, p)))


def test_list_greedy_and_sampling_choose_like_numpy():
    scores = _rows(2)
    history = [[], [], []]
    greedy = GenerationConfig(max_new_tokens=1)
    got = sampling.choose_tokens(scores.tolist(), history, greedy, ember.Generator(0))
    assert got == np.argmax(scores, axis=-1).tolist()
    # A draw keeps to the tokens top-k leaves, and a seed repeats it.
    sample = GenerationConfig(max_new_tokens=1, temperature=0.7, top_k=3)
    gen_a, gen_b = ember.Generator(5), ember.Generator(5)
    picks = [sampling.choose_tokens(scores.tolist(), history, sample, gen_a) for _ in range(20)]
    again = [sampling.choose_tokens(scores.tolist(), history, sample, gen_b) for _ in range(20)]
    assert picks == again
    top3 = [set(np.argsort(r)[-3:].tolist()) for r in scores]
    assert all(t in top3[i] for row in picks for i, t in enumerate(row))
