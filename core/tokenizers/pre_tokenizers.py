"""Pre-tokenizers: cut the normalized text into words for the model."""

import functools
import re

from . import _unicode as U
from ._bytes import to_byte_chars
from ._config import build, compile_pattern_of
from ._regex import compile_pattern
from .normalized import (
    BEHAVIORS,
    CONTIGUOUS,
    ISOLATED,
    MERGED_WITH_NEXT,
    REMOVED,
    find_char_matches,
    find_regex_matches,
    split_normalized,
)
from .pretokenized import PreTokenizedString

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

_BEHAVIOR_NAMES = {
    "Removed": REMOVED,
    "Isolated": ISOLATED,
    "MergedWithPrevious": "merged_with_previous",
    "MergedWithNext": MERGED_WITH_NEXT,
    "Contiguous": CONTIGUOUS,
}


def behavior_from_json(value, ctx):
    if value in _BEHAVIOR_NAMES:
        return _BEHAVIOR_NAMES[value]
    if value in BEHAVIORS:
        return value
    raise ctx.error("%r is not a split behavior (one of %s)" % (value, ", ".join(_BEHAVIOR_NAMES)))


def _check_behavior(behavior):
    b = _BEHAVIOR_NAMES.get(behavior, behavior)
    if b not in BEHAVIORS:
        raise ValueError(
            "unknown split behavior %r: use one of %s" % (behavior, ", ".join(BEHAVIORS))
        )
    return b


def _slices_of_matches(ns, rx):
    """Slices of ns for every match of rx (the text between matches is dropped)."""
    sl = ns.slice
    return [sl(m.start(), m.end()) for m in rx.finditer(ns.text)]


class PreTokenizer:
    def pre_tokenize(self, pts):
        pts.split(self.split)

    def split(self, ns):
        raise NotImplementedError

    def pre_tokenize_str(self, text):
        """[(piece, (start, end))] for `text`, like the reference's method."""
        pts = PreTokenizedString(text)
        self.pre_tokenize(pts)
        return pts.get_splits()

    def __repr__(self):
        fields = ", ".join(
            "%s=%r" % kv for kv in sorted(vars(self).items()) if not kv[0].startswith("_")
        )
        return "%s(%s)" % (type(self).__name__, fields)


_WS_BODY = U.class_body(U.WHITESPACE_RANGES)
_NOT_WS_RE = re.compile("[^%s]+" % _WS_BODY)


@functools.cache
def _bert_re():
    """BERT's split (each punctuation mark, or a run of neither it nor whitespace),
    compiled at first use: its class of every punctuation mark took 2 ms of each import."""
    punct = U.class_body(U.merge_ranges((ord(c), ord(c)) for c in U.PUNCT))
    return re.compile("[%s]|[^%s%s]+" % (punct, _WS_BODY, punct))


class BertPreTokenizer(PreTokenizer):
    """Splits on whitespace (dropped) and punctuation (kept, one char each)."""

    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def split(self, ns):
        return _slices_of_matches(ns, _bert_re())


class Whitespace(PreTokenizer):
    """Words are runs of `\\w` chars or of other non-space chars."""

    _rx = None

    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def split(self, ns):
        rx = Whitespace._rx
        if rx is None:
            rx = Whitespace._rx = compile_pattern(r"\w+|[^\w\s]+", "rust")
        return _slices_of_matches(ns, rx)


class WhitespaceSplit(PreTokenizer):
    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def split(self, ns):
        return _slices_of_matches(ns, _NOT_WS_RE)


class Punctuation(PreTokenizer):
    def __init__(self, behavior="isolated"):
        self.behavior = _check_behavior(behavior)

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            behavior_from_json(ctx.get(d, "behavior", "Isolated", str), ctx.field("behavior"))
        )

    def split(self, ns):
        return split_normalized(ns, find_char_matches(U.is_punct, ns.text), self.behavior)


class Digits(PreTokenizer):
    def __init__(self, individual_digits=False):
        self.individual_digits = individual_digits

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(ctx.get(d, "individual_digits", False, bool))

    def split(self, ns):
        behavior = ISOLATED if self.individual_digits else CONTIGUOUS
        return split_normalized(ns, find_char_matches(U.is_numeric, ns.text), behavior)


class CharDelimiterSplit(PreTokenizer):
    def __init__(self, delimiter):
        if len(delimiter) != 1:
            raise ValueError("delimiter must be a single character")
        self.delimiter = delimiter

    @classmethod
    def from_dict(cls, d, ctx):
        delim = ctx.get(d, "delimiter", kind=str)
        if len(delim) != 1:
            raise ctx.field("delimiter").error("must be a single character")
        return cls(delim)

    def split(self, ns):
        delim = self.delimiter
        return split_normalized(ns, find_char_matches(lambda c: c == delim, ns.text), REMOVED)


class FixedLength(PreTokenizer):
    def __init__(self, length=5):
        if length <= 0:
            raise ValueError("length must be positive")
        self.length = length

    @classmethod
    def from_dict(cls, d, ctx):
        n = ctx.get(d, "length", 5, int)
        if n <= 0:
            raise ctx.field("length").error("must be positive")
        return cls(n)

    def split(self, ns):
        n = self.length
        return [ns.slice(i, i + n) for i in range(0, len(ns.text), n)]


