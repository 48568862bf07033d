"""WordPiece: greedy longest-match-first over a vocabulary (BERT)."""

from .dict_vocab import DictVocab
from .errors import EncodeError


class WordPiece(DictVocab):
    def __init__(
        self, vocab, unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=100
    ):
        self._set_vocab(vocab)
        self.unk_token = unk_token
        self.continuing_subword_prefix = continuing_subword_prefix
        self.max_input_chars_per_word = max_input_chars_per_word
        self._max_len = max((len(t) for t in self.vocab), default=0)

    @classmethod
    def from_dict(cls, d, ctx):
        vocab = ctx.vocab(d)
        return cls(
            vocab,
            unk_token=ctx.get(d, "unk_token", "[UNK]", str),
            continuing_subword_prefix=ctx.get(d, "continuing_subword_prefix", "##", str),
            max_input_chars_per_word=ctx.int_in(d, "max_input_chars_per_word", 100),
        )

    def _unk(self, n):
        uid = self.vocab.get(self.unk_token)
        if uid is None:
            raise EncodeError(
                "WordPiece: the unk_token %r is not in the vocabulary" % self.unk_token
            )
        return [(uid, self.unk_token, 0, n)]

    def tokenize(self, word):
        n = len(word)
        if n > self.max_input_chars_per_word:
            return self._unk(n)
        vocab = self.vocab
        tid = vocab.get(word)
        if tid is not None:
            return [(tid, word, 0, n)]
        prefix = self.continuing_subword_prefix
        max_len = self._max_len
        out = []
        start = 0
        while start < n:
            end = min(n, start + max_len)
            found = None
            while start < end:
                sub = word[start:end]
                if start > 0:
                    sub = prefix + sub
                tid = vocab.get(sub)
                if tid is not None:
                    found = (tid, sub, start, end)
                    break
                end -= 1
            if found is None:
                return self._unk(n)
            out.append(found)
            start = end
        return out
