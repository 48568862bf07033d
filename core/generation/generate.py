"""The decoding loop: one batched pass over the (left-padded) prompts, then one token
per step through the KV cache.

    ids = generate(model, [prompt_ids], max_new_tokens=32)               # greedy
    for delta in TextGeneration(model, tokenizer, "Once upon", temperature=0.8, seed=1):
        print(delta, end="", flush=True)

A model here is anything with `config.eos_token_ids`, `context_length` (the most
positions it attends over), `new_cache(batch, max_len)` and
`__call__(ids, cache=, attention_mask=, last_only=True) -> logits [batch, 1, vocab]`.

Memory is bounded by the model, never by the request: the cache holds at most
`context_length` positions whatever `max_new_tokens` says, a prompt longer than the
context is refused (or, with `truncate="left"`, loses its oldest tokens), and a run
that fills the context ends with the finish reason "context".

The loop is written once, as an async generator that awaits each step's readback:
`async for` gives it the device's async readback (a browser page's event loop keeps
running); the synchronous API drives the same generator with a readback that never
suspends (`_drive`), so there is no second copy of the loop.
"""

import contextlib
import math

from .. import dtype as dt
from ..errors import EmberError
from ..random import Generator
from ..tensor import Tensor, cat
from . import sampling
from .config import GenerationConfig
from .streaming import IncrementalDecoder, StopStrings

# Why a row stopped: a stop token, max_new_tokens reached, the model's context full
# (TextGeneration adds "stop_string").
STOP_TOKEN, LENGTH, CONTEXT = "stop_token", "length", "context"


def _config(config, overrides):
    config = config or GenerationConfig()
    return config.updated(**overrides) if overrides else config


def _as_batch(prompts):
    """Prompts as lists of Python ints: one prompt (ints) or several (lists of ints)."""
    if isinstance(prompts, Tensor):
        prompts = prompts.tolist()
    prompts = list(prompts)
    if prompts and not hasattr(prompts[0], "__len__"):
        prompts = [prompts]
    rows = [[int(t) for t in p] for p in prompts]
    if not rows or any(len(r) == 0 for r in rows):
        raise EmberError("generate: every prompt needs at least one token", op="generate")
    return rows


def _fit(row, context, truncate):
    """The prompt, refused or cut from the left when it does not fit the context."""
    if len(row) <= context:
        return row
    if truncate == "left":
        return row[len(row) - (context - 1) :]
    raise EmberError(
        f"generate: the prompt has {len(row)} tokens, more than the model's context of "
        f"{context} positions; shorten it or truncate it (truncate='left', "
        f"--truncate-prompt)",
        op="generate",
        length=len(row),
        context=context,
    )


async def _read(t):
    """A synchronous readback, awaitable: it never suspends, so _drive can run it."""
    return t.tolist()


async def _read_async(t):
    return await t.tolist_async()


def _drive(agen):
    """Iterate an async generator from synchronous code. Every await inside it must
    complete without suspending (the loop reads back through `_read`), so each step is
    one `send(None)` that ends in StopIteration carrying the yielded value."""
    try:
        while True:
            step = agen.__anext__()
            try:
                step.send(None)
            except StopIteration as done:
                yield done.value
                continue
            except StopAsyncIteration:
                return
            raise EmberError(
                "generate: a synchronous step waited on something (use "
                "`async for` with an asynchronous readback)",
                op="generate",
            )
    finally:
        with contextlib.suppress(StopIteration):
            agen.aclose().send(None)


