"""The input string cut into splits, each later turned into tokens."""

from .normalized import NormalizedString


class PreTokenizedString:
    """An ordered list of splits ``[normalized_string, tokens_or_None]``.

    A split whose tokens are already known (an added token) is left alone by
    `split`, `normalize` and `tokenize`.  Tokens are ``(id, value, start, end)``
    with start/end counted in chars of the split's normalized text.
    """

    __slots__ = ("original", "splits")

    def __init__(self, text):
        self.original = text
        self.splits = [[NormalizedString(text), None]]

    def split(self, fn):
        new = []
        for split in self.splits:
            if split[1] is not None:
                new.append(split)
                continue
            for piece in fn(split[0]):
                if piece.text:
                    new.append([piece, None])
        self.splits = new

    def split_with_tokens(self, fn):
        """fn(ns) -> [(ns_piece, tokens_or_None)] (used for added tokens)."""
        new = []
        for split in self.splits:
            if split[1] is not None:
                new.append(split)
                continue
            for piece, toks in fn(split[0]):
                if piece.text:
                    new.append([piece, toks])
        self.splits = new

    def normalize(self, fn):
        for ns, toks in self.splits:
            if toks is None:
                fn(ns)

    def tokenize(self, fn):
        for split in self.splits:
            if split[1] is None:
                split[1] = fn(split[0].text)

    def get_splits(self):
        """[(text, (start, end))] with original char offsets, like the reference's
        ``pre_tokenize_str``."""
        return [(ns.text, (ns.start, ns.end)) for ns, _ in self.splits]
