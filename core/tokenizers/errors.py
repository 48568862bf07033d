"""The tokenizer's own error for inputs its file's settings cannot encode."""

from ..errors import EmberError


class EncodeError(EmberError, ValueError):
    """This input cannot be encoded with this tokenizer's settings: a char with no
    token and no unknown token to stand for it, a truncation that cannot be met, a pair
    given to a template that has none (the reference fails on these inputs too)."""
