"""WordLevel: each word is looked up whole."""

from .dict_vocab import DictVocab
from .errors import EncodeError


class WordLevel(DictVocab):
    def __init__(self, vocab, unk_token="<unk>"):
        self._set_vocab(vocab)
        self.unk_token = unk_token

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(ctx.vocab(d), ctx.get(d, "unk_token", "<unk>", str))

    def tokenize(self, word):
        tid = self.vocab.get(word)
        if tid is not None:
            return [(tid, word, 0, len(word))]
        uid = self.vocab.get(self.unk_token)
        if uid is None:
            raise EncodeError(
                "WordLevel: the unk_token %r is not in the vocabulary" % self.unk_token
            )
        return [(uid, self.unk_token, 0, len(word))]
