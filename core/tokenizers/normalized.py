"""A string under normalization that remembers where each char came from.

`NormalizedString.text` is the current (normalized) text.  Each of its chars is
aligned to a span of the original input (in code points), so that token
offsets can be reported in the caller's string.  While the text is still an
untouched slice of the input the alignment is implicit (``align is None``) and
costs nothing.
"""

import unicodedata
from itertools import pairwise

from . import _unicode as U
from . import _unicode_tables as _t
from ._regex import find_iter

_KEEP = {form: U._chars(getattr(_t, form + "_KEEP")) for form in ("NFC", "NFD", "NFKC", "NFKD")}


class NormalizedString:
    __slots__ = ("text", "align", "start", "end")

    def __init__(self, text, align=None, start=0, end=None):
        self.text = text
        self.align = align  # list of (orig_start, orig_end) per char, or None: identity
        self.start = start  # span of the original that this string stands for
        self.end = start + len(text) if end is None else end

    def __repr__(self):
        return "NormalizedString(%r, original=(%d, %d))" % (self.text, self.start, self.end)

    def __len__(self):
        return len(self.text)

    # -- alignment ---------------------------------------------------------------
    def aligns(self):
        a = self.align
        if a is None:
            b = self.start
            a = self.align = [(b + i, b + i + 1) for i in range(len(self.text))]
        return a

    def original_span(self, i, j):
        """Original span of the normalized chars [i, j)."""
        if self.align is None:
            return self.start + i, self.start + j
        if i >= j:
            pos = self.align[i][0] if i < len(self.align) else self.end
            return pos, pos
        return self.align[i][0], self.align[j - 1][1]

    def slice(self, i, j):
        n = len(self.text)
        j = min(j, n)
        i = min(i, j)
        text = self.text[i:j]
        if self.align is None:
            return NormalizedString(text, None, self.start + i, self.start + j)
        seg = self.align[i:j]
        if seg:
            return NormalizedString(text, seg, seg[0][0], seg[-1][1])
        pos = self.align[i][0] if i < len(self.align) else self.end
        return NormalizedString(text, seg, pos, pos)

    # -- generic transforms --------------------------------------------------------
    def set_same_length(self, text):
        """Replace the text by one whose chars map 1:1 onto the current ones."""
        self.text = text

    def map_chars(self, fn):
        """Replace every char c by fn(c) (a string, maybe empty or longer)."""
        out = []
        new_align = []
        for ch, a in zip(self.text, self.aligns(), strict=True):
            r = fn(ch)
            if not r:
                continue
            out.append(r)
            if len(r) == 1:
                new_align.append(a)
            else:
                new_align.extend([a] * len(r))
        self.text = "".join(out)
        self.align = new_align

    def filter(self, keep):
        al = self.aligns() if self.align is None else self.align
        out = []
        new_align = []
        for ch, a in zip(self.text, al, strict=True):
            if keep(ch):
                out.append(ch)
                new_align.append(a)
        self.text = "".join(out)
        self.align = new_align

    def prepend(self, s):
        if not self.text or not s:
            return
        al = self.aligns()
        self.align = [al[0]] * len(s) + al
        self.text = s + self.text

    def append(self, s):
        if not self.text or not s:
            return
        al = self.aligns()
        self.align = al + [al[-1]] * len(s)
        self.text = self.text + s

    def replace_spans(self, spans, content):
        """Replace each normalized span [i, j) by `content`; the new chars are
        aligned like the last replaced char (as the reference does)."""
        if not spans:
            return
        al = self.aligns()
        text = self.text
        out = []
        new_align = []
        prev = 0
        n = len(content)
        for i, j in spans:
            out.append(text[prev:i])
            new_align.extend(al[prev:i])
            if n and j > i:
                out.append(content)
                new_align.extend([al[j - 1]] * n)
            prev = j
        out.append(text[prev:])
        new_align.extend(al[prev:])
        self.text = "".join(out)
        self.align = new_align

    def replace_regex(self, rx, content):
        self.replace_spans([(s, e) for s, e in find_iter(rx, self.text) if e > s], content)

    def strip(self, left=True, right=True):
        t = self.text
        i, j = 0, len(t)
        if left:
            while i < j and t[i] in U.WHITESPACE:
                i += 1
        if right:
            while j > i and t[j - 1] in U.WHITESPACE:
                j -= 1
        if i == 0 and j == len(t):
            return
        al = self.aligns()
        self.text = t[i:j]
        self.align = al[i:j]

    # -- case and Unicode normalization -----------------------------------------------
    def lowercase(self):
        t = self.text
        if t.isascii():
            self.text = t.lower()
            return
        low = t.lower()
        if len(low) == len(t) and "\u03a3" not in t and not U.LOWER_EXTRA_RE.search(t):
            self.text = low
            return
        self.map_chars(U.lower_char)

    def unicode_normalize(self, form):
        t = self.text
        if t.isascii():
            return
        keep = _KEEP[form]
        if any(ch in keep for ch in t):
            self._normalize_around(form, keep)
            return
        full = unicodedata.normalize(form, t)
        if full == t:
            return
        self._normalize_segments(form, full)

    def _normalize_around(self, form, keep):
        # Normalize the runs between the chars that the reference leaves alone.
        al = self.aligns()
        t = self.text
        out, new_align = [], []
        i = 0
        n = len(t)
        while i < n:
            if t[i] in keep:
                out.append(t[i])
                new_align.append(al[i])
                i += 1
                continue
            j = i
            while j < n and t[j] not in keep:
                j += 1
            part = NormalizedString(t[i:j], al[i:j], al[i][0], al[j - 1][1])
            full = unicodedata.normalize(form, part.text)
            if full != part.text:
                part._normalize_segments(form, full)
            out.append(part.text)
            new_align.extend(part.align)
            i = j
        self.text = "".join(out)
        self.align = new_align

    def _normalize_segments(self, form, full):
        """Set text to `full` (the normalization of the text), aligning each output
        char to the input char it comes from, segment by segment."""
        t = self.text
        al = self.aligns()
        combining = unicodedata.combining
        # Segments: a starter followed by its non-starters.
        bounds = [0]
        for k in range(1, len(t)):
            if combining(t[k]) == 0:
                bounds.append(k)
        bounds.append(len(t))
        out, new_align = [], []
        for s, e in pairwise(bounds):
            seg = t[s:e]
            norm = unicodedata.normalize(form, seg)
            out.append(norm)
            if norm == seg:
                new_align.extend(al[s:e])
                continue
            per_char = [unicodedata.normalize(form, ch) for ch in seg]
            if "".join(per_char) == norm:
                for piece, a in zip(per_char, al[s:e], strict=True):
                    new_align.extend([a] * len(piece))
            else:
                # composition or reordering: output char k comes from input char k
                last = e - s - 1
                for k in range(len(norm)):
                    new_align.append(al[s + min(k, last)])
        text = "".join(out)
        if text != full:
            # Composition across segments (e.g. Hangul jamo): align by position.
            last = len(t) - 1
            new_align = [al[min(k, last)] for k in range(len(full))]
            text = full
        self.text = text
        self.align = new_align


