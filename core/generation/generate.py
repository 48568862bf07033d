"""The decoding loop: one batched pass over the (left-padded) prompts, then one token
per step through the KV cache.

    ids = generate(model, [prompt_ids], max_new_tokens=32)               # greedy
    for delta in TextGeneration(model, tokenizer, "Once upon", temperature=0.8, seed=1):
        print(delta, end="", flush=True)

A model here is anything with `config.eos_token_ids`, `new_cache(batch, max_len)` and
`__call__(ids, cache=, attention_mask=, last_only=True) -> logits [batch, 1, vocab]`.
"""
import numpy as np

from ..errors import EmberError
from ..random import Generator
from .config import GenerationConfig
from .sampling import choose_tokens
from .streaming import IncrementalDecoder, StopStrings


def _config(config, overrides):
    config = config or GenerationConfig()
    return config.updated(**overrides) if overrides else config


def _as_batch(prompts):
    if len(prompts) and isinstance(prompts[0], (int, np.integer)):
        prompts = [prompts]
    rows = [[int(t) for t in p] for p in prompts]
    if not rows or any(len(r) == 0 for r in rows):
        raise EmberError("generate: every prompt needs at least one token", op="generate")
    return rows


def generate_steps(model, prompts, config=None, generator=None, **overrides):
    """Yield, per step, an int64 array [batch] of new token ids; rows that have finished
    (a stop token) get pad_token_id. The first step comes from one pass over all prompts."""
    config = _config(config, overrides)
    rows = _as_batch(prompts)
    if config.max_new_tokens == 0:
        return
    stops = set(config.stop_token_ids if config.stop_token_ids is not None
                else model.config.eos_token_ids)
    if generator is None:
        generator = Generator(config.seed)
    b = len(rows)
    width = max(len(r) for r in rows)
    total = width + config.max_new_tokens
    ids = np.full((b, width), config.pad_token_id, dtype=np.int64)
    mask = np.zeros((b, total), dtype=bool)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = r                    # left padding
        mask[i, width - len(r):] = True
    mask[:, width:] = True
    padded = not mask[:, :width].all()
    history = [list(r) for r in rows]
    done = np.zeros(b, dtype=bool)

    cache = model.new_cache(b, total)
    logits = model(ids, cache=cache, attention_mask=mask[:, :width] if padded else None,
                   last_only=True)
    for step in range(config.max_new_tokens):
        scores = logits.numpy()[:, -1, :]
        nxt = choose_tokens(scores, history, config, generator)
        nxt = np.where(done, config.pad_token_id, nxt).astype(np.int64)
        for i in range(b):
            if not done[i]:
                history[i].append(int(nxt[i]))
                if int(nxt[i]) in stops:
                    done[i] = True
        yield nxt
        if done.all() or step == config.max_new_tokens - 1:
            return
        length = width + step + 1
        logits = model(nxt.reshape(b, 1), cache=cache,
                       attention_mask=mask[:, :length] if padded else None, last_only=True)


def generate(model, prompts, config=None, generator=None, tokenizer=None, **overrides):
    """New token ids per prompt (a list of lists; one list when given one prompt of ints).

    A row ends after a stop token (kept in its output) or, with a tokenizer and
    stop_strings, once its decoded text contains a stop string.
    """
    config = _config(config, overrides)
    single = len(prompts) and isinstance(prompts[0], (int, np.integer))
    rows = _as_batch(prompts)
    outs = [[] for _ in rows]
    finished = [False] * len(rows)
    stops = set(config.stop_token_ids if config.stop_token_ids is not None
                else model.config.eos_token_ids)
    if config.stop_strings and tokenizer is None:
        raise EmberError("generate: stop_strings need a tokenizer to decode the text "
                         "(pass tokenizer=...)", op="generate")
    check_strings = bool(config.stop_strings)
    for nxt in generate_steps(model, rows, config, generator):
        for i, t in enumerate(nxt):
            if finished[i]:
                continue
            outs[i].append(int(t))
            if int(t) in stops:
                finished[i] = True
            elif check_strings:
                text = tokenizer.decode(outs[i], skip_special_tokens=True)
                if any(s in text for s in config.stop_strings):
                    finished[i] = True
        if all(finished):
            break
    return outs[0] if single else outs


class TextGeneration:
    """Iterate to stream text deltas for one prompt (a string or token ids).

    After iteration: `token_ids` (the new ids, including a final stop token),
    `text` (the new text, cut before a stop string), `stop_reason` ('stop_token',
    'stop_string' or 'length').
    """

    def __init__(self, model, tokenizer, prompt, config=None, generator=None,
                 add_special_tokens=True, **overrides):
        self.model = model
        self.tokenizer = tokenizer
        self.config = _config(config, overrides)
        self.generator = generator
        if isinstance(prompt, str):
            self.prompt_ids = _encode(tokenizer, prompt, add_special_tokens)
        else:
            self.prompt_ids = [int(t) for t in prompt]
        self.token_ids = []
        self.text = ""
        self.stop_reason = None

    def __iter__(self):
        config = self.config
        stops = set(config.stop_token_ids if config.stop_token_ids is not None
                    else self.model.config.eos_token_ids)
        decoder = IncrementalDecoder(self.tokenizer)
        watcher = StopStrings(config.stop_strings)
        self.stop_reason = "length"
        for nxt in generate_steps(self.model, [self.prompt_ids], config, self.generator):
            t = int(nxt[0])
            self.token_ids.append(t)
            if t in stops:
                self.stop_reason = "stop_token"
                break
            out, stopped = watcher.feed(decoder.push(t))
            if out:
                self.text += out
                yield out
            if stopped:
                self.stop_reason = "stop_string"
                return
        out, stopped = watcher.feed(decoder.flush())
        out += "" if stopped else watcher.flush()
        if stopped:
            self.stop_reason = "stop_string"
        if out:
            self.text += out
            yield out

    def run(self):
        """Generate to the end; the whole new text."""
        for _ in self:
            pass
        return self.text


def _encode(tokenizer, text, add_special_tokens):
    enc = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    ids = getattr(enc, "ids", enc)
    return [int(t) for t in ids]
