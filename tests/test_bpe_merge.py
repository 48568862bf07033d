"""BPE's heap-based merge loop (ember.tokenizers.bpe_merge): the same tokens as the
textbook rule (lowest rank first, leftmost among equals) on random small vocabularies,
the same ids as the reference `tokenizers` on them and on a 40 KB word (whose old
quadratic loop took 50 s)."""
import random

from helpers import require
from reference_bpe import train_byte_level_bpe

from ember.tokenizers import Tokenizer
from ember.tokenizers.bpe import BPE
from ember.tokenizers.bpe_merge import merge_symbols


def brute_force_merge(word, ranks):
    """The definition, step by step: [(piece, start, end)] of `word` after merging the
    lowest-rank adjacent pair (leftmost among equals) until none has a rank."""
    pieces = [(ch, i, i + 1) for i, ch in enumerate(word)]
    while True:
        best = None
        for k in range(len(pieces) - 1):
            r = ranks.get((pieces[k][0], pieces[k + 1][0]))
            if r is not None and (best is None or r < best[0]):
                best = (r, k)
        if best is None:
            return pieces
        k = best[1]
        a, b = pieces[k], pieces[k + 1]
        pieces[k:k + 2] = [(a[0] + b[0], a[1], b[2])]


def random_vocabulary(rng, alphabet, n_merges):
    """(vocab {piece: id}, merges [(a, b)]) where every merge joins two pieces already in
    the vocabulary; different pairs often make the same piece (ab+c, a+bc)."""
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    pieces = list(alphabet)
    merges, seen = [], set()
    for _ in range(n_merges * 4):
        if len(merges) == n_merges:
            break
        a, b = rng.choice(pieces), rng.choice(pieces)
        if (a, b) in seen or len(a) + len(b) > 6:
            continue
        seen.add((a, b))
        merges.append((a, b))
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            pieces.append(a + b)
    return vocab, merges


def _random_cases(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        alphabet = "abcd"[:rng.randint(1, 4)]
        vocab, merges = random_vocabulary(rng, alphabet, rng.randint(0, 25))
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(8)]
        yield vocab, merges, words


def test_merge_matches_brute_force_on_random_vocabularies():
    cases = 0
    for vocab, merges, words in _random_cases(seed=1234, count=300):
        table = {(vocab[a], vocab[b]): (rank, vocab[a + b]) for rank, (a, b) in enumerate(merges)}
        ranks = {(a, b): rank for rank, (a, b) in enumerate(merges)}
        inv = {i: p for p, i in vocab.items()}
        for word in words:
            symbols = [(vocab[ch], i, i + 1) for i, ch in enumerate(word)]
            got = [(inv[i], s, e) for i, s, e in merge_symbols(symbols, table)]
            assert got == brute_force_merge(word, ranks), (word, merges)
            cases += 1
    assert cases == 2400


def test_merge_matches_the_reference_on_random_vocabularies():
    tokenizers = require("tokenizers")
    for vocab, merges, words in _random_cases(seed=99, count=120):
        ref = tokenizers.models.BPE(vocab, merges)
        mine = BPE(vocab, merges)
        for word in words:
            want = [(t.id, t.value, t.offsets) for t in ref.tokenize(word)]
            assert [(i, v, (s, e)) for i, v, s, e in mine.tokenize(word)] == want, (word, merges)


def test_merge_of_a_single_symbol_and_of_nothing():
    assert merge_symbols([], {}) == []
    assert merge_symbols([(3, 0, 1)], {(3, 3): (0, 4)}) == [(3, 0, 1)]


def test_a_40kb_word_encodes_like_the_reference():
    """'the' * 13333 is one pre-token of 39,999 chars: merged whole, it must give the
    reference's ids (it took 30-50 s with the old quadratic loop; no timing is asserted)."""
    corpus = ["the theme then there", "thethe thethethe thethethethe"] * 20 + ["the" * k for k in range(1, 40)]
    ref = train_byte_level_bpe(corpus, vocab_size=400)
    mine = Tokenizer.from_str(ref.to_str())
    word = "the" * 13333
    want = ref.encode(word).ids
    assert len(want) < len(word) // 6  # long merged pieces, not single bytes
    assert mine.encode(word).ids == want
    # and again inside a sentence, where it is one pre-token among others
    text = "so " + word + " and then"
    assert mine.encode(text).ids == ref.encode(text).ids


def test_long_words_are_not_cached():
    """The word cache keeps only short words, so its memory follows the word count,
    not the input's length."""
    mine = BPE({"a": 0, "aa": 1}, [("a", "a")])
    long_word = "a" * (BPE.CACHE_MAX_CHARS + 1)
    assert [t[0] for t in mine.tokenize(long_word)] == [1] * (len(long_word) // 2) + [0]
    assert long_word not in mine._cache
    mine.tokenize("aaa")
    assert "aaa" in mine._cache
