"""The vocabulary lookups shared by the models that keep a token -> id dict (BPE,
WordPiece, WordLevel); Unigram keeps a scored list and has its own."""


class DictVocab:
    """Needs `self.vocab` (token -> id) and `self.vocab_r` (id -> token): `_set_vocab`
    makes both."""

    def _set_vocab(self, vocab):
        """A copy of `vocab` and its reverse, where an id given twice names its last token
        (as a dict comprehension over the items would; built by dict and zip, in C: a
        Whisper or Gemma vocabulary's 50-260k entries in 3-15 ms against 14-70 ms)."""
        self.vocab = dict(vocab)
        self.vocab_r = dict(zip(self.vocab.values(), self.vocab.keys(), strict=True))

    def token_to_id(self, token):
        return self.vocab.get(token)

    def id_to_token(self, i):
        return self.vocab_r.get(i)

    def get_vocab(self):
        return dict(self.vocab)

    def get_vocab_size(self):
        return len(self.vocab)
