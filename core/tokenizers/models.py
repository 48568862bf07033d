"""The model section of tokenizer.json: WordPiece, BPE, Unigram or WordLevel.

A model turns one word into tokens ``(id, value, start, end)`` (start/end in
chars of the word) and maps ids and token strings both ways.
"""

from .bpe import BPE
from .unigram import Unigram
from .wordlevel import WordLevel
from .wordpiece import WordPiece

REGISTRY = {
    "BPE": BPE.from_dict,
    "WordPiece": WordPiece.from_dict,
    "Unigram": Unigram.from_dict,
    "WordLevel": WordLevel.from_dict,
}


def _guess_type(d):
    # Old files have no "type": tell the models apart by their fields.
    if "merges" in d:
        return "BPE"
    if isinstance(d.get("vocab"), list):
        return "Unigram"
    if "continuing_subword_prefix" in d or "max_input_chars_per_word" in d:
        return "WordPiece"
    return "WordLevel"


def from_dict(d, ctx):
    d = ctx.obj(d)
    t = d.get("type")
    if t is None:
        t = _guess_type(d)
    elif not isinstance(t, str):
        raise ctx.field("type").error("must be a string")
    maker = REGISTRY.get(t)
    if maker is None:
        raise ctx.unsupported(t)
    return maker(d, ctx)


__all__ = ["BPE", "Unigram", "WordLevel", "WordPiece", "from_dict"]