class _Decoding:
    """One generation run's state: the padded prompt, the attention mask (host lists),
    the cache, who has finished and why."""

    def __init__(self, model, prompts, config, generator, prompt_cache=None):
        self.model, self.config = model, config
        context = int(model.context_length)
        rows = [_fit(r, context, config.truncate) for r in _as_batch(prompts)]
        self.stops = set(
            config.stop_token_ids
            if config.stop_token_ids is not None
            else model.config.eos_token_ids
        )
        self.generator = generator if generator is not None else Generator(config.seed)
        self.b = b = len(rows)
        self.width = width = max(len(r) for r in rows)
        self.context = context
        # The sequence never grows past the context, whatever max_new_tokens asks.
        self.total = min(width + config.max_new_tokens, context)
        pad = config.pad_token_id
        self.ids = [[pad] * (width - len(r)) + r for r in rows]
        self.mask = [[0] * (width - len(r)) + [1] * (self.total - width + len(r)) for r in rows]
        self.padded = any(len(r) < width for r in rows)
        self.history = [list(r) for r in rows]
        self.reasons = [None] * b
        self.new = 0
        self.cache, self.start = None, 0  # start: the prompt positions the cache holds
        if self.total > width and prompt_cache is not None:
            if b != 1:
                raise EmberError(
                    f"generate: a prompt_cache holds one sequence, not a batch of {b}",
                    op="generate",
                )
            self.cache, self.start = prompt_cache.prepare(rows[0], self.total)
            prompt_cache.follow(self.history[0])
        elif self.total > width:
            self.cache = model.new_cache(b, self.total)
        # Without a penalty the per-element work is done on the device: the argmax when
        # greedy (one id per row comes back), else the softmax weights (sampling.weights).
        self.on_device = config.repetition_penalty == 1.0

    def empty(self):
        """True when no token can be made (max_new_tokens 0, or a prompt filling the context)."""
        if self.total > self.width:
            return False
        self.reasons = [LENGTH if self.config.max_new_tokens == 0 else CONTEXT] * self.b
        return True

    def _mask(self, length):
        return [m[:length] for m in self.mask] if self.padded else None

    def first_logits(self):
        """The prompt in one batched pass: logits [batch, 1, vocab] of its last position."""
        ids = [r[self.start :] for r in self.ids] if self.start else self.ids
        return self.model(
            ids, cache=self.cache, attention_mask=self._mask(self.width), last_only=True
        )

    def next_logits(self, nxt):
        """One decode step: the ids just chosen, through the cache."""
        return self.model(
            [[t] for t in nxt],
            cache=self.cache,
            attention_mask=self._mask(self.width + self.new),
            last_only=True,
        )

    def to_read(self, logits):
        """The device tensor this step reads back: [2, batch] (argmax, NaN flag) i64 when
        greedy on the device; the weights exp((logits - max) / temperature) [batch, vocab]
        when sampling on it (NaN logits give NaN weights); else the logits rows."""
        rows = logits.reshape(self.b, logits.shape[-1])
        if not self.on_device:
            return rows
        if self.config.do_sample:
            top = rows.max(-1, keepdim=True)
            return ((rows - top) * (1.0 / self.config.temperature)).exp()
        return cat([rows.argmax(-1), rows.ne(rows).max(-1).to(dt.i64)]).reshape(2, self.b)

    def choose(self, host):
        """The next ids (pad for finished rows) from what to_read's tensor read back."""
        config = self.config
        greedy_on_device = self.on_device and not config.do_sample
        if greedy_on_device:
            picks, nan_rows = host
        else:
            nan_rows = [math.isnan(sum(row)) for row in host]  # NaN anywhere: a NaN sum
        if any(nan_rows):
            row = [bool(v) for v in nan_rows].index(True)
            raise EmberError(
                f"generate: the model's logits are NaN (row {row}, new token {self.new + 1}); "
                "the weights or the config's values (eps, rope base) may be broken",
                op="generate",
                row=row,
                step=self.new,
            )
        if self.on_device and config.do_sample:
            picks = sampling.draw_tokens(host, config, self.generator)
        elif not greedy_on_device:
            picks = sampling.choose_tokens(host, self.history, config, self.generator)
        nxt = [config.pad_token_id if self.reasons[i] else int(t) for i, t in enumerate(picks)]
        self.new += 1
        for i, t in enumerate(nxt):
            if self.reasons[i] is None:
                self.history[i].append(t)
                if t in self.stops:
                    self.reasons[i] = STOP_TOKEN
        if self.width + self.new >= self.total:
            end = LENGTH if self.new == config.max_new_tokens else CONTEXT
            self.reasons = [r or end for r in self.reasons]
        return nxt

    def finished(self):
        return all(self.reasons)


async def _steps(run, read):
    """Per step, the new id of each row (a list of ints; pad_token_id for finished rows)."""
    if run.empty():
        return
    logits = run.first_logits()
    while True:
        nxt = run.choose(await read(run.to_read(logits)))
        yield nxt
        if run.finished():
            return
        logits = run.next_logits(nxt)