class Split(PreTokenizer):
    def __init__(self, pattern, behavior, invert=False, _ctx=None):
        from ._config import Ctx

        self.pattern = pattern
        self.behavior = _check_behavior(behavior)
        self.invert = invert
        if isinstance(pattern, str):
            pattern = {"String": pattern}
        elif hasattr(pattern, "pattern") and not isinstance(pattern, dict):
            pattern = {"Regex": pattern.pattern}
        self._rx = compile_pattern_of(pattern, _ctx or Ctx("<Split>", "pattern"))

    @classmethod
    def from_dict(cls, d, ctx):
        pattern = ctx.get(d, "pattern", kind=dict)
        behavior = behavior_from_json(ctx.get(d, "behavior", kind=str), ctx.field("behavior"))
        return cls(pattern, behavior, ctx.get(d, "invert", False, bool), ctx.field("pattern"))

    def split(self, ns):
        matches = find_regex_matches(self._rx, ns.text)
        if self.invert:
            matches = [(s, e, not m) for s, e, m in matches]
        return split_normalized(ns, matches, self.behavior)


_PREPEND_SCHEMES = ("always", "first", "never")


class Metaspace(PreTokenizer):
    """Spaces become `replacement` ('▁'); words start at each replacement char."""

    def __init__(self, replacement="\u2581", prepend_scheme="always", split=True):
        if len(replacement) != 1:
            raise ValueError("replacement must be a single character")
        if prepend_scheme not in _PREPEND_SCHEMES:
            raise ValueError("prepend_scheme must be one of %s" % ", ".join(_PREPEND_SCHEMES))
        self.replacement = replacement
        self.prepend_scheme = prepend_scheme
        self.split_words = split
        r = re.escape(replacement)
        self._rx = re.compile("%s[^%s]*|[^%s]+" % (r, r, r))

    @classmethod
    def from_dict(cls, d, ctx):
        repl = ctx.get(d, "replacement", None, str)
        if repl is None:
            repl = ctx.get(d, "str_rep", "\u2581", str)
        if len(repl) != 1:
            raise ctx.field("replacement").error("must be a single character")
        scheme = ctx.get(d, "prepend_scheme", None, str)
        if scheme is None:
            scheme = "always" if ctx.get(d, "add_prefix_space", True, bool) else "never"
        if scheme not in _PREPEND_SCHEMES:
            raise ctx.field("prepend_scheme").error(
                "%r is not one of %s" % (scheme, ", ".join(_PREPEND_SCHEMES))
            )
        return cls(repl, scheme, ctx.get(d, "split", True, bool))

    def split(self, ns):
        r = self.replacement
        t = ns.text
        if " " in t:
            ns.set_same_length(t.replace(" ", r))
        scheme = self.prepend_scheme
        if (scheme == "always" or (scheme == "first" and ns.start == 0)) and not ns.text.startswith(
            r
        ):
            ns.prepend(r)
        if not self.split_words:
            return [ns]
        return _slices_of_matches(ns, self._rx)


class ByteLevel(PreTokenizer):
    """GPT-2 style: split with its regex, then spell every byte as a char."""

    _rx = None

    def __init__(self, add_prefix_space=True, use_regex=True, trim_offsets=True):
        self.add_prefix_space = add_prefix_space
        self.use_regex = use_regex
        self.trim_offsets = trim_offsets

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            ctx.get(d, "add_prefix_space", True, bool),
            ctx.get(d, "use_regex", True, bool),
            ctx.get(d, "trim_offsets", True, bool),
        )

    @staticmethod
    def alphabet():
        from ._bytes import BYTE_TO_CHAR

        return sorted(BYTE_TO_CHAR.values())

    def split(self, ns):
        if self.add_prefix_space and not ns.text.startswith(" "):
            ns.prepend(" ")
        if not self.use_regex:
            return [ns]
        rx = ByteLevel._rx
        if rx is None:
            rx = ByteLevel._rx = compile_pattern(GPT2_PATTERN)
        return split_normalized(ns, find_regex_matches(rx, ns.text), ISOLATED)

    def pre_tokenize(self, pts):
        pts.split(self.split)
        pts.normalize(to_byte_chars)


class Sequence(PreTokenizer):
    def __init__(self, pretokenizers):
        self.pretokenizers = list(pretokenizers)

    @classmethod
    def from_dict(cls, d, ctx):
        items = ctx.get(d, "pretokenizers", kind=list)
        sub = ctx.field("pretokenizers")
        return cls([from_dict(x, sub.item(i), optional=False) for i, x in enumerate(items)])

    def pre_tokenize(self, pts):
        for p in self.pretokenizers:
            p.pre_tokenize(pts)


REGISTRY = {
    "BertPreTokenizer": BertPreTokenizer.from_dict,
    "Whitespace": Whitespace.from_dict,
    "WhitespaceSplit": WhitespaceSplit.from_dict,
    "Punctuation": Punctuation.from_dict,
    "Digits": Digits.from_dict,
    "CharDelimiterSplit": CharDelimiterSplit.from_dict,
    "FixedLength": FixedLength.from_dict,
    "Split": Split.from_dict,
    "Metaspace": Metaspace.from_dict,
    "ByteLevel": ByteLevel.from_dict,
    "Sequence": Sequence.from_dict,
}


def from_dict(d, ctx, optional=True):
    """Build a pre-tokenizer from its tokenizer.json object (None stays None)."""
    return build(REGISTRY, d, ctx, "pre_tokenizer", optional)
