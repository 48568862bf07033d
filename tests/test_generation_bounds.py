"""Generation is bounded by the model, not by the request (issue 10, points 2, 7, 14):
a tiny random Llama with a 64-position context refuses a longer prompt naming both
lengths, sizes its cache by the context whatever max_new_tokens says, stops at the
context's end with the finish reason "context"; NaN logits and bad sampling settings are
clean errors, from the API and from `ember generate` / `ember chat` (non-zero exit, no
traceback)."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from reference_bpe import train_byte_level_bpe

import ember
from ember.errors import EmberError
from ember.generation import GenerationConfig, TextGeneration, generate
from ember.io.safetensors import save_safetensors
from ember.models.llama import LlamaForCausalLM

CONTEXT = 64
CONFIG = dict(model_type="llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
              max_position_embeddings=CONTEXT, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2)
TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
CORPUS = ["the quick brown fox jumps over the lazy dog", "once upon a time a tiny model"] * 8


def _weights(seed, nan=False):
    rng = np.random.default_rng(seed)
    h, i, v = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]
    kv = h // CONFIG["num_attention_heads"] * CONFIG["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,),
              "lm_head.weight": (v, h)}
    for n in range(CONFIG["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes.update({p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                       p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                       p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                       p + "mlp.down_proj.weight": (h, i)})
    out = {}
    for name, shape in shapes.items():
        w = (1.0 + 0.1 * rng.standard_normal(shape) if "norm" in name
             else 0.2 * rng.standard_normal(shape)).astype(np.float32)
        if nan and name == "model.norm.weight":
            w[3] = np.nan   # as a NaN eps or rope base would: every logit NaN
        out[name] = ember.from_numpy(w)
    return out


def _save(path, nan=False):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(CONFIG))
    save_safetensors(_weights(0, nan), str(path / "model.safetensors"))
    (path / "tokenizer.json").write_text(train_byte_level_bpe(CORPUS, vocab_size=300).to_str())
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return str(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return _save(tmp_path_factory.mktemp("bounds") / "m")


@pytest.fixture(scope="module")
def nan_dir(tmp_path_factory):
    return _save(tmp_path_factory.mktemp("bounds_nan") / "m", nan=True)


@pytest.fixture(scope="module")
def model(model_dir):
    return LlamaForCausalLM.from_pretrained(model_dir)


class _Caches:
    """Records the caches a run allocates."""

    def __init__(self, model):
        self.model, self.made = model, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def new_cache(self, batch, max_len):
        cache = self.model.new_cache(batch, max_len)
        self.made.append(cache)
        return cache

    def __call__(self, *args, **kwargs):
        return self.model(*args, **kwargs)


def _prompt(n, seed=0):
    return np.random.default_rng(seed).integers(3, CONFIG["vocab_size"], n).tolist()


# --- the context bounds everything --------------------------------------------------------
def test_a_prompt_past_the_context_is_refused_naming_both_lengths(model):
    with pytest.raises(EmberError, match=r"65 tokens.*context of 64"):
        generate(model, _prompt(65), max_new_tokens=1)
    with pytest.raises(EmberError, match=r"65 positions.*context of 64"):
        model([_prompt(65)])
    assert len(generate(model, _prompt(64), max_new_tokens=5)) == 0   # fits, no room left


def test_a_huge_max_new_tokens_allocates_a_context_sized_cache(model):
    spy = _Caches(model)
    out, reason = generate(spy, _prompt(10), max_new_tokens=10**9, stop_token_ids=(),
                           return_finish_reasons=True)
    (cache,) = spy.made
    kv, hd = CONFIG["num_key_value_heads"], CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
    assert cache.max_len == CONTEXT
    assert all(k.shape == (1, kv, CONTEXT, hd) for k in cache.keys + cache.values)
    assert cache.nbytes() == 2 * CONFIG["num_hidden_layers"] * kv * CONTEXT * hd * 4
    # The sequence fills the context exactly: 10 + 54 = 64 tokens, and says why it ended.
    assert len(out) == CONTEXT - 10 and reason == "context"
    assert model.new_cache(1, 10**9).max_len == CONTEXT


def test_each_device_bounds_the_cache_and_stops_at_the_context(model_dir, nan_dir, device):
    on_device = _Caches(LlamaForCausalLM.from_pretrained(model_dir, device=device))
    out, reason = generate(on_device, _prompt(20), max_new_tokens=10**9, stop_token_ids=(),
                           return_finish_reasons=True)
    (cache,) = on_device.made
    assert cache.max_len == CONTEXT and cache.keys[0].device == device
    assert len(out) == CONTEXT - 20 and reason == "context"
    assert out == generate(LlamaForCausalLM.from_pretrained(model_dir), _prompt(20),
                           max_new_tokens=10**9, stop_token_ids=())
    broken = LlamaForCausalLM.from_pretrained(nan_dir, device=device)
    for settings in ({}, {"temperature": 0.5, "seed": 2}):   # argmax on the device, or rows read
        with pytest.raises(EmberError, match="NaN"):
            generate(broken, _prompt(5), max_new_tokens=3, **settings)


def test_the_finish_reason_tells_context_from_length(model):
    _, reason = generate(model, _prompt(10), max_new_tokens=54, stop_token_ids=(),
                         return_finish_reasons=True)
    assert reason == "length"
    _, reasons = generate(model, [_prompt(10), _prompt(4, 1)], max_new_tokens=200,
                          stop_token_ids=(), return_finish_reasons=True)
    assert reasons == ["context", "context"]


def test_left_truncation_keeps_the_newest_tokens(model):
    long = _prompt(100, 3)
    got = generate(model, long, max_new_tokens=1, truncate="left", stop_token_ids=())
    assert got == generate(model, long[-(CONTEXT - 1):], max_new_tokens=1, stop_token_ids=())


def test_a_smaller_max_len_caps_the_context(model_dir):
    small = LlamaForCausalLM.from_pretrained(model_dir, max_len=16)
    assert small.context_length == 16 and small.new_cache(1).max_len == 16
    with pytest.raises(EmberError, match="17 tokens.*context of 16"):
        generate(small, _prompt(17), max_new_tokens=1)
    with pytest.raises(EmberError, match="max_len"):
        LlamaForCausalLM.from_pretrained(model_dir, max_len=0)


def test_long_inputs_run_in_query_tiles_with_the_same_logits(model, monkeypatch):
    """Past PREFILL_TILE positions the forward goes through the cache a tile at a time
    (masks and scores [tile, length], never [t, t]); the logits do not change."""
    from ember.models import llama
    ids = [_prompt(40, 5), [0] * 9 + _prompt(31, 6)]
    mask = [[1] * 40, [0] * 9 + [1] * 31]
    whole = model(ids, attention_mask=mask).numpy()
    cache = model.new_cache(2, 48)
    whole_cached = model(ids, cache=cache, attention_mask=mask, last_only=True).numpy()
    monkeypatch.setattr(llama, "PREFILL_TILE", 8)
    tiled = model(ids, attention_mask=mask).numpy()
    cache = model.new_cache(2, 48)
    tiled_cached = model(ids, cache=cache, attention_mask=mask, last_only=True).numpy()
    assert tiled.shape == whole.shape == (2, 40, CONFIG["vocab_size"]) and cache.length == 40
    real = np.asarray(mask, dtype=bool)   # a padding slot's logits mean nothing
    np.testing.assert_allclose(tiled[real], whole[real], atol=1e-5, rtol=0)
    np.testing.assert_allclose(tiled_cached, whole_cached, atol=1e-5, rtol=0)
    assert tiled_cached.shape == (2, 1, CONFIG["vocab_size"])


def test_text_generation_reports_the_context_end(model):
    class Letters:
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(97 + i % 26) for i in ids)

    gen = TextGeneration(model, Letters(), _prompt(60), max_new_tokens=100, stop_token_ids=())
    gen.run()
    assert gen.stop_reason == "context" and len(gen.token_ids) == 4


# --- NaN logits and bad settings ----------------------------------------------------------
@pytest.mark.parametrize("settings", [{}, {"temperature": 0.8, "seed": 1},
                                      {"repetition_penalty": 1.2}])
def test_nan_logits_stop_with_an_error(nan_dir, settings):
    broken = LlamaForCausalLM.from_pretrained(nan_dir)
    with pytest.raises(EmberError, match="NaN"):
        generate(broken, _prompt(5), max_new_tokens=4, **settings)


BAD = [("temperature", math.nan), ("temperature", -1.0), ("temperature", math.inf),
       ("repetition_penalty", math.nan), ("repetition_penalty", math.inf),
       ("repetition_penalty", 0.0), ("repetition_penalty", -2.0), ("top_p", 0.0),
       ("top_p", 1.5), ("top_p", math.nan), ("top_k", -1), ("top_k", 2.5),
       ("max_new_tokens", -1), ("max_new_tokens", 3.0), ("seed", -1), ("truncate", "right")]


@pytest.mark.parametrize("name,value", BAD)
def test_bad_settings_name_the_parameter_and_value(model, name, value):
    with pytest.raises(EmberError, match=rf"{name} .*{value!r}|{name} .*{value}"):
        GenerationConfig(**{name: value})
    with pytest.raises(EmberError, match=name):
        generate(model, [5, 6], **{name: value})


# --- the commands -------------------------------------------------------------------------
def _cli(args, stdin=""):
    """`python -m ember.cli ...` in a fresh process: (exit code, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True,
                          text=True, input=stdin, timeout=300)
    return done.returncode, done.stdout, done.stderr


