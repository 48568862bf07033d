"""Character predicates and regex character classes, matching the reference.

The reference implementation mixes several Unicode sources (Rust's std, an old
``unicode_categories`` crate, Oniguruma's tables); the small tables in
``_unicode_tables`` record where they differ from Python's ``unicodedata`` so
that every predicate here answers like the reference does.

Large classes (``\\p{L}`` and friends) are built once, lazily, from
``unicodedata`` plus the recorded newer assignments, and cached.
"""

import bisect
import functools
import re
import unicodedata

from . import _unicode_tables as _t

# Unicode White_Space: Rust's char::is_whitespace, regex `\s` and Oniguruma `\s`.
WHITESPACE_RANGES = (
    (0x09, 0x0D),
    (0x20, 0x20),
    (0x85, 0x85),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
)

# The CJK blocks that BertNormalizer(handle_chinese_chars=True) pads with spaces.
CHINESE_RANGES = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0x2F800, 0x2FA1F),
)

# Letters that are not L/Nl/M but are Alphabetic, hence in regex `\w`.
_ALPHA_SYMBOL_RANGES = (
    (0x24B6, 0x24E9),
    (0x1F130, 0x1F149),
    (0x1F150, 0x1F169),
    (0x1F170, 0x1F189),
)
# Oniguruma's Latin-1 table also marks superscripts and vulgar fractions as word chars.
_ONIG_LATIN1_WORD = ((0xB2, 0xB3), (0xB9, 0xB9), (0xBC, 0xBE))

MAX_CP = 0x10FFFF


def _chars(ranges):
    return frozenset(chr(c) for a, b in ranges for c in range(a, b + 1))


WHITESPACE = _chars(WHITESPACE_RANGES)
PUNCT = _chars(_t.PUNCT_RANGES)
MARKS = _chars(_t.MARK_RANGES)
NONSPACING_MARKS = _chars(_t.NONSPACING_MARK_RANGES)


def _esc(cp):
    if cp < 0x80 and (chr(cp).isalnum()):
        return chr(cp)
    if cp <= 0xFF:
        return "\\x%02x" % cp
    if cp <= 0xFFFF:
        return "\\u%04x" % cp
    return "\\U%08x" % cp


def class_body(ranges):
    """The inside of a regex character class matching `ranges` (inclusive pairs)."""
    parts = []
    for a, b in ranges:
        if a == b:
            parts.append(_esc(a))
        elif b == a + 1:
            parts.append(_esc(a) + _esc(b))
        else:
            parts.append(_esc(a) + "-" + _esc(b))
    return "".join(parts)


def merge_ranges(ranges):
    out = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return tuple(out)


def complement(ranges):
    out = []
    nxt = 0
    for a, b in merge_ranges(ranges):
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = b + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return tuple(out)


# Regexes of large character classes, compiled at their first use (module __getattr__):
# compiling them at import took 5 ms of every process that imports the tokenizers, and a
# byte-level BPE (GPT-2's, Whisper's) uses none of them.
_CLASSES = {
    "CONTROL_RE": lambda: _t.CONTROL_RANGES,
    "CHINESE_RE": lambda: CHINESE_RANGES,
    "NON_SPACE_WHITESPACE_RE": lambda: (r for r in WHITESPACE_RANGES if r != (0x20, 0x20)),
    "LOWER_EXTRA_RE": lambda: ((k, k) for k in sorted(_t.LOWER_EXTRA)),
}
_LOWER_EXTRA = {chr(k): v for k, v in _t.LOWER_EXTRA.items()}


def _class_re(name):
    compiled = globals().get(name)
    if compiled is None:
        compiled = globals()[name] = re.compile("[" + class_body(_CLASSES[name]()) + "]")
    return compiled


