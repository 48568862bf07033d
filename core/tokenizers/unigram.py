"""Unigram: the most likely segmentation (Viterbi) under the pieces' log-probabilities."""

from .errors import EncodeError
from .word_cache import WordCache

UNK_PENALTY = 10.0


class Unigram(WordCache):
    def __init__(self, vocab, unk_id=None, byte_fallback=False):
        self.vocab = [(str(p), float(s)) for p, s in vocab]
        if unk_id is not None and not 0 <= unk_id < len(self.vocab):
            raise ValueError("Unigram: unk_id %d is outside the vocabulary" % unk_id)
        self.unk_id = unk_id
        self.byte_fallback = byte_fallback
        self.token_to_ids = {}
        for i, (piece, _) in enumerate(self.vocab):
            self.token_to_ids[piece] = i  # a repeated piece: the last id wins
        # piece -> (id, score) for the pieces reachable through token_to_ids
        self._pieces = {p: (i, self.vocab[i][1]) for p, i in self.token_to_ids.items()}
        self.min_score = min((s for _, s in self.vocab), default=0.0)
        self._max_len = max((len(p) for p in self._pieces), default=1)
        self._cache = {}

    @classmethod
    def from_dict(cls, d, ctx):
        raw = ctx.get(d, "vocab", kind=list)
        vctx = ctx.field("vocab")
        vocab = []
        for i, item in enumerate(raw):
            if (
                not isinstance(item, (list, tuple))
                or len(item) != 2
                or not isinstance(item[0], str)
            ):
                raise vctx.item(i).error("must be [piece, score]")
            vocab.append((item[0], vctx.item(i).item(1).finite(item[1])))
        unk_id = ctx.int_in(d, "unk_id", None)
        if unk_id is not None and not 0 <= unk_id < len(vocab):
            raise ctx.field("unk_id").error(
                "%d is outside the vocabulary (%d pieces)" % (unk_id, len(vocab))
            )
        return cls(vocab, unk_id, ctx.get(d, "byte_fallback", False, bool))

    def encode(self, sentence):
        """The best segmentation as a list of strings (unknown runs fused)."""
        if not sentence:
            return []
        pieces = self._pieces
        n = len(sentence)
        unk_score = self.min_score - UNK_PENALTY
        unk_id = self.unk_id
        max_len = self._max_len
        # best[k] = (score, start, id) of the best path ending at char k
        best_score = [0.0] * (n + 1)
        best_start = [-1] * (n + 1)
        best_id = [0] * (n + 1)
        for start in range(n):
            base = best_score[start]
            has_single = False
            stop = min(n, start + max_len)
            for end in range(start + 1, stop + 1):
                hit = pieces.get(sentence[start:end])
                if hit is None:
                    continue
                cand = hit[1] + base
                if best_start[end] < 0 or cand > best_score[end]:
                    best_score[end] = cand
                    best_start[end] = start
                    best_id[end] = hit[0]
                if end == start + 1:
                    has_single = True
            if not has_single:
                if unk_id is None:
                    raise EncodeError(
                        "Unigram: %r has no piece and the model has no unk_id" % sentence[start]
                    )
                end = start + 1
                cand = unk_score + base
                if best_start[end] < 0 or cand > best_score[end]:
                    best_score[end] = cand
                    best_start[end] = start
                    best_id[end] = unk_id
        results = []
        pending_unk = []
        end = n
        while end > 0:
            start = best_start[end]
            if unk_id is not None and best_id[end] == unk_id:
                pending_unk.append(sentence[start:end])
            else:
                if pending_unk:
                    results.append("".join(reversed(pending_unk)))
                    pending_unk = []
                results.append(sentence[start:end])
            end = start
        if pending_unk:
            results.append("".join(reversed(pending_unk)))
        results.reverse()
        return results

    def _tokenize_uncached(self, word):
        out = []
        offset = 0
        ids = self.token_to_ids
        for piece in self.encode(word):
            n = len(piece)
            tid = ids.get(piece)
            if tid is None:
                if self.byte_fallback:
                    byte_ids = [
                        ids.get("<0x%02X>" % b) for b in piece.encode("utf-8", "surrogatepass")
                    ]
                    if None not in byte_ids:
                        for b, bid in zip(
                            piece.encode("utf-8", "surrogatepass"), byte_ids, strict=True
                        ):
                            out.append((bid, "<0x%02X>" % b, offset, offset + n))
                        offset += n
                        continue
                if self.unk_id is None:
                    raise EncodeError("Unigram: no unk_id for %r" % piece)
                tid = self.unk_id
            out.append((tid, piece, offset, offset + n))
            offset += n
        return out

    def token_to_id(self, token):
        return self.token_to_ids.get(token)

    def id_to_token(self, i):
        if isinstance(i, int) and 0 <= i < len(self.vocab):
            return self.vocab[i][0]
        return None

    def get_vocab(self):
        return dict(self.token_to_ids)

    def get_vocab_size(self):
        return len(self.vocab)