def generate_steps(model, prompts, config=None, generator=None, **overrides):
    """Yield, per step, the new token id of each row (a list of ints); rows that have
    finished (a stop token) get pad_token_id. The first step comes from one pass over
    all prompts."""
    run = _Decoding(model, prompts, _config(config, overrides), generator)
    return _drive(_steps(run, _read))


def generate_steps_async(model, prompts, config=None, generator=None, **overrides):
    """generate_steps as an async generator: each step's logits are read back with the
    async API, so a browser page's event loop runs while the GPU works."""
    run = _Decoding(model, prompts, _config(config, overrides), generator)
    return _steps(run, _read_async)


def generate(
    model,
    prompts,
    config=None,
    generator=None,
    tokenizer=None,
    return_finish_reasons=False,
    prompt_cache=None,
    **overrides,
):
    """New token ids per prompt (a list of lists; one list when given one prompt of ints).

    A row ends after a stop token (kept in its output), after max_new_tokens, when the
    sequence fills the model's context or, with a tokenizer and stop_strings, once its
    decoded text contains a stop string. With `return_finish_reasons`, also why each row
    ended ("stop_token", "stop_string", "length", "context"). A `prompt_cache`
    (PromptCache) keeps one sequence's KV cache from call to call (see TextGeneration).
    """
    config = _config(config, overrides)
    single = (
        isinstance(prompts, (list, tuple)) and bool(prompts) and not hasattr(prompts[0], "__len__")
    )
    if config.stop_strings and tokenizer is None:
        raise EmberError(
            "generate: stop_strings need a tokenizer to decode the text (pass tokenizer=...)",
            op="generate",
        )
    run = _Decoding(model, prompts, config, generator, prompt_cache)
    outs = [[] for _ in range(run.b)]
    reasons = [None] * run.b
    for nxt in _drive(_steps(run, _read)):
        for i, t in enumerate(nxt):
            if reasons[i]:
                continue
            outs[i].append(t)
            if (
                run.reasons[i] != STOP_TOKEN
                and config.stop_strings
                and any(
                    s in tokenizer.decode(outs[i], skip_special_tokens=True)
                    for s in config.stop_strings
                )
            ):
                reasons[i] = run.reasons[i] = "stop_string"  # the run pads this row now
            elif run.reasons[i]:
                reasons[i] = run.reasons[i]
        if all(reasons):
            break
    reasons = [r or run.reasons[i] for i, r in enumerate(reasons)]
    if single:
        return (outs[0], reasons[0]) if return_finish_reasons else outs[0]
    return (outs, reasons) if return_finish_reasons else outs


class TextGeneration:
    """Iterate (`for` or `async for`) to stream text deltas for one prompt (a string or
    token ids).

    After iteration: `token_ids` (the new ids, including a final stop token),
    `text` (the new text, cut before a stop string), `stop_reason` ('stop_token',
    'stop_string', 'length', or 'context' when the sequence filled the model's context).
    """

    def __init__(
        self,
        model,
        tokenizer,
        prompt,
        config=None,
        generator=None,
        add_special_tokens=True,
        prompt_cache=None,
        **overrides,
    ):
        self.model = model
        self.prompt_cache = prompt_cache
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
        self.cached_prompt_tokens = 0  # prompt tokens the prompt_cache already held

    def __iter__(self):
        return _drive(self._deltas(_read))

    def __aiter__(self):
        """The same deltas, `async for`: logits are read back with the async API (what a
        browser page needs to stay responsive while it generates)."""
        return self._deltas(_read_async)

    async def _deltas(self, read):
        run = _Decoding(
            self.model, [self.prompt_ids], self.config, self.generator, self.prompt_cache
        )
        self.cached_prompt_tokens = run.start
        decoder = IncrementalDecoder(self.tokenizer)
        watcher = StopStrings(self.config.stop_strings)
        async for nxt in _steps(run, read):
            t = nxt[0]
            self.token_ids.append(t)
            self.stop_reason = run.reasons[0]
            if self.stop_reason == STOP_TOKEN:
                break
            out, stopped = watcher.feed(decoder.push(t))
            self.text += out
            if out:
                yield out
            if stopped:
                self.stop_reason = "stop_string"
                return
        self.stop_reason = run.reasons[0]
        # What the decoder and the stop-string watcher still hold, at the end.
        out, stopped = watcher.feed(decoder.flush())
        out += "" if stopped else watcher.flush()
        if stopped:
            self.stop_reason = "stop_string"
        self.text += out
        if out:
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
