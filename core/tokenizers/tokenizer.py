"""Tokenizer: the whole pipeline read from a Hugging Face tokenizer.json.

added tokens → normalizer → pre-tokenizer → model → truncation → post-processor
→ padding; and back again with `decode`.
"""

import operator
import os
import stat

from . import _json
from . import decoders as _decoders
from . import models as _models
from . import normalizers as _normalizers
from . import post_processors as _post
from . import pre_tokenizers as _pre
from ._config import Ctx
from .added_vocabulary import AddedToken, AddedVocabulary
from .encoding import Encoding
from .errors import EncodeError

_STRATEGIES = {
    "LongestFirst": "longest_first",
    "OnlyFirst": "only_first",
    "OnlySecond": "only_second",
}
_DIRECTIONS = {"Right": "right", "Left": "left"}
_MAX_PAD = 1 << 20  # a padded length from the file: beyond any model's context, and bounded memory


def _deferrable(model):
    """A BPE model section (named, or told by its merges) with a list of merges."""
    return (
        isinstance(model, dict)
        and model.get("type", "BPE") == "BPE"
        and isinstance(model.get("merges"), list)
        and len(model["merges"]) > 0
    )


class Tokenizer:
    def __init__(self, model):
        self.model = model
        self._normalizer = None
        self.pre_tokenizer = None
        self.post_processor = None
        self.decoder = None
        self._added = AddedVocabulary()
        self._padding = None
        self._truncation = None

    # -- loading ----------------------------------------------------------------------
    @classmethod
    def from_file(cls, path, defer_merges=False):
        """Read a tokenizer.json file. With `defer_merges`, a BPE model's merges are parsed
        and checked at the first encode (BPE.defer_merges): for a tokenizer that decodes."""
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):  # a directory, or a FIFO that would block
                raise Ctx(str(path), "(file)").error("is not a regular file")
            # bytes decoded in one call: a text file's reader translates newlines as it
            # goes (a Whisper tokenizer's 2.2 MB: 7 ms against 22), and JSON has no raw
            # newline inside a string for the translation to change
            with open(path, "rb") as f:
                text = f.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Ctx(str(path), "(file)").error("cannot be read: %s" % exc) from None
        return cls.from_str(text, source=str(path), defer_merges=defer_merges)

    @classmethod
    def from_str(cls, json_text, source="tokenizer.json", defer_merges=False):
        """Parse tokenizer.json text (floats are read exactly as the reference reads them)."""
        try:
            d = _json.loads(json_text)
        except RecursionError:
            raise Ctx(source, "(top level)").error(
                "is nested too deeply to be a tokenizer"
            ) from None
        except ValueError as exc:
            raise Ctx(source, "").error("is not valid JSON: %s" % exc) from None
        return cls.from_dict(d, source=source, defer_merges=defer_merges)

    @classmethod
    def from_buffer(cls, data, source="tokenizer.json"):
        return cls.from_str(bytes(data).decode("utf-8"), source=source)

    @classmethod
    def from_dict(cls, d, source="tokenizer.json", defer_merges=False):
        root = Ctx(source, "")
        if not isinstance(d, dict):
            raise Ctx(source, "(top level)").error("must be a JSON object")
        if "model" not in d or d["model"] is None:
            raise root.field("model").error("is missing")
        model, deferred = d["model"], None
        if defer_merges and _deferrable(model):
            model, deferred = dict(model, merges=[]), model["merges"]
        tok = cls(_models.from_dict(model, root.field("model")))
        if deferred is not None:
            tok.model.defer_merges(deferred, root.field("model").field("merges"))
        tok._normalizer = _normalizers.from_dict(d.get("normalizer"), root.field("normalizer"))
        tok.pre_tokenizer = _pre.from_dict(d.get("pre_tokenizer"), root.field("pre_tokenizer"))
        tok.post_processor = _post.from_dict(d.get("post_processor"), root.field("post_processor"))
        tok.decoder = _decoders.from_dict(d.get("decoder"), root.field("decoder"))
        actx = root.field("added_tokens")
        for i, t in enumerate(root.get(d, "added_tokens", [], list)):
            ictx = actx.item(i)
            ictx.obj(t)
            token = AddedToken(
                ictx.get(t, "content", kind=str),
                single_word=ictx.get(t, "single_word", False, bool),
                lstrip=ictx.get(t, "lstrip", False, bool),
                rstrip=ictx.get(t, "rstrip", False, bool),
                normalized=ictx.get(t, "normalized", None, bool),
                special=ictx.get(t, "special", False, bool),
            )
            tid = ictx.int_in(t, "id", None)
            if tid is None:
                tid = tok._next_id(token.content)
            tok._added.add(token, tid)
        tok._added.refresh(tok._normalizer)
        tok._truncation = _truncation_from_json(d.get("truncation"), root.field("truncation"))
        tok._padding = _padding_from_json(d.get("padding"), root.field("padding"))
        return tok

    # -- components -------------------------------------------------------------------
    @property
    def normalizer(self):
        return self._normalizer

    @normalizer.setter
    def normalizer(self, value):
        self._normalizer = value
        self._added.refresh(value)

    # -- vocabulary ---------------------------------------------------------------------
    def token_to_id(self, token):
        tid = self._added.token_to_id(token)
        return tid if tid is not None else self.model.token_to_id(token)

    def id_to_token(self, i):
        i = operator.index(i)  # numpy integers too
        tok = self._added.id_to_token(i)
        return tok if tok is not None else self.model.id_to_token(i)

    def get_vocab(self, with_added_tokens=True):
        vocab = self.model.get_vocab()
        if with_added_tokens:
            vocab.update(self._added.content_to_id)
        return vocab

    def get_vocab_size(self, with_added_tokens=True):
        if not with_added_tokens:
            return self.model.get_vocab_size()
        return len(self.get_vocab(True))

    def get_added_tokens_decoder(self):
        return dict(self._added.tokens)

    def _next_id(self, content):
        tid = self.token_to_id(content)
        if tid is not None:
            return tid
        size = self.model.get_vocab_size()
        ids = list(self._added.tokens)
        if ids and (max(ids) >= size or size == 0):
            return max(ids) + 1
        return size

    def _add(self, tokens, special):
        count = 0
        for t in tokens:
            if isinstance(t, str):
                t = AddedToken(t, special=special)
            elif special:
                t = AddedToken(t.content, t.single_word, t.lstrip, t.rstrip, t.normalized, True)
            if not t.content:
                continue
            old = self._added.token_to_id(t.content)
            if old is not None and self._added.tokens.get(old) == t and not special:
                continue
            self._added.add(t, old if old is not None else self._next_id(t.content))
            count += 1
        self._added.refresh(self._normalizer)
        return count

    def add_tokens(self, tokens):
        """Add tokens (str or AddedToken) to the vocabulary; returns how many were new."""
        return self._add(tokens, special=False)

    def add_special_tokens(self, tokens):
        return self._add(tokens, special=True)

    # -- padding and truncation -----------------------------------------------------------
    def enable_padding(
        self,
        direction="right",
        pad_id=0,
        pad_type_id=0,
        pad_token="[PAD]",
        length=None,
        pad_to_multiple_of=None,
    ):
        if direction not in ("right", "left"):
            raise ValueError("direction must be 'right' or 'left'")
        self._padding = {
            "length": length,
            "pad_to_multiple_of": pad_to_multiple_of,
            "pad_id": pad_id,
            "pad_token": pad_token,
            "pad_type_id": pad_type_id,
            "direction": direction,
        }

    def no_padding(self):
        self._padding = None

    @property
    def padding(self):
        return dict(self._padding) if self._padding is not None else None

    def enable_truncation(self, max_length, stride=0, strategy="longest_first", direction="right"):
        if strategy not in ("longest_first", "only_first", "only_second"):
            raise ValueError("strategy must be 'longest_first', 'only_first' or 'only_second'")
        if direction not in ("right", "left"):
            raise ValueError("direction must be 'right' or 'left'")
        self._truncation = {
            "max_length": max_length,
            "stride": stride,
            "strategy": strategy,
            "direction": direction,
        }

    def no_truncation(self):
        self._truncation = None

    @property
    def truncation(self):
        return dict(self._truncation) if self._truncation is not None else None

    def num_special_tokens_to_add(self, is_pair):
        return self.post_processor.added_tokens(is_pair) if self.post_processor is not None else 0

    # -- encoding -------------------------------------------------------------------------
    def _encode_text(self, text, type_id, word_idx=None):
        if not isinstance(text, str):
            raise TypeError("expected a str to encode, got %s" % type(text).__name__)
        pts = self._added.extract_and_normalize(self._normalizer, text)
        if self.pre_tokenizer is not None:
            self.pre_tokenizer.pre_tokenize(pts)
        pts.tokenize(self.model.tokenize)
        ids, tokens, offsets, words = [], [], [], []
        for k, (ns, toks) in enumerate(pts.splits):
            w = k if word_idx is None else word_idx
            al = ns.align
            base = ns.start
            for tid, value, s, e in toks:
                ids.append(tid)
                tokens.append(value)
                if al is None:
                    offsets.append((base + s, base + e))
                elif e > s:
                    offsets.append((al[s][0], al[e - 1][1]))
                else:
                    offsets.append(ns.original_span(s, s))
                words.append(w)
        n = len(ids)
        return Encoding(ids, [type_id] * n, tokens, offsets, [1] * n, [0] * n, words, [0] * n)

    def _encode_input(self, seq, type_id, is_pretokenized):
        if not is_pretokenized:
            return self._encode_text(seq, type_id)
        if isinstance(seq, str):
            raise TypeError("is_pretokenized=True expects a list of words, not a str")
        return Encoding.merge([self._encode_text(w, type_id, i) for i, w in enumerate(seq)])

    def encode(self, sequence, pair=None, is_pretokenized=False, add_special_tokens=True):
        """Encode one input (or a pair) into an Encoding, applying truncation,
        the post-processor's special tokens and padding."""
        enc = self._encode_input(sequence, 0, is_pretokenized)
        penc = self._encode_input(pair, 1, is_pretokenized) if pair is not None else None
        return self.post_process(enc, penc, add_special_tokens)

    def encode_batch(self, inputs, is_pretokenized=False, add_special_tokens=True):
        """Encode several inputs (str, or (first, second) pairs); padding applies
        across the batch."""
        out = []
        for item in inputs:
            if is_pretokenized:
                is_pair = isinstance(item, tuple) or (
                    isinstance(item, list)
                    and len(item) == 2
                    and all(isinstance(x, (list, tuple)) for x in item)
                )
            else:
                is_pair = isinstance(item, (tuple, list))
            if is_pair:
                if len(item) != 2:
                    raise ValueError("a pair input must have exactly two sequences")
                out.append(self.encode(item[0], item[1], is_pretokenized, add_special_tokens))
            else:
                out.append(self.encode(item, None, is_pretokenized, add_special_tokens))
        if self._padding is not None:
            _pad_encodings(out, self._padding)
        return out

    def post_process(self, encoding, pair=None, add_special_tokens=True):
        trunc = self._truncation
        if trunc is not None:
            n_added = self.num_special_tokens_to_add(pair is not None) if add_special_tokens else 0
            # A max_length below the special tokens' count leaves the input whole,
            # as in the reference (whose unsigned subtraction wraps around there).
            if trunc["max_length"] >= n_added:
                _truncate_encodings(
                    encoding,
                    pair,
                    trunc["max_length"] - n_added,
                    trunc["strategy"],
                    trunc["direction"],
                )
        if self.post_processor is not None:
            final = self.post_processor.process(encoding, pair, add_special_tokens)
        else:
            final = _post.default_process(encoding, pair, add_special_tokens)
        if self._padding is not None:
            _pad_encodings([final], self._padding)
        return final

    # -- decoding -------------------------------------------------------------------------
    def decode(self, ids, skip_special_tokens=True):
        tokens = []
        for i in ids:
            tok = self.id_to_token(i)
            if tok is None:
                continue
            if skip_special_tokens and self._added.is_special(tok):
                continue
            tokens.append(tok)
        if self.decoder is not None:
            return self.decoder.decode(tokens)
        return " ".join(tokens)

    def decode_batch(self, sequences, skip_special_tokens=True):
        return [self.decode(ids, skip_special_tokens) for ids in sequences]