def __getattr__(name):
    if name in _CLASSES:
        return _class_re(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_NEW_STARTS = [a for a, _, _ in _t.NEW_CATEGORIES]


def is_whitespace(ch):
    return ch in WHITESPACE


def is_punct(ch):
    return ch in PUNCT


def is_mark(ch):
    return ch in MARKS


def is_control(ch):
    return _class_re("CONTROL_RE").match(ch) is not None


def is_chinese(ch):
    return _class_re("CHINESE_RE").match(ch) is not None


def category(ch):
    """General category, using the newer assignments where Python knows none."""
    cat = unicodedata.category(ch)
    if cat == "Cn":
        cp = ord(ch)
        i = bisect.bisect_right(_NEW_STARTS, cp) - 1
        if i >= 0:
            a, b, c = _t.NEW_CATEGORIES[i]
            if a <= cp <= b:
                return c
    return cat


_NUMERIC_EXTRA = _chars(_t.NUMERIC_EXTRA_RANGES)


def is_numeric(ch):
    """Rust's char::is_numeric: general category N* (in Rust's Unicode version)."""
    return category(ch)[0] == "N" or ch in _NUMERIC_EXTRA


def lower_char(ch):
    """Rust's char::to_lowercase for one char (no Final_Sigma context)."""
    return _LOWER_EXTRA.get(ch) or ch.lower()


@functools.cache
def _category_ranges():
    """{general category: ranges} over the whole code space (built once)."""
    cat = unicodedata.category
    runs = {}
    for lo, hi in ((0, 0x3FFFF), (0xE0000, 0xE0FFF)):
        start, prev = lo, cat(chr(lo))
        for cp in range(lo + 1, hi + 1):
            c = cat(chr(cp))
            if c != prev:
                runs.setdefault(prev, []).append((start, cp - 1))
                start, prev = cp, c
        runs.setdefault(prev, []).append((start, hi))
    runs.setdefault("Co", []).extend([(0xF0000, 0xFFFFD), (0x100000, 0x10FFFD)])
    runs.pop("Cn", None)
    # Code points assigned after Python's Unicode version move out of Cn.
    for a, b, c in _t.NEW_CATEGORIES:
        runs.setdefault(c, []).append((a, b))
    out = {k: merge_ranges(v) for k, v in runs.items()}
    out["Cn"] = complement(r for v in out.values() for r in v)
    return out


# Long names of the general categories (and the POSIX classes whose Oniguruma
# meaning is a plain category); binary properties such as Alphabetic are not
# known here and make a pattern unsupported.
_LONG_NAMES = {
    "letter": "L",
    "cased_letter": "LC",
    "uppercase_letter": "Lu",
    "lowercase_letter": "Ll",
    "titlecase_letter": "Lt",
    "modifier_letter": "Lm",
    "other_letter": "Lo",
    "mark": "M",
    "combining_mark": "M",
    "nonspacing_mark": "Mn",
    "spacing_mark": "Mc",
    "enclosing_mark": "Me",
    "number": "N",
    "decimal_number": "Nd",
    "digit": "Nd",
    "letter_number": "Nl",
    "other_number": "No",
    "punctuation": "P",
    "connector_punctuation": "Pc",
    "dash_punctuation": "Pd",
    "open_punctuation": "Ps",
    "close_punctuation": "Pe",
    "initial_punctuation": "Pi",
    "final_punctuation": "Pf",
    "other_punctuation": "Po",
    "symbol": "S",
    "math_symbol": "Sm",
    "currency_symbol": "Sc",
    "modifier_symbol": "Sk",
    "other_symbol": "So",
    "separator": "Z",
    "space_separator": "Zs",
    "line_separator": "Zl",
    "paragraph_separator": "Zp",
    "other": "C",
    "control": "Cc",
    "cntrl": "Cc",
    "format": "Cf",
    "private_use": "Co",
    "surrogate": "Cs",
    "unassigned": "Cn",
    "any": "Any",
    "l&": "LC",
    "space": "Space",
    "white_space": "Space",
    "whitespace": "Space",
    "xdigit": "XDigit",
    "blank": "Blank",
}


@functools.cache
def property_ranges(name):
    """Ranges of a Unicode property name as written in `\\p{...}`; None if unknown."""
    cats = _category_ranges()
    key = name.strip()
    if not (key in cats or key == "LC" or (len(key) == 1 and key in "LMNPSZC")):
        key = _LONG_NAMES.get(key.lower().replace(" ", "_").replace("-", "_"), key)
    if key in cats:
        return cats[key]
    if len(key) == 1 and key in "LMNPSZC":
        return merge_ranges(r for k, v in cats.items() if k[0] == key for r in v)
    if key == "LC":
        return merge_ranges(r for k in ("Lu", "Ll", "Lt") for r in cats.get(k, ()))
    if key == "Any":
        return ((0, MAX_CP),)
    if key == "Space":
        return WHITESPACE_RANGES
    if key == "XDigit":
        return ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66))
    if key == "Blank":
        return merge_ranges(((0x09, 0x09),) + cats.get("Zs", ()))
    if len(key) == 2 and key[0] in "LMNPSZC":
        return ()  # a valid category with no members in this Unicode version
    return None


@functools.cache
def word_ranges(flavor):
    """`\\w` of Oniguruma ('onig') or of Rust's regex crate ('rust')."""
    base = []
    for name in ("L", "M", "Nd", "Pc", "Nl"):
        base.extend(property_ranges(name))
    base.extend(_ALPHA_SYMBOL_RANGES)
    if flavor == "rust":
        base.append((0x200C, 0x200D))
    else:
        base.extend(_ONIG_LATIN1_WORD)
    return merge_ranges(base)
