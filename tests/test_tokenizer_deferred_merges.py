"""Tokenizer.from_file(..., defer_merges=True) (Whisper's, which only decodes on its usual
path): the BPE merges are parsed and checked at the first encode, which then gives the
same ids as an eager load; a bad merge is the same FormatError, at that first encode."""

import json

import pytest

from ember.errors import FormatError
from ember.tokenizers import Tokenizer

VOCAB = {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "bc": 5}


def _bpe(merges):
    return json.dumps({"model": {"type": "BPE", "vocab": VOCAB, "merges": merges}})


def test_deferred_merges_encode_as_the_eager_load():
    text = _bpe(["a b", ["ab", "c"], "b c"])
    eager = Tokenizer.from_str(text)
    lazy = Tokenizer.from_str(text, defer_merges=True)
    assert lazy.model._pending is not None  # nothing built yet
    assert lazy.decode([4, 0]) == eager.decode([4, 0])  # decoding needs no merges
    assert lazy.model._pending is not None
    for s in ("abc", "ab", "bcab", "cba"):
        assert lazy.encode(s).ids == eager.encode(s).ids
    assert lazy.model._pending is None and lazy.model.merges == eager.model.merges


@pytest.mark.parametrize(
    "merges, message",
    [
        (["a d"], "model.merges is inconsistent"),
        (["a b c"], "model.merges[0]"),
        ([7], "model.merges[0]"),
    ],
)
def test_a_bad_merge_fails_at_load_eagerly_and_at_the_first_encode_deferred(merges, message):
    text = _bpe(merges)
    with pytest.raises(FormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Tokenizer.from_str(text)
    lazy = Tokenizer.from_str(text, defer_merges=True)
    for _ in range(2):  # the table is not left half-built: the error comes again
        with pytest.raises(FormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
            lazy.encode("ab")
