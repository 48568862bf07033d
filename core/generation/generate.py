"""The decoding loop: one batched pass over the (left-padded) prompts, then one token
per step through the KV cache.

    ids = generate(model, [prompt_ids], max_new_tokens=32)               # greedy
    for delta in TextGeneration(model, tokenizer, "Once upon", temperature=0.8, seed=1):
        print(delta, end="", flush=True)

A model here is anything with `config.eos_token_ids`, `new_cache(batch, max_len)` and
`__call__(ids, cache=, attention_mask=, last_only=True) -> logits [batch, 1, vocab]`.
"""
from ..errors import EmberError
from ..random import Generator
from . import sampling_host
from .config import GenerationConfig
from .streaming import IncrementalDecoder, StopStrings

try:
    import numpy as np

    from .sampling import choose_tokens
except ImportError:   # a browser without numpy: host data are lists (sampling_host.py)
    np = None

_INTS = (int,) if np is None else (int, np.integer)


def _config(config, overrides):
    config = config or GenerationConfig()
    return config.updated(**overrides) if overrides else config


def _as_batch(prompts):
    if len(prompts) and isinstance(prompts[0], _INTS):
        prompts = [prompts]
    rows = [[int(t) for t in p] for p in prompts]
    if not rows or any(len(r) == 0 for r in rows):
        raise EmberError("generate: every prompt needs at least one token", op="generate")
    return rows


class _Decoding:
    """One generation run's state, shared by the sync and the async loop: the padded
    prompt, the attention mask, the cache, who has finished. Host data are numpy arrays
    where numpy is installed and lists of Python ints/bools where it is not."""

    def __init__(self, model, prompts, config, generator):
        self.model, self.config = model, config
        rows = _as_batch(prompts)
        self.stops = set(config.stop_token_ids if config.stop_token_ids is not None
                         else model.config.eos_token_ids)
        self.generator = generator if generator is not None else Generator(config.seed)
        self.b = b = len(rows)
        self.width = width = max(len(r) for r in rows)
        total = width + config.max_new_tokens
        pad = config.pad_token_id
        if np is not None:
            self.ids = np.full((b, width), pad, dtype=np.int64)
            self.mask = np.zeros((b, total), dtype=bool)
            for i, r in enumerate(rows):
                self.ids[i, width - len(r):] = r                    # left padding
                self.mask[i, width - len(r):] = True
            self.mask[:, width:] = True
            self.padded = not self.mask[:, :width].all()
            self.done = np.zeros(b, dtype=bool)
        else:
            self.ids = [[pad] * (width - len(r)) + r for r in rows]
            self.mask = [[False] * (width - len(r)) + [True] * (total - width + len(r))
                         for r in rows]
            self.padded = any(len(r) < width for r in rows)
            self.done = [False] * b
        self.history = [list(r) for r in rows]
        self.cache = model.new_cache(b, total)

    def _mask(self, length):
        if not self.padded:
            return None
        return self.mask[:, :length] if np is not None else [m[:length] for m in self.mask]

    def first_logits(self):
        """The prompt in one batched pass: logits [batch, 1, vocab] of its last position."""
        return self.model(self.ids, cache=self.cache, attention_mask=self._mask(self.width),
                          last_only=True)

    def choose(self, scores):
        """The next ids (pad for finished rows) from scores [batch, vocab] (a numpy array,
        or lists without numpy); records them in the history."""
        config = self.config
        if np is not None:
            nxt = choose_tokens(scores, self.history, config, self.generator)
            nxt = np.where(self.done, config.pad_token_id, nxt).astype(np.int64)
        else:
            nxt = sampling_host.choose_tokens(scores, self.history, config, self.generator)
            nxt = [config.pad_token_id if d else t for t, d in zip(nxt, self.done)]
        for i in range(self.b):
            if not self.done[i]:
                self.history[i].append(int(nxt[i]))
                if int(nxt[i]) in self.stops:
                    self.done[i] = True
        return nxt

    def finished(self, step):
        return all(self.done) or step == self.config.max_new_tokens - 1

    def next_logits(self, nxt, step):
        """One decode step: the ids chosen at `step` through the cache."""
        ids = nxt.reshape(self.b, 1) if np is not None else [[int(t)] for t in nxt]
        return self.model(ids, cache=self.cache, attention_mask=self._mask(self.width + step + 1),
                          last_only=True)