def find_char_matches(pred, text):
    """(start, end, is_match) pieces covering text: each matching char alone."""
    if not text:
        return [(0, 0, False)]
    out = []
    last = 0
    for k, ch in enumerate(text):
        if pred(ch):
            if last < k:
                out.append((last, k, False))
            out.append((k, k + 1, True))
            last = k + 1
    if last < len(text):
        out.append((last, len(text), False))
    return out


def find_regex_matches(rx, text):
    if not text:
        return [(0, 0, False)]
    out = []
    prev = 0
    for s, e in find_iter(rx, text):
        if prev != s:
            out.append((prev, s, False))
        out.append((s, e, True))
        prev = e
    if prev != len(text):
        out.append((prev, len(text), False))
    return out


REMOVED = "removed"
ISOLATED = "isolated"
MERGED_WITH_PREVIOUS = "merged_with_previous"
MERGED_WITH_NEXT = "merged_with_next"
CONTIGUOUS = "contiguous"
BEHAVIORS = (REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS)


def split_pieces(matches, behavior):
    """Apply a split behavior to (start, end, is_match) pieces: [(start, end)]."""
    if behavior == ISOLATED:
        return [(s, e) for s, e, _ in matches]
    if behavior == REMOVED:
        return [(s, e) for s, e, m in matches if not m]
    out = []
    if behavior == CONTIGUOUS:
        prev = False
        for s, e, m in matches:
            if m == prev and out:
                out[-1] = (out[-1][0], e)
            else:
                out.append((s, e))
            prev = m
        return out
    if behavior == MERGED_WITH_PREVIOUS:
        prev = False
        for s, e, m in matches:
            if m and not prev and out:
                out[-1] = (out[-1][0], e)
            else:
                out.append((s, e))
            prev = m
        return out
    if behavior == MERGED_WITH_NEXT:
        prev = False
        for s, e, m in reversed(matches):
            if m and not prev and out:
                out[-1] = (s, out[-1][1])
            else:
                out.append((s, e))
            prev = m
        out.reverse()
        return out
    raise ValueError("unknown split behavior %r" % (behavior,))


def split_normalized(ns, matches, behavior):
    return [ns.slice(s, e) for s, e in split_pieces(matches, behavior)]
