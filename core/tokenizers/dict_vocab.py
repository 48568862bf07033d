"""The vocabulary lookups shared by the models that keep a token -> id dict (BPE,
WordPiece, WordLevel); Unigram keeps a scored list and has its own."""


class DictVocab:
    """Needs `self.vocab` (token -> id) and `self.vocab_r` (id -> token)."""

    def token_to_id(self, token):
        return self.vocab.get(token)

    def id_to_token(self, i):
        return self.vocab_r.get(i)

    def get_vocab(self):
        return dict(self.vocab)

    def get_vocab_size(self):
        return len(self.vocab)