def _truncate_encodings(enc, pair, max_length, strategy, direction):
    if max_length == 0:
        enc.truncate(0, 0, direction)
        if pair is not None:
            pair.truncate(0, 0, direction)
        return
    total = len(enc) + (len(pair) if pair is not None else 0)
    if total <= max_length:
        return
    to_remove = total - max_length
    if strategy == "longest_first":
        if pair is None:
            enc.truncate(total - to_remove, 0, direction)
            return
        n1, n2 = len(enc), len(pair)
        swap = n1 > n2
        if swap:
            n1, n2 = n2, n1
        n2 = n1 if n1 > max_length else max(n1, max_length - n1)
        if n1 + n2 > max_length:
            n1 = max_length // 2
            n2 = n1 + max_length % 2
        if swap:
            n1, n2 = n2, n1
        enc.truncate(n1, 0, direction)
        pair.truncate(n2, 0, direction)
        return
    if strategy == "only_first":
        target = enc
    else:
        if pair is None:
            raise EncodeError("Truncation error: Second sequence not provided")
        target = pair
    if len(target) > to_remove:
        target.truncate(len(target) - to_remove, 0, direction)
    else:
        raise EncodeError(
            "Truncation error: Sequence to truncate too short to respect the provided max_length"
        )


def _pad_encodings(encodings, params):
    if not encodings:
        return
    length = params["length"]
    if length is None:
        length = max(len(e) for e in encodings)
    multiple = params.get("pad_to_multiple_of")
    if multiple and length % multiple:
        length += multiple - length % multiple
    for e in encodings:
        e.pad(
            length,
            params["pad_id"],
            params["pad_type_id"],
            params["pad_token"],
            params["direction"],
        )


