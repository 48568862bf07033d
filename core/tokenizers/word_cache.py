"""Remembering each word's tokens, for the models whose segmentation costs (BPE's merges,
Unigram's Viterbi): the same words come back again and again in text."""


class WordCache:
    """`tokenize(word)` through a dict of up to CACHE_CAPACITY words, emptied whole when
    full so memory stays bounded. A subclass sets `self._cache = {}` and implements
    `_tokenize_uncached(word)`: a list of (id, token, start, end)."""

    CACHE_CAPACITY = 10000

    def tokenize(self, word):
        if not word:
            return []
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        out = self._tokenize_uncached(word)
        if len(self._cache) >= self.CACHE_CAPACITY:
            self._cache.clear()
        self._cache[word] = out
        return out