def _main(argv, capsys, stdin=""):
    import io

    from ember.cli import main
    old = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        rc = main(argv)
    finally:
        sys.stdin = old
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_stops_at_the_context_and_says_so(model_dir, capsys):
    rc, out, err = _main(["generate", "--model", model_dir, "--max-new-tokens", "200",
                          "--json", "the quick brown fox"], capsys)
    got = json.loads(out)
    assert rc == 0 and got["finish_reason"] == "context"
    assert "context of 64 positions" in err


def test_cli_refuses_a_long_prompt_unless_asked_to_truncate(model_dir, capsys):
    words = "the quick brown fox jumps " * 30
    rc, out, err = _main(["generate", "--model", model_dir, "--max-new-tokens", "3", words],
                         capsys)
    assert rc == 1 and "context of 64" in err and "--truncate-prompt" in err
    assert "Traceback" not in err
    rc, out, err = _main(["generate", "--model", model_dir, "--max-new-tokens", "3",
                          "--truncate-prompt", "--json", words], capsys)
    assert rc == 0 and len(json.loads(out)["token_ids"]) == 1   # 63 kept: room for one


@pytest.mark.parametrize("flag,value", [("--temperature", "nan"), ("--repetition-penalty", "inf"),
                                        ("--repetition-penalty", "0"), ("--top-p", "1.5"),
                                        ("--top-k", "-1"), ("--max-new-tokens", "-1")])