def _truncation_from_json(d, ctx):
    if d is None:
        return None
    ctx.obj(d)
    strategy = ctx.get(d, "strategy", "LongestFirst", str)
    if strategy not in _STRATEGIES:
        raise ctx.field("strategy").error(
            "%r is not one of %s" % (strategy, ", ".join(_STRATEGIES))
        )
    direction = ctx.get(d, "direction", "Right", str)
    if direction not in _DIRECTIONS:
        raise ctx.field("direction").error("%r is not 'Right' or 'Left'" % direction)
    max_length = ctx.int_in(d, "max_length")
    return {
        "max_length": max_length,
        "stride": ctx.int_in(d, "stride", 0),
        "strategy": _STRATEGIES[strategy],
        "direction": _DIRECTIONS[direction],
    }


def _padding_from_json(d, ctx):
    if d is None:
        return None
    ctx.obj(d)
    strategy = ctx.get(d, "strategy", "BatchLongest")
    if strategy == "BatchLongest":
        length = None
    elif isinstance(strategy, dict) and set(strategy) == {"Fixed"}:
        length = ctx.field("strategy").int_in(strategy, "Fixed", hi=_MAX_PAD)
    else:
        raise ctx.field("strategy").error("must be 'BatchLongest' or {'Fixed': length}")
    direction = ctx.get(d, "direction", "Right", str)
    if direction not in _DIRECTIONS:
        raise ctx.field("direction").error("%r is not 'Right' or 'Left'" % direction)
    return {
        "length": length,
        "pad_to_multiple_of": ctx.int_in(d, "pad_to_multiple_of", None, 1, _MAX_PAD),
        "pad_id": ctx.int_in(d, "pad_id", 0),
        "pad_token": ctx.get(d, "pad_token", "[PAD]", str),
        "pad_type_id": ctx.int_in(d, "pad_type_id", 0),
        "direction": _DIRECTIONS[direction],
    }
