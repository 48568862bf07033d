"""A conversation's KV cache, kept from one generation to the next.

A chat re-renders the whole history through its template every turn, so each prompt
starts with the previous prompt and reply. Without a kept cache every turn runs the whole
history through the model again (at 100 tokens/s a 1,000-token conversation waits 10 s
before its first new token); with one, a turn runs only the tokens after the longest
prefix the cache already holds.

    cache = PromptCache(model)
    for prompt in turns:
        for delta in TextGeneration(model, tokenizer, prompt, prompt_cache=cache): ...

The cache holds the keys and values of exactly the ids that went through the model (the
prompt and every fed new token: a run's last chosen token never went through it). A
prompt that differs from them (a re-tokenized reply, an edited turn, /reset) keeps only
the common prefix and recomputes the rest, so what is reused is always what the model
would have computed for those positions. The numbers differ from one whole pass only by
float rounding (the same positions in differently shaped products).
"""

from ..errors import EmberError


class PromptCache:
    """One sequence's KV cache and the ids it holds; for TextGeneration's `prompt_cache`."""

    def __init__(self, model):
        self.model = model
        self.cache = None
        self._ids = []  # the run's history list: prompt + chosen ids (it grows as it decodes)

    def held(self):
        """The ids whose keys and values the cache holds, positions 0 .. length-1."""
        return [] if self.cache is None else self._ids[: self.cache.length]

    def reset(self):
        """Forget the conversation (the cache's memory is kept for the next one)."""
        if self.cache is not None:
            self.cache.length = 0
        self._ids = []

    def prepare(self, prompt, total):
        """A cache of at least `total` positions holding the longest prefix of `prompt`
        it already has (at most all but its last token, whose logits the run needs), and
        that prefix's length: the run feeds prompt[start:]."""
        prompt = list(prompt)
        if not prompt:
            raise EmberError("PromptCache: the prompt has no tokens", op="prompt_cache")
        held = self.held()
        start = 0
        limit = min(len(held), len(prompt) - 1)
        while start < limit and held[start] == prompt[start]:
            start += 1
        if self.cache is None or self.cache.max_len < total:
            self._grow(total, start)
        self.cache.length = start
        self._ids = prompt[:start]
        return self.cache, start

    def follow(self, history):
        """The run's id list (prompt + chosen ids): the cache's positions are its prefix."""
        self._ids = history

    def _grow(self, total, keep):
        """A larger cache (doubling, so a long chat reallocates rarely; never past the
        model's context), with the first `keep` positions of the old one copied over."""
        old = self.cache
        size = total if old is None else max(total, 2 * old.max_len)
        new = self.model.new_cache(1, min(size, int(self.model.context_length)))
        if old is not None and keep:
            for src, dst in ((old.keys, new.keys), (old.values, new.values)):
                for a, b in zip(src, dst, strict=True):
                    b.narrow(2, 0, keep).copy_(a.narrow(2, 0, keep))
        self.cache = new
