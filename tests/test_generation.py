"""ember.generation: logits processors against transformers', seeded sampling against
numpy's softmax, stop tokens and strings, streaming text deltas, chat templates against
transformers' apply_chat_template, and the `ember generate` / `ember chat` commands."""
import io
import json
import sys

import numpy as np
import pytest

from helpers import require
from reference_bpe import train_byte_level_bpe

import ember
from ember.errors import EmberError
from ember.generation import (ChatTemplate, GenerationConfig, IncrementalDecoder, StopStrings,
                              TextGeneration, apply_repetition_penalty, apply_temperature,
                              apply_top_k, apply_top_p, generate)

CORPUS = ["The quick brown fox jumps over the lazy dog.", "naïve café, 東京, emoji 🙂!",
          "Once upon a time there was a tiny model.", "Hello world. Hello there. STOP here."] * 4
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}"
            "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


# --- a scripted model: logits chosen by the test ----------------------------------------------
class _Cache:
    def __init__(self, batch, max_len):
        self.batch, self.max_len, self.length, self.steps = batch, max_len, 0, 0


class ScriptedModel:
    """Emits `script[i]` at step i (as a one-hot logit), or fixed `logits` every step."""

    class config:
        eos_token_ids = [0]

    context_length = 4096   # the most positions a run may fill

    def __init__(self, vocab, script=None, logits=None):
        self.vocab, self.script, self.logits = vocab, script, logits
        self.calls = []

    def new_cache(self, batch, max_len):
        return _Cache(batch, max_len)

    def __call__(self, ids, cache=None, attention_mask=None, last_only=False):
        ids = np.asarray(ids)
        self.calls.append(ids.shape)
        b, t = ids.shape
        k = cache.steps          # the script restarts with each generation (each cache)
        cache.steps += 1
        cache.length += t
        if self.logits is not None:
            row = np.broadcast_to(self.logits, (b, self.vocab))
        else:
            row = np.full((b, self.vocab), -10.0, np.float32)
            row[:, self.script[min(k, len(self.script) - 1)]] = 10.0
        return ember.from_numpy(np.ascontiguousarray(row, dtype=np.float32).reshape(b, 1, self.vocab))


@pytest.fixture(scope="module")
def torch():
    return require("torch")


@pytest.fixture(scope="module")
def hf_tok():
    return train_byte_level_bpe(CORPUS, vocab_size=300)


@pytest.fixture(scope="module")
def tok(hf_tok):
    from ember.tokenizers import Tokenizer
    return Tokenizer.from_str(hf_tok.to_str())


# --- processors -----------------------------------------------------------------------------------
def test_processors_match_transformers(torch):
    lp = require("transformers.generation.logits_process")
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((3, 50)).astype(np.float32) * 3
    history = rng.integers(0, 50, (3, 12))
    ts, th = torch.from_numpy(scores.copy()), torch.from_numpy(history)
    ref = lp.RepetitionPenaltyLogitsProcessor(1.3)(th, ts.clone()).numpy()
    np.testing.assert_array_equal(apply_repetition_penalty(scores, history.tolist(), 1.3), ref)
    ref = lp.TemperatureLogitsWarper(0.7)(th, ts.clone()).numpy()
    np.testing.assert_allclose(apply_temperature(scores, 0.7), ref, rtol=1e-6)
    for k in (1, 5, 49):
        ref = lp.TopKLogitsWarper(k)(th, ts.clone()).numpy()
        np.testing.assert_array_equal(apply_top_k(scores, k), ref)
    for p in (0.05, 0.5, 0.9):
        ref = lp.TopPLogitsWarper(p)(th, ts.clone()).numpy()
        np.testing.assert_array_equal(apply_top_p(scores, p), ref)


def test_sampling_frequencies_follow_softmax():
    """2,000 seeded draws at temperature 0.8 land on each token about as often as
    numpy's softmax(logits / 0.8) says; top-p never draws outside the nucleus."""
    logits = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0], np.float32)
    model = ScriptedModel(6, logits=logits)
    draws = generate(model, [[1]] * 2000, max_new_tokens=1, temperature=0.8, seed=5,
                     stop_token_ids=())
    counts = np.bincount([d[0] for d in draws], minlength=6) / 2000
    p = np.exp(logits / 0.8) / np.exp(logits / 0.8).sum()
    assert np.abs(counts - p).max() < 0.035, (counts, p)
    draws = generate(model, [[1]] * 500, max_new_tokens=1, temperature=1.0, top_p=0.6, seed=6,
                     stop_token_ids=())
    q = np.exp(logits) / np.exp(logits).sum()
    nucleus = set(np.argsort(-q)[:np.searchsorted(np.cumsum(np.sort(q)[::-1]), 0.6) + 1].tolist())
    assert {d[0] for d in draws} <= nucleus and len({d[0] for d in draws}) == len(nucleus)


