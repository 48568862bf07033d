"""Run the reference's regex patterns with Python's `re`.

tokenizer.json patterns are written for Oniguruma (Ruby syntax), which knows
``\\p{L}``-style Unicode properties and defines ``\\s``/``\\w``/``\\d`` by Unicode
properties.  `translate` rewrites such a pattern into an equivalent `re` pattern
whose classes are explicit code point ranges (built once from `unicodedata`,
see `_unicode`), so the matches are the same as the reference's. Patterns whose
matching can take exponential time are refused (see `_regex_safety`).
"""

import functools
import re

from . import _unicode as U
from ._regex_safety import backtracking_hazard


class PatternError(ValueError):
    """A pattern this translator cannot express with `re`."""


def _class_ranges(letter, flavor):
    if letter == "s":
        return U.WHITESPACE_RANGES
    if letter == "w":
        return U.word_ranges(flavor)
    if letter == "d":
        return U.property_ranges("Nd")
    if letter == "h":  # Oniguruma: hexadecimal digit
        return ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66))
    raise AssertionError(letter)


_SIMPLE_ESCAPES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B}


class _Parser:
    def __init__(self, pattern, flavor):
        self.p = pattern
        self.i = 0
        self.flavor = flavor
        self.out = []

    def error(self, msg):
        raise PatternError("%s at position %d in regex %r" % (msg, self.i, self.p))

    # -- escapes ---------------------------------------------------------------
    def _property(self, negated):
        """After `\\p` or `\\P`: returns the ranges the escape stands for."""
        p = self.p
        if self.i < len(p) and p[self.i] == "{":
            end = p.find("}", self.i)
            if end < 0:
                self.error("unterminated \\p{")
            name = p[self.i + 1 : end]
            self.i = end + 1
        elif self.i < len(p):
            name = p[self.i]
            self.i += 1
        else:
            self.error("dangling \\p")
        if name.startswith("^"):
            negated, name = not negated, name[1:]
        ranges = U.property_ranges(name)
        if ranges is None:
            self.error("unsupported Unicode property %r" % name)
        return U.complement(ranges) if negated else ranges

    def _codepoint_escape(self, c):
        """Escapes that denote one code point; returns it or None."""
        p = self.p
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        if c == "x":
            if self.i < len(p) and p[self.i] == "{":
                end = p.find("}", self.i)
                if end < 0:
                    self.error("unterminated \\x{")
                cp = int(p[self.i + 1 : end], 16)
                self.i = end + 1
                return cp
            digits = p[self.i : self.i + 2]
            if len(digits) == 2 and all(ch in "0123456789abcdefABCDEF" for ch in digits):
                self.i += 2
                return int(digits, 16)
            self.error("bad \\x escape")
        if c == "u":
            digits = p[self.i : self.i + 4]
            if len(digits) == 4 and all(ch in "0123456789abcdefABCDEF" for ch in digits):
                self.i += 4
                return int(digits, 16)
            self.error("bad \\u escape")
        if c == "0":
            digits = ""
            while self.i < len(p) and len(digits) < 2 and p[self.i] in "01234567":
                digits += p[self.i]
                self.i += 1
            return int(digits or "0", 8)
        if not c.isalnum():
            return ord(c)
        return None

    def _escape(self, in_class):
        """After a backslash: returns ('ranges', r) or ('raw', text)."""
        p = self.p
        if self.i >= len(p):
            self.error("pattern ends with a backslash")
        c = p[self.i]
        self.i += 1
        if c in "pP":
            return "ranges", self._property(c == "P")
        if c in "swdh":
            return "ranges", _class_ranges(c, self.flavor)
        if c in "SWDH":
            return "ranges", U.complement(_class_ranges(c.lower(), self.flavor))
        cp = self._codepoint_escape(c)
        if cp is not None:
            return "ranges", ((cp, cp),)
        if in_class:
            self.error("unsupported escape \\%s in a character class" % c)
        if c in "AbB":
            return "raw", "\\" + c
        if c == "z":
            return "raw", r"\Z"
        if c == "Z":
            return "raw", r"(?=\n?\Z)"
        if c == "R":
            return "raw", r"(?:\r\n|[\n\x0b\x0c\r\x85\u2028\u2029])"
        if c.isdigit():
            return "raw", "\\" + c
        if c == "k" and self.i < len(p) and p[self.i] == "<":
            end = p.find(">", self.i)
            if end < 0:
                self.error("unterminated \\k<")
            name = p[self.i + 1 : end]
            self.i = end + 1
            return "raw", "(?P=%s)" % name
        self.error("unsupported escape \\%s" % c)

    # -- character classes -----------------------------------------------------
    def _class(self):
        """After '[': parse up to the matching ']' and emit an explicit class."""
        p = self.p
        negated = False
        if self.i < len(p) and p[self.i] == "^":
            negated = True
            self.i += 1
        ranges = []
        first = True
        while True:
            if self.i >= len(p):
                self.error("unterminated character class")
            c = p[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if c == "[":
                if p.startswith("[:", self.i):
                    end = p.find(":]", self.i)
                    if end < 0:
                        self.error("unterminated POSIX class")
                    name = p[self.i + 2 : end]
                    neg = name.startswith("^")
                    r = U.property_ranges(name.lstrip("^"))
                    if r is None:
                        self.error("unsupported POSIX class %r" % name)
                    ranges.extend(U.complement(r) if neg else r)
                    self.i = end + 2
                    continue
                self.i += 1
                ranges.extend(self._class())  # a nested class: union
                continue
            if c == "&" and p.startswith("&&", self.i):
                self.error("character class intersection is not supported")
            # one item: an escape or a literal, possibly starting a range
            self.i += 1
            if c == "\\":
                _, r = self._escape(in_class=True)
                lo = r[0][0] if len(r) == 1 and r[0][0] == r[0][1] else None
                if lo is None:
                    ranges.extend(r)
                    continue
            else:
                lo = ord(c)
            if self.i + 1 < len(p) and p[self.i] == "-" and p[self.i + 1] != "]":
                self.i += 1
                c2 = p[self.i]
                self.i += 1
                if c2 == "\\":
                    _, r = self._escape(in_class=True)
                    if not (len(r) == 1 and r[0][0] == r[0][1]):
                        self.error("bad range end")
                    hi = r[0][0]
                else:
                    hi = ord(c2)
                if hi < lo:
                    self.error("bad range")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        return U.complement(ranges) if negated else U.merge_ranges(ranges)

    # -- main loop ---------------------------------------------------------------
    def translate(self):
        p = self.p
        out = self.out
        while self.i < len(p):
            c = p[self.i]
            self.i += 1
            if c == "\\":
                kind, val = self._escape(in_class=False)
                if kind == "raw":
                    out.append(val)
                else:
                    out.append(_emit_class(val))
            elif c == "[":
                out.append(_emit_class(self._class()))
            elif (
                c == "("
                and p.startswith("?<", self.i)
                and not p.startswith("?<=", self.i)
                and not p.startswith("?<!", self.i)
            ):
                out.append("(?P<")
                self.i += 2
            else:
                out.append(c)
        return "".join(out)


def _emit_class(ranges):
    ranges = U.merge_ranges(ranges)
    if not ranges:
        return "(?!)"
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return (
            U.class_body(ranges)
            if chr(ranges[0][0]).isalnum()
            else "[" + U.class_body(ranges) + "]"
        )
    return "[" + U.class_body(ranges) + "]"


@functools.lru_cache(maxsize=256)
def translate(pattern, flavor="onig"):
    """The `re` source equivalent to an Oniguruma (or Rust regex) pattern."""
    return _Parser(pattern, flavor).translate()


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern, flavor="onig"):
    """Compile an Oniguruma-style pattern with `re` (Ruby: ^ and $ are line anchors)."""
    flags = re.MULTILINE if flavor == "onig" else 0
    source = translate(pattern, flavor)
    hazard = backtracking_hazard(source, flags)
    if hazard is not None:
        raise PatternError(
            "regex %r has %s: matching it can take exponential time "
            "(catastrophic backtracking), so ember does not run it" % (pattern, hazard)
        )
    return re.compile(source, flags)


def literal(text):
    return re.compile(re.escape(text))


def find_iter(rx, text):
    """Match spans like the reference's iterator: an empty match is not accepted
    right where the previous match ended."""
    pos = 0
    last_end = -1
    n = len(text)
    search = rx.search
    while pos <= n:
        m = search(text, pos)
        if m is None:
            return
        s, e = m.span()
        if s == e and e == last_end:
            pos = s + 1
            continue
        pos = e
        last_end = e
        yield s, e