def test_cli_bad_settings_exit_non_zero_naming_them(model_dir, capsys, flag, value):
    name = flag[2:].replace("-", "_")
    for verb in ("generate", "chat"):
        rc, out, err = _main([verb, "--model", model_dir, flag, value, "hello"][:-1 if verb == "chat" else None],
                             capsys, stdin="hello\n")
        assert rc == 1 and name in err and value in err and "Traceback" not in err, (verb, err)


def test_cli_chat_says_when_a_reply_fills_the_context(model_dir, capsys):
    rc, out, err = _main(["chat", "--model", model_dir, "--max-new-tokens", "500"], capsys,
                         stdin="hello there\n/exit\n")
    assert rc == 0 and "context of 64 positions" in err


def test_cli_nan_logits_exit_non_zero_without_a_traceback(nan_dir):
    rc, out, err = _cli(["generate", "--model", nan_dir, "--max-new-tokens", "4", "hello"])
    assert rc == 1 and "NaN" in err and "Traceback" not in err
    rc, out, err = _cli(["generate", "--model", nan_dir, "--max-new-tokens", "4", "--top-p",
                         "nan", "hello"])
    assert rc == 1 and "top_p" in err and "Traceback" not in err


@pytest.mark.parametrize("settings", [{"temperature": 0.7}, {"temperature": 1.3, "top_k": 5},
                                      {"temperature": 0.9, "top_p": 0.6},
                                      {"temperature": 1.0, "top_k": 8, "top_p": 0.8}])
def test_draws_follow_the_processors_distribution(settings):
    """sampling.draw_tokens (on weights, as the device computes them) lands on each token
    as often as softmax(process_logits(row)) says, and never outside its support."""
    from ember.generation import process_logits, sampling
    config = GenerationConfig(**settings)
    row = (np.random.default_rng(4).standard_normal(24) * 2).astype(np.float32).tolist()
    processed = np.asarray(process_logits([row], [[]], config)[0], dtype=np.float64)
    p = np.exp(processed - processed.max())
    p /= p.sum()
    generator = ember.Generator(9)
    draws = [sampling.draw_tokens([sampling.weights(row, config.temperature)], config,
                                  generator)[0] for _ in range(3000)]
    freq = np.bincount(draws, minlength=24) / 3000
    assert set(np.nonzero(freq)[0]) <= set(np.nonzero(p)[0])
    assert np.abs(freq - p).max() < 0.035, (freq, p)