def test_seeded_sampling_is_reproducible():
    logits = np.random.default_rng(1).standard_normal(40).astype(np.float32)
    model = ScriptedModel(40, logits=logits)
    a = generate(model, [3, 4], max_new_tokens=20, temperature=1.0, seed=11, stop_token_ids=())
    b = generate(model, [3, 4], max_new_tokens=20, temperature=1.0, seed=11, stop_token_ids=())
    c = generate(model, [3, 4], max_new_tokens=20, temperature=1.0, seed=12, stop_token_ids=())
    g = ember.Generator(11)
    d = generate(model, [3, 4], max_new_tokens=20, temperature=1.0, generator=g, stop_token_ids=())
    assert a == b == d and a != c
    greedy = generate(model, [3, 4], max_new_tokens=5, stop_token_ids=())
    top1 = generate(model, [3, 4], max_new_tokens=5, temperature=1.5, top_k=1, seed=3, stop_token_ids=())
    assert greedy == top1 == [int(np.argmax(logits))] * 5


def test_prompt_runs_in_one_pass_then_one_token_per_step():
    model = ScriptedModel(10, script=[5, 6, 7, 8])
    out = generate(model, [[1, 2, 3], [4]], max_new_tokens=4, stop_token_ids=())
    assert out == [[5, 6, 7, 8]] * 2
    assert model.calls == [(2, 3), (2, 1), (2, 1), (2, 1)]


def test_stop_tokens_end_generation_and_are_kept():
    model = ScriptedModel(10, script=[5, 6, 0, 7])
    assert generate(model, [1], max_new_tokens=8) == [5, 6, 0]            # the model's eos
    assert generate(model, [1], max_new_tokens=8, stop_token_ids=[6]) == [5, 6]
    assert generate(model, [1], max_new_tokens=8, stop_token_ids=()) == [5, 6, 0, 7, 7, 7, 7, 7]
    assert generate(model, [1], max_new_tokens=0) == []


def test_generation_config_rejects_bad_values():
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_k": -2}, {"max_new_tokens": -1},
                {"repetition_penalty": 0}):
        with pytest.raises(EmberError, match=next(iter(bad))):
            GenerationConfig(**bad)
    with pytest.raises(EmberError, match="at least one token"):
        generate(ScriptedModel(4, script=[1]), [[]])
    with pytest.raises(EmberError, match="stop_strings need a tokenizer"):
        generate(ScriptedModel(4, script=[1]), [1], stop_strings=["x"])


def test_batched_stop_strings_end_each_row(hf_tok, tok):
    """generate() with a tokenizer: a row whose text reaches a stop string ends there."""
    a = hf_tok.encode("Hello world. STOP here.").ids
    b = hf_tok.encode("Once upon a time there").ids
    n = max(len(a), len(b))

    class TwoRows(ScriptedModel):
        def __call__(self, ids, cache=None, attention_mask=None, last_only=False):
            k = cache.steps
            cache.steps += 1
            row = np.full((2, self.vocab), -10.0, np.float32)
            row[0, a[min(k, len(a) - 1)]] = 10.0
            row[1, b[min(k, len(b) - 1)]] = 10.0
            return ember.from_numpy(row.reshape(2, 1, self.vocab))

    out = generate(TwoRows(hf_tok.get_vocab_size()), [[1], [1]], max_new_tokens=n,
                   stop_token_ids=(), stop_strings=["STOP"], tokenizer=tok)
    assert "STOP" in hf_tok.decode(out[0]) and "STOP" not in hf_tok.decode(out[0][:-1])
    assert out[1] == b + [b[-1]] * (n - len(b))


