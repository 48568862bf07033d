"""Encoding: the result of encoding one input (or one pair of inputs)."""


class Encoding:
    """ids, tokens, type_ids, attention_mask, offsets and friends, all the same length.

    ``offsets`` are (start, end) char offsets into the input string the token came
    from ((0, 0) for special and padding tokens); ``word_ids`` gives the index of
    the pre-tokenized word (None for special/padding tokens); ``sequence_ids`` is
    0 or 1 for tokens of the first or second input, None otherwise.
    """

    __slots__ = (
        "ids",
        "type_ids",
        "tokens",
        "offsets",
        "attention_mask",
        "special_tokens_mask",
        "word_ids",
        "sequence_ids",
        "overflowing",
    )

    def __init__(
        self,
        ids=None,
        type_ids=None,
        tokens=None,
        offsets=None,
        attention_mask=None,
        special_tokens_mask=None,
        word_ids=None,
        sequence_ids=None,
    ):
        self.ids = ids if ids is not None else []
        n = len(self.ids)
        self.type_ids = type_ids if type_ids is not None else [0] * n
        self.tokens = tokens if tokens is not None else []
        self.offsets = offsets if offsets is not None else [(0, 0)] * n
        self.attention_mask = attention_mask if attention_mask is not None else [1] * n
        self.special_tokens_mask = (
            special_tokens_mask if special_tokens_mask is not None else [0] * n
        )
        self.word_ids = word_ids if word_ids is not None else [None] * n
        self.sequence_ids = sequence_ids if sequence_ids is not None else [0] * n
        self.overflowing = []  # truncation keeps no overflow windows (stride is not supported)

    @classmethod
    def special(cls, ids, tokens, type_id):
        n = len(ids)
        return cls(
            list(ids),
            [type_id] * n,
            list(tokens),
            [(0, 0)] * n,
            [1] * n,
            [1] * n,
            [None] * n,
            [None] * n,
        )

    def __len__(self):
        return len(self.ids)

    def __repr__(self):
        return (
            "Encoding(num_tokens=%d, attributes=[ids, type_ids, tokens, offsets, "
            "attention_mask, special_tokens_mask, word_ids, sequence_ids])" % len(self.ids)
        )

    @property
    def words(self):
        return self.word_ids

    @property
    def n_sequences(self):
        return len({s for s in self.sequence_ids if s is not None}) or 1

    def set_type_ids(self, type_id):
        self.type_ids = [type_id] * len(self.ids)

    def set_sequence_id(self, seq):
        self.sequence_ids = [seq] * len(self.ids)

    @staticmethod
    def merge(encodings):
        out = Encoding()
        for e in encodings:
            out.ids.extend(e.ids)
            out.type_ids.extend(e.type_ids)
            out.tokens.extend(e.tokens)
            out.offsets.extend(e.offsets)
            out.attention_mask.extend(e.attention_mask)
            out.special_tokens_mask.extend(e.special_tokens_mask)
            out.word_ids.extend(e.word_ids)
            out.sequence_ids.extend(e.sequence_ids)
        return out

    def _fields(self):
        return (
            "ids",
            "type_ids",
            "tokens",
            "offsets",
            "attention_mask",
            "special_tokens_mask",
            "word_ids",
            "sequence_ids",
        )

    def truncate(self, max_length, stride=0, direction="right"):
        """Keep at most max_length tokens, dropping from the right or the left."""
        if max_length >= len(self.ids):
            return
        for name in self._fields():
            values = getattr(self, name)
            if direction == "left":
                setattr(self, name, values[len(values) - max_length :] if max_length else [])
            else:
                setattr(self, name, values[:max_length])

    def pad(self, length, pad_id=0, pad_type_id=0, pad_token="[PAD]", direction="right"):
        """Pad up to `length` tokens (never truncates)."""
        n = length - len(self.ids)
        if n <= 0:
            return
        extra = {
            "ids": [pad_id] * n,
            "type_ids": [pad_type_id] * n,
            "tokens": [pad_token] * n,
            "offsets": [(0, 0)] * n,
            "attention_mask": [0] * n,
            "special_tokens_mask": [1] * n,
            "word_ids": [None] * n,
            "sequence_ids": [None] * n,
        }
        for name in self._fields():
            if direction == "left":
                setattr(self, name, extra[name] + getattr(self, name))
            else:
                getattr(self, name).extend(extra[name])
