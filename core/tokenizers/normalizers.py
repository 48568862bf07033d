"""Normalizers: rewrite the text (keeping alignments) before pre-tokenization."""

from . import _unicode as U
from ._bytes import to_byte_chars
from ._config import build, compile_pattern_of
from .normalized import NormalizedString

_WS_TO_SPACE = {ord(c): " " for c in U.WHITESPACE}


class Normalizer:
    def normalize(self, ns):
        raise NotImplementedError

    def normalize_str(self, text):
        ns = NormalizedString(text)
        self.normalize(ns)
        return ns.text

    def __repr__(self):
        fields = ", ".join(
            "%s=%r" % kv for kv in sorted(vars(self).items()) if not kv[0].startswith("_")
        )
        return "%s(%s)" % (type(self).__name__, fields)


class BertNormalizer(Normalizer):
    def __init__(
        self, clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    ):
        self.clean_text = clean_text
        self.handle_chinese_chars = handle_chinese_chars
        self.strip_accents = strip_accents
        self.lowercase = lowercase

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            clean_text=ctx.get(d, "clean_text", True, bool),
            handle_chinese_chars=ctx.get(d, "handle_chinese_chars", True, bool),
            strip_accents=ctx.get(d, "strip_accents", None, bool),
            lowercase=ctx.get(d, "lowercase", True, bool),
        )

    def normalize(self, ns):
        if self.clean_text:
            t = ns.text
            if U.CONTROL_RE.search(t):
                ns.filter(lambda c: not U.is_control(c))
                t = ns.text
            if U.NON_SPACE_WHITESPACE_RE.search(t):
                ns.set_same_length(t.translate(_WS_TO_SPACE))
        if self.handle_chinese_chars and U.CHINESE_RE.search(ns.text):
            ns.map_chars(lambda c: " " + c + " " if U.is_chinese(c) else c)
        strip = self.strip_accents if self.strip_accents is not None else self.lowercase
        if strip and not ns.text.isascii():
            ns.unicode_normalize("NFD")
            if any(c in U.NONSPACING_MARKS for c in ns.text):
                ns.filter(lambda c: c not in U.NONSPACING_MARKS)
        if self.lowercase:
            ns.lowercase()


class _UnicodeForm(Normalizer):
    form = None

    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def normalize(self, ns):
        ns.unicode_normalize(self.form)


class NFC(_UnicodeForm):
    form = "NFC"


class NFD(_UnicodeForm):
    form = "NFD"


class NFKC(_UnicodeForm):
    form = "NFKC"


class NFKD(_UnicodeForm):
    form = "NFKD"


class Lowercase(Normalizer):
    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def normalize(self, ns):
        ns.lowercase()


class StripAccents(Normalizer):
    """Removes combining marks (it does not decompose: pair it with NFD/NFKD)."""

    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def normalize(self, ns):
        if not ns.text.isascii() and any(c in U.MARKS for c in ns.text):
            ns.filter(lambda c: c not in U.MARKS)


class Strip(Normalizer):
    def __init__(self, left=True, right=True):
        self.left = left
        self.right = right

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(ctx.get(d, "strip_left", True, bool), ctx.get(d, "strip_right", True, bool))

    def normalize(self, ns):
        ns.strip(self.left, self.right)


class Prepend(Normalizer):
    def __init__(self, prepend):
        self.prepend = prepend

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(ctx.get(d, "prepend", kind=str))

    def normalize(self, ns):
        ns.prepend(self.prepend)


class ByteLevel(Normalizer):
    """Every char becomes the chars standing for its UTF-8 bytes (GPT-2 alphabet)."""

    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def normalize(self, ns):
        to_byte_chars(ns)


class Replace(Normalizer):
    def __init__(self, pattern, content, _ctx=None):
        from ._config import Ctx

        self.pattern = pattern
        self.content = content
        if isinstance(pattern, str):
            pattern = {"String": pattern}
        elif hasattr(pattern, "pattern") and not isinstance(pattern, dict):
            pattern = {"Regex": pattern.pattern}
        self._rx = compile_pattern_of(pattern, _ctx or Ctx("<Replace>", "pattern"))

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            ctx.get(d, "pattern", kind=dict), ctx.get(d, "content", kind=str), ctx.field("pattern")
        )

    def normalize(self, ns):
        ns.replace_regex(self._rx, self.content)


_NMT_REMOVE = frozenset(
    chr(c) for c in list(range(0x01, 0x09)) + [0x0B] + list(range(0x0E, 0x20)) + [0x7F, 0x8F, 0x9F]
)
_NMT_SPACE = {
    ord(chr(c)): " "
    for c in [0x09, 0x0A, 0x0C, 0x0D, 0x1680, 0x2028, 0x2029, 0x2581, 0xFEFF, 0xFFFD]
    + list(range(0x200B, 0x2010))
}


class Nmt(Normalizer):
    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def normalize(self, ns):
        t = ns.text
        if any(c in _NMT_REMOVE for c in t):
            ns.filter(lambda c: c not in _NMT_REMOVE)
        ns.set_same_length(ns.text.translate(_NMT_SPACE))


class Sequence(Normalizer):
    def __init__(self, normalizers):
        self.normalizers = list(normalizers)

    @classmethod
    def from_dict(cls, d, ctx):
        items = ctx.get(d, "normalizers", kind=list)
        sub = ctx.field("normalizers")
        return cls([from_dict(x, sub.item(i), optional=False) for i, x in enumerate(items)])

    def normalize(self, ns):
        for n in self.normalizers:
            n.normalize(ns)


REGISTRY = {
    "BertNormalizer": BertNormalizer.from_dict,
    "NFC": NFC.from_dict,
    "NFD": NFD.from_dict,
    "NFKC": NFKC.from_dict,
    "NFKD": NFKD.from_dict,
    "Lowercase": Lowercase.from_dict,
    "StripAccents": StripAccents.from_dict,
    "Strip": Strip.from_dict,
    "Prepend": Prepend.from_dict,
    "ByteLevel": ByteLevel.from_dict,
    "Replace": Replace.from_dict,
    "Nmt": Nmt.from_dict,
    "Sequence": Sequence.from_dict,
}


def from_dict(d, ctx, optional=True):
    """Build a normalizer from its tokenizer.json object (None stays None)."""
    return build(REGISTRY, d, ctx, "normalizer", optional)