# --- streaming ----------------------------------------------------------------------------------
def test_streamed_deltas_never_split_a_character(hf_tok, tok):
    text = "naïve café, 東京 🙂 and more 東京🙂"
    ids = hf_tok.encode(text).ids
    # Also one id per byte: every multi-byte character arrives over several tokens.
    alphabet = {b: hf_tok.token_to_id(ch) for b, ch in zip(range(256), _bytes_to_unicode(), strict=True)}
    per_byte = [alphabet[b] for b in text.encode("utf-8")]
    for seq in (ids, per_byte):
        dec = IncrementalDecoder(tok)
        deltas = [dec.push(t) for t in seq] + [dec.flush()]
        assert "".join(deltas) == hf_tok.decode(seq) == text
        assert all("\ufffd" not in d for d in deltas)


def _bytes_to_unicode():
    """GPT-2's byte-to-printable-character table (public definition)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs, strict=True))
    return [chr(table[b]) for b in range(256)]


def test_stop_strings_cut_the_stream_across_deltas():
    s = StopStrings(["STOP", "\n\n"])
    out = []
    for d in ["Hello ", "wor", "ld S", "TO", "P trailing"]:
        text, stopped = s.feed(d)
        out.append(text)
        if stopped:
            break
    assert "".join(out) == "Hello world " and stopped
    s = StopStrings(["STOP"])
    assert s.feed("ST") == ("", False) and s.feed("ay") == ("STay", False)
    assert s.flush() == ""


def test_text_generation_streams_until_a_stop_string(hf_tok, tok):
    target = "Hello world. Hello there. STOP here."
    script = hf_tok.encode(target).ids
    model = ScriptedModel(hf_tok.get_vocab_size(), script=script)
    gen = TextGeneration(model, tok, [1], max_new_tokens=len(script) + 2, stop_token_ids=(),
                         stop_strings=["STOP"])
    deltas = list(gen)
    assert "".join(deltas) == gen.text == "Hello world. Hello there. "
    assert gen.stop_reason == "stop_string"
    gen = TextGeneration(model, tok, [1], max_new_tokens=len(script), stop_token_ids=())
    assert gen.run() == target and gen.token_ids == script and gen.stop_reason == "length"


# --- chat templates -------------------------------------------------------------------------
def test_chat_template_matches_transformers(tmp_path, hf_tok):
    require("transformers")
    require("jinja2")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"}))
    ours = ChatTemplate.from_tokenizer_config(str(tmp_path))
    ref = _reference_chat_tokenizer(hf_tok)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 🙂"},
                {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    for gen_prompt in (True, False):
        assert ours.render(messages, add_generation_prompt=gen_prompt) == ref.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=gen_prompt)


def test_chat_template_errors_are_clear(tmp_path, monkeypatch):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    with pytest.raises(ember.FormatError, match="no chat_template"):
        ChatTemplate.from_tokenizer_config(str(tmp_path))
    t = ChatTemplate("{{ raise_exception('only user turns') }}")
    require("jinja2")
    with pytest.raises(EmberError, match="only user turns"):
        t.render([{"role": "user", "content": "x"}])
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(EmberError, match="needs the jinja2 package"):
        ChatTemplate(TEMPLATE).render([{"role": "user", "content": "x"}])


# --- the commands -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, hf_tok, torch):
    transformers = require("transformers")
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   vocab_size=hf_tok.get_vocab_size(), max_position_embeddings=256,
                                   bos_token_id=hf_tok.token_to_id("<s>"),
                                   eos_token_id=hf_tok.token_to_id("</s>"))
    torch.manual_seed(3)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    path = tmp_path_factory.mktemp("tinychat")
    model.save_pretrained(path, safe_serialization=True)
    (path / "tokenizer.json").write_text(hf_tok.to_str())
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": TEMPLATE, "bos_token": "<s>", "eos_token": "</s>"}))
    return str(path), model


def _reference_chat_tokenizer(hf_tok):
    """transformers' tokenizer over `hf_tok` with the test's chat TEMPLATE."""
    transformers = require("transformers")
    return transformers.PreTrainedTokenizerFast(tokenizer_object=hf_tok, bos_token="<s>",
                                                eos_token="</s>", chat_template=TEMPLATE)


def _chat_prompt_ids(hf_tok, user_text):
    """The ids of the prompt transformers renders for one user turn, ready for the reply."""
    prompt = _reference_chat_tokenizer(hf_tok).apply_chat_template(
        [{"role": "user", "content": user_text}], tokenize=False, add_generation_prompt=True)
    return hf_tok.encode(prompt).ids


def _transformers_greedy(hf, torch, ids, max_new_tokens):
    """The token ids transformers' greedy generate adds after prompt `ids`."""
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                          do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=0)
    return out[0, len(ids):].tolist()


