"""Remembering each word's tokens, for the models whose segmentation costs (BPE's merges,
Unigram's Viterbi): the same words come back again and again in text."""


class WordCache:
    """`tokenize(word)` through a dict of up to CACHE_CAPACITY words, emptied whole when
    full. Only words shorter than CACHE_MAX_CHARS are kept (as the reference does): long
    ones rarely repeat, and keeping them would let the cache's memory grow with the
    input rather than with its word count. A subclass sets `self._cache = {}` and
    implements `_tokenize_uncached(word)`: a list of (id, token, start, end)."""

    CACHE_CAPACITY = 10000
    CACHE_MAX_CHARS = 256

    def tokenize(self, word):
        if not word:
            return []
        hit = self._cache.get(word)
        if hit is not None:
            return hit
        out = self._tokenize_uncached(word)
        if len(word) < self.CACHE_MAX_CHARS:
            if len(self._cache) >= self.CACHE_CAPACITY:
                self._cache.clear()
            self._cache[word] = out
        return out
