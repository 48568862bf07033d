"""BPE: start from chars (or bytes) and apply merges, lowest rank first."""

from .bpe_merge import merge_symbols
from .dict_vocab import DictVocab
from .errors import EncodeError
from .word_cache import WordCache


class BPE(DictVocab, WordCache):
    def __init__(
        self,
        vocab,
        merges,
        unk_token=None,
        continuing_subword_prefix=None,
        end_of_word_suffix=None,
        fuse_unk=False,
        byte_fallback=False,
        ignore_merges=False,
        dropout=None,
    ):
        self._set_vocab(vocab)
        self.unk_token = unk_token
        self.continuing_subword_prefix = continuing_subword_prefix
        self.end_of_word_suffix = end_of_word_suffix
        self.fuse_unk = fuse_unk
        self.byte_fallback = byte_fallback
        self.ignore_merges = ignore_merges
        self.dropout = dropout  # accepted, not applied: encoding is deterministic
        self._merges = _merge_table(self.vocab, merges, len(continuing_subword_prefix or ""))
        self._pending = None
        self._cache = {}

    @classmethod
    def from_dict(cls, d, ctx):
        vocab = ctx.vocab(d)
        mctx = ctx.field("merges")
        merges = _merge_pairs(ctx.get(d, "merges", [], list), mctx)
        dropout = ctx.get(d, "dropout", None, (int, float))
        if dropout is not None and not 0.0 <= ctx.field("dropout").finite(dropout) <= 1.0:
            raise ctx.field("dropout").error("is %r, outside [0, 1]" % dropout)
        try:
            return cls(
                vocab,
                merges,
                unk_token=ctx.get(d, "unk_token", None, str),
                continuing_subword_prefix=ctx.get(d, "continuing_subword_prefix", None, str),
                end_of_word_suffix=ctx.get(d, "end_of_word_suffix", None, str),
                fuse_unk=ctx.get(d, "fuse_unk", False, bool),
                byte_fallback=ctx.get(d, "byte_fallback", False, bool),
                ignore_merges=ctx.get(d, "ignore_merges", False, bool),
                dropout=dropout,
            )
        except KeyError as exc:
            raise mctx.error("is inconsistent with the vocabulary: %s" % exc.args[0]) from None

    # -- the merge table, built now or at the first encode ---------------------------
    def defer_merges(self, raw, mctx):
        """Take tokenizer.json's merges `raw` (field `mctx`) in place of the current ones,
        parsed and checked only when the first word is encoded: a tokenizer that only
        decodes (Whisper's, 50k merges: 0.15-0.2 s of a cold start) never builds them. A
        bad merge is then the same FormatError at that first encode."""
        self._pending = (raw, mctx)

    @property
    def merges(self):
        """{(left_id, right_id): (rank, merged_id)}."""
        if self._pending is not None:
            raw, mctx = self._pending
            try:
                table = _merge_table(
                    self.vocab, _merge_pairs(raw, mctx), len(self.continuing_subword_prefix or "")
                )
            except KeyError as exc:
                raise mctx.error("is inconsistent with the vocabulary: %s" % exc.args[0]) from None
            self._merges, self._pending = table, None
        return self._merges

    @merges.setter
    def merges(self, table):
        self._merges, self._pending = table, None

    # -- encoding -------------------------------------------------------------------
    def _initial_symbols(self, word):
        """[(id, start, end)] for the chars of word (before any merge)."""
        vocab = self.vocab
        prefix = self.continuing_subword_prefix
        suffix = self.end_of_word_suffix
        last = len(word) - 1
        syms = []
        unk = None  # pending (unk_id, start, end)
        for i, ch in enumerate(word):
            s = ch
            if i > 0 and prefix:
                s = prefix + s
            if i == last and suffix:
                s = s + suffix
            tid = vocab.get(s)
            if tid is not None:
                if unk is not None:
                    syms.append(unk)
                    unk = None
                syms.append((tid, i, i + 1))
                continue
            if self.byte_fallback:
                ids = [vocab.get("<0x%02X>" % b) for b in s.encode("utf-8", "surrogatepass")]
                if None not in ids:
                    # (like the reference, a pending unk is emitted after these)
                    syms.extend((b, i, i + 1) for b in ids)
                    continue
            if self.unk_token is not None:
                uid = vocab.get(self.unk_token)
                if uid is None:
                    raise EncodeError(
                        "BPE: the unk_token %r is not in the vocabulary" % self.unk_token
                    )
                if unk is not None and self.fuse_unk:
                    unk = (unk[0], unk[1], i + 1)
                else:
                    if unk is not None:
                        syms.append(unk)
                    unk = (uid, i, i + 1)
        if unk is not None:
            syms.append(unk)
        return syms

    def _tokenize_uncached(self, word):
        if self.ignore_merges and word in self.vocab:
            return [(self.vocab[word], word, 0, len(word))]
        vocab_r = self.vocab_r
        syms = merge_symbols(self._initial_symbols(word), self.merges)
        return [(tid, vocab_r[tid], s, e) for tid, s, e in syms]


def _merge_pairs(raw, mctx):
    """tokenizer.json's merges ("left right" strings or [left, right] lists) as pairs."""
    merges = []
    for i, m in enumerate(raw):
        if isinstance(m, str):
            parts = m.split(" ")
            if len(parts) != 2:
                raise mctx.item(i).error("%r is not 'left right'" % m)
            merges.append((parts[0], parts[1]))
        elif isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m):
            merges.append((m[0], m[1]))
        else:
            raise mctx.item(i).error("must be 'left right' or [left, right]")
    return merges


def _merge_table(vocab, merges, prefix_len):
    """{(left_id, right_id): (rank, merged_id)}; a KeyError names a merge whose part or
    result is not in the vocabulary."""
    table = {}
    for rank, (a, b) in enumerate(merges):
        try:
            a_id = vocab[a]
            b_id = vocab[b]
        except KeyError as exc:
            raise KeyError(
                "BPE merge %d (%r, %r): %r is not in the vocabulary" % (rank, a, b, exc.args[0])
            ) from None
        new = a + b[prefix_len:]
        new_id = vocab.get(new)
        if new_id is None:
            raise KeyError(
                "BPE merge %d (%r, %r): the result %r is not in the vocabulary" % (rank, a, b, new)
            )
        table[(a_id, b_id)] = (rank, new_id)  # a repeated pair: the last one wins
    return table