def _run_cli(argv, stdin=""):
    from ember.cli import main
    out, old_out, old_in = io.StringIO(), sys.stdout, sys.stdin
    sys.stdout, sys.stdin = out, io.StringIO(stdin)
    try:
        rc = main(argv)
    finally:
        sys.stdout, sys.stdin = old_out, old_in
    return rc, out.getvalue()


def test_cli_generate_json_matches_transformers(model_dir, hf_tok, torch):
    path, hf = model_dir
    prompt = "Once upon a time"
    new = _transformers_greedy(hf, torch, hf_tok.encode(prompt).ids, 20)
    rc, text = _run_cli(["generate", "--model", path, "--device", "cpu", "--max-new-tokens", "20",
                         "--json", prompt])
    assert rc == 0
    got = json.loads(text)
    assert got["token_ids"] == new
    eos = hf_tok.token_to_id("</s>")
    assert got["text"] == hf_tok.decode([t for t in new if t != eos])
    rc, streamed = _run_cli(["generate", "--model", path, "--device", "cpu",
                             "--max-new-tokens", "20", prompt])
    assert rc == 0 and streamed == got["text"] + "\n"


def test_cli_generate_seeded_sampling_repeats(model_dir):
    path, _ = model_dir
    args = ["generate", "--model", path, "--device", "cpu", "--max-new-tokens", "12",
            "--temperature", "0.9", "--top-k", "20", "--top-p", "0.95", "--json"]
    a = json.loads(_run_cli(args + ["--seed", "4", "Hello"])[1])
    b = json.loads(_run_cli(args + ["--seed", "4", "Hello"])[1])
    assert a == b and len(a["token_ids"]) >= 1


def test_cli_chat_uses_the_template(model_dir, hf_tok, torch):
    path, hf = model_dir
    rc, out = _run_cli(["chat", "--model", path, "--device", "cpu", "--max-new-tokens", "8"],
                       stdin="Hi there\n/exit\n")
    assert rc == 0
    gen = _transformers_greedy(hf, torch, _chat_prompt_ids(hf_tok, "Hi there"), 8)
    new = [t for t in gen if t != hf_tok.token_to_id("</s>")]
    assert out == hf_tok.decode(new) + "\n"


def test_cli_generate_chat_flag_renders_the_template(model_dir, hf_tok, torch):
    path, hf = model_dir
    new = _transformers_greedy(hf, torch, _chat_prompt_ids(hf_tok, "Tell me"), 6)
    rc, text = _run_cli(["generate", "--model", path, "--device", "cpu", "--max-new-tokens", "6",
                         "--chat", "--json", "Tell me"])
    assert rc == 0 and json.loads(text)["token_ids"] == new


# --- a conversation's KV cache kept between turns ----------------------------------------------
class _Counting:
    """The model, recording how many positions each forward pass runs."""

    def __init__(self, model):
        self.model, self.fed = model, []
        self.config, self.context_length = model.config, model.context_length

    def new_cache(self, batch, max_len):
        return self.model.new_cache(batch, max_len)

    def __call__(self, ids, **kw):
        self.fed.append(len(ids[0]))
        return self.model(ids, **kw)


@pytest.fixture(scope="module")
def ember_chat_model(model_dir, tok):
    from ember.models.causal_lm import load_causal_lm
    return load_causal_lm(model_dir[0], device=ember.Device.cpu()), tok