def _scores(logits):
    """Last-position logits [batch, vocab] on the host (sync readback)."""
    if np is not None:
        return logits.numpy()[:, -1, :]
    return [row[-1] for row in logits.tolist()]


async def _scores_async(logits):
    """The same through the async readback, which a browser page can await."""
    if np is not None:
        return (await logits.numpy_async())[:, -1, :]
    return [row[-1] for row in await logits.tolist_async()]


def generate_steps(model, prompts, config=None, generator=None, **overrides):
    """Yield, per step, the new token id of each row ([batch]: an int64 array, a list of
    ints without numpy); rows that have finished (a stop token) get pad_token_id. The
    first step comes from one pass over all prompts."""
    config = _config(config, overrides)
    if config.max_new_tokens == 0:
        _as_batch(prompts)   # still says so when a prompt is empty
        return
    run = _Decoding(model, prompts, config, generator)
    logits = run.first_logits()
    for step in range(config.max_new_tokens):
        nxt = run.choose(_scores(logits))
        yield nxt
        if run.finished(step):
            return
        logits = run.next_logits(nxt, step)


async def generate_steps_async(model, prompts, config=None, generator=None, **overrides):
    """generate_steps as an async generator: each step's logits are read back with the
    async API, so a browser page's event loop runs while the GPU works."""
    config = _config(config, overrides)
    if config.max_new_tokens == 0:
        _as_batch(prompts)   # still says so when a prompt is empty
        return
    run = _Decoding(model, prompts, config, generator)
    logits = run.first_logits()
    for step in range(config.max_new_tokens):
        nxt = run.choose(await _scores_async(logits))
        yield nxt
        if run.finished(step):
            return
        logits = run.next_logits(nxt, step)


def generate(model, prompts, config=None, generator=None, tokenizer=None, **overrides):
    """New token ids per prompt (a list of lists; one list when given one prompt of ints).

    A row ends after a stop token (kept in its output) or, with a tokenizer and
    stop_strings, once its decoded text contains a stop string.
    """
    config = _config(config, overrides)
    single = len(prompts) and isinstance(prompts[0], _INTS)
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
        self._start()
        for nxt in generate_steps(self.model, [self.prompt_ids], self.config, self.generator):
            out, finished = self._push(int(nxt[0]))
            if out:
                yield out
            if finished:
                return
        out = self._finish()
        if out:
            yield out

    async def __aiter__(self):
        """The same deltas, `async for`: logits are read back with the async API (what a
        browser page needs to stay responsive while it generates)."""
        self._start()
        async for nxt in generate_steps_async(self.model, [self.prompt_ids], self.config,
                                              self.generator):
            out, finished = self._push(int(nxt[0]))
            if out:
                yield out
            if finished:
                return
        out = self._finish()
        if out:
            yield out

    def _start(self):
        config = self.config
        self._stops = set(config.stop_token_ids if config.stop_token_ids is not None
                          else self.model.config.eos_token_ids)
        self._decoder = IncrementalDecoder(self.tokenizer)
        self._watcher = StopStrings(config.stop_strings)
        self.stop_reason = "length"

    def _push(self, t):
        """(text to emit, finished) after token t; a stop string's cut is already applied,
        and a stop token ends the run before its text is decoded."""
        self.token_ids.append(t)
        if t in self._stops:
            self.stop_reason = "stop_token"
            return self._finish(), True
        out, stopped = self._watcher.feed(self._decoder.push(t))
        self.text += out
        if stopped:
            self.stop_reason = "stop_string"
        return out, stopped

    def _finish(self):
        """What the decoder and the stop-string watcher still hold, at the end."""
        out, stopped = self._watcher.feed(self._decoder.flush())
        out += "" if stopped else self._watcher.flush()
        if stopped:
            self.stop_reason = "stop_string"
        self.text += out
        return out

    def run(self):
        """Generate to the end; the whole new text."""
        for _ in self:
            pass
        return self.text


def _encode(tokenizer, text, add_special_tokens):
    enc = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    ids = getattr(enc, "ids", enc)
    return [int(t) for t in ids]