def _turn_prompts(hf_tok, turns, replies):
    """The rendered prompt of each turn, the history holding the earlier turns' replies."""
    ref = _reference_chat_tokenizer(hf_tok)
    messages, prompts = [], []
    for text, reply in zip(turns, replies, strict=True):
        messages.append({"role": "user", "content": text})
        prompts.append(ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        messages.append({"role": "assistant", "content": reply})
    return prompts


def test_a_kept_cache_runs_only_each_turns_new_tokens(ember_chat_model, hf_tok, model_dir, torch):
    from ember.generation import PromptCache
    model, tok = ember_chat_model
    counting = _Counting(model)
    cache = PromptCache(counting)
    turns, replies, previous_ids = ["Hi there", "Tell me more", "Once upon"], [], []
    for i in range(len(turns)):
        prompt = _turn_prompts(hf_tok, turns[: i + 1], replies + [""])[i]
        fed_before = len(counting.fed)
        gen = TextGeneration(counting, tok, prompt, max_new_tokens=6, add_special_tokens=False,
                             prompt_cache=cache)
        gen.run()
        ids = gen.prompt_ids
        # transformers runs the whole history each turn: the same greedy tokens
        assert gen.token_ids == _transformers_greedy(model_dir[1], torch, ids, 6), i
        fresh = TextGeneration(model, tok, prompt, max_new_tokens=6, add_special_tokens=False)
        fresh.run()
        assert gen.token_ids == fresh.token_ids
        first_pass = counting.fed[fed_before]
        assert first_pass == len(ids) - gen.cached_prompt_tokens
        if i:
            # everything of the previous prompt, at least, came from the cache
            assert gen.cached_prompt_tokens >= len(previous_ids), (i, gen.cached_prompt_tokens)
            assert ids[: gen.cached_prompt_tokens] == cache.held()[: gen.cached_prompt_tokens]
        else:
            assert gen.cached_prompt_tokens == 0
        # what the cache holds: the prompt and every reply token fed back (not the last)
        assert cache.held() == (ids + gen.token_ids)[: len(ids) + len(gen.token_ids) - 1]
        previous_ids = ids
        replies.append(gen.text)


def test_a_kept_cache_gives_the_logits_of_a_whole_pass(ember_chat_model, hf_tok):
    from ember.generation import PromptCache
    model, _ = ember_chat_model
    ids = hf_tok.encode("Once upon a time there was a tiny model. Hello world.").ids
    cache = PromptCache(model)
    first, start = cache.prepare(ids[:9], 12)      # a small cache: the longer prompt grows it
    model(ids[:9], cache=first)
    assert (start, first.length) == (0, 9)
    cache.follow(ids[:9])
    grown, start = cache.prepare(ids, len(ids) + 4)
    assert start == 9 and grown is not first and grown.max_len >= len(ids) + 4
    kept = model(ids[start:], cache=grown, last_only=True).numpy()
    whole = model(ids, cache=model.new_cache(1, len(ids)), last_only=True).numpy()
    np.testing.assert_allclose(kept, whole, rtol=0, atol=1e-5 * np.abs(whole).max())
    # a prompt that parts from the held ids early keeps only the common prefix
    cache.follow(ids)
    edited = ids[:4] + [ids[5]] + ids[4:]
    again, start = cache.prepare(edited, len(edited) + 1)
    assert start == 4 and again is grown and again.length == 4
    kept = model(edited[4:], cache=again, last_only=True).numpy()
    whole = model(edited, cache=model.new_cache(1, len(edited)), last_only=True).numpy()
    np.testing.assert_allclose(kept, whole, rtol=0, atol=1e-5 * np.abs(whole).max())
    # the same prompt again still runs its last token (its logits start the reply)
    cache.follow(edited)
    _, start = cache.prepare(edited, len(edited) + 1)
    assert start == len(edited) - 1


def test_a_kept_cache_refuses_a_batch(ember_chat_model):
    from ember.generation import PromptCache
    model, _ = ember_chat_model
    with pytest.raises(EmberError, match="holds one sequence, not a batch of 2"):
        generate(model, [[5, 6, 7], [8, 9, 10]], max_new_tokens=2, prompt_cache=PromptCache(model))


def test_cli_chat_turns_match_transformers_on_the_whole_history(model_dir, hf_tok, torch):
    path, hf = model_dir
    rc, out = _run_cli(["chat", "--model", path, "--device", "cpu", "--max-new-tokens", "6"],
                       stdin="Hi there\nTell me more\n/exit\n")
    assert rc == 0
    eos = hf_tok.token_to_id("</s>")
    first = hf_tok.decode([t for t in _transformers_greedy(hf, torch, _chat_prompt_ids(hf_tok, "Hi there"), 6)
                           if t != eos])
    second_prompt = _turn_prompts(hf_tok, ["Hi there", "Tell me more"], [first, ""])[1]
    second = _transformers_greedy(hf, torch, hf_tok.encode(second_prompt).ids, 6)
    assert out == first + "\n" + hf_tok.decode([t for t in second if t != eos]) + "\n"
