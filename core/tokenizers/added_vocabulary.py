"""Added tokens: strings matched whole in the input before the model sees it."""

import re

from . import _unicode as U
from .normalized import NormalizedString
from .pretokenized import PreTokenizedString

_word_char = None


def _is_word_char(ch):
    """Regex `\\w` of the reference (built on first use: it needs the category tables)."""
    global _word_char
    if _word_char is None:
        _word_char = re.compile("[" + U.class_body(U.word_ranges("rust")) + "]")
    return _word_char.match(ch) is not None


class AddedToken:
    """A token matched as a whole.

    single_word: only when not inside a word; lstrip/rstrip: also swallow the
    whitespace on that side; normalized: matched against the normalized text
    (else against the raw input); special: skipped by decode(skip_special_tokens).
    """

    __slots__ = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")

    def __init__(
        self, content, single_word=False, lstrip=False, rstrip=False, normalized=None, special=False
    ):
        self.content = content
        self.single_word = single_word
        self.lstrip = lstrip
        self.rstrip = rstrip
        self.normalized = (not special) if normalized is None else normalized
        self.special = special

    def __repr__(self):
        return "AddedToken(%r, rstrip=%r, lstrip=%r, single_word=%r, normalized=%r, special=%r)" % (
            self.content,
            self.rstrip,
            self.lstrip,
            self.single_word,
            self.normalized,
            self.special,
        )

    def __eq__(self, other):
        if isinstance(other, AddedToken):
            return self.content == other.content
        return NotImplemented

    def __hash__(self):
        return hash(self.content)


def _ends_with_word(text):
    return bool(text) and _is_word_char(text[-1])


def _starts_with_word(text):
    return bool(text) and _is_word_char(text[0])


class AddedVocabulary:
    def __init__(self):
        self.tokens = {}  # id -> AddedToken
        self.content_to_id = {}  # content -> id
        self.special_contents = set()
        self._raw = None  # (compiled alternation, {content: (id, token)})
        self._norm = None
        self._strings = {}  # id -> normalized content, for normalized tokens

    def __len__(self):
        return len(self.content_to_id)

    def add(self, token, token_id):
        if not token.content:
            return False
        old = self.content_to_id.get(token.content)
        if old is not None and old != token_id:
            self.tokens.pop(old, None)
        self.tokens[token_id] = token
        self.content_to_id[token.content] = token_id
        if token.special:
            self.special_contents.add(token.content)
        return True

    def token_to_id(self, content):
        return self.content_to_id.get(content)

    def id_to_token(self, i):
        """The token's string; for a `normalized` token that is its normalized
        content (which is what the reference decodes it to)."""
        s = self._strings.get(i)
        if s is not None:
            return s
        t = self.tokens.get(i)
        return t.content if t is not None else None

    def is_special(self, content):
        return content in self.special_contents

    def refresh(self, normalizer):
        """Rebuild the matchers (call after adding tokens or changing the normalizer)."""
        raw, norm = {}, {}
        self._strings = {}
        for tid, tok in self.tokens.items():
            if tok.normalized:
                if normalizer is not None:
                    ns = NormalizedString(tok.content)
                    normalizer.normalize(ns)
                    key = ns.text
                    self._strings[tid] = key
                else:
                    key = tok.content
                if key:
                    norm.setdefault(key, (tid, tok))
            else:
                raw.setdefault(tok.content, (tid, tok))
        self._raw = self._matcher(raw)
        self._norm = self._matcher(norm)

    @staticmethod
    def _matcher(table):
        if not table:
            return None
        # Longest first: at the leftmost position the longest token wins.
        keys = sorted(table, key=lambda k: (-len(k), k))
        return re.compile("|".join(re.escape(k) for k in keys)), table

    def _find_matches(self, text, matcher):
        """[(start, end, (id, token) or None)] covering text."""
        rx, table = matcher
        out = []
        last = 0
        n = len(text)
        for m in rx.finditer(text):
            start, stop = m.span()
            tid, tok = table[m.group()]
            if tok.single_word:
                start_space = start == 0 or not _ends_with_word(text[:start])
                stop_space = stop == n or not _starts_with_word(text[stop:])
                if not (start_space and stop_space):
                    continue
            if tok.lstrip:
                k = start
                while k > 0 and text[k - 1] in U.WHITESPACE:
                    k -= 1
                start = max(k, last)
            if tok.rstrip:
                while stop < n and text[stop] in U.WHITESPACE:
                    stop += 1
            if last < start:
                out.append((last, start, None))
            out.append((start, stop, tid))
            last = stop
        if last != n:
            out.append((last, n, None))
        return out

    def _split(self, ns, matcher):
        if matcher is None:
            return [(ns, None)]
        pieces = []
        for s, e, tid in self._find_matches(ns.text, matcher):
            piece = ns.slice(s, e)
            if tid is None:
                pieces.append((piece, None))
            else:
                pieces.append((piece, [(tid, piece.text, 0, len(piece.text))]))
        return pieces

    def extract_and_normalize(self, normalizer, text):
        """Split out the added tokens, normalizing the text between them."""
        pts = PreTokenizedString(text)
        raw, norm = self._raw, self._norm
        pts.split_with_tokens(lambda ns: self._split(ns, raw))

        def normalize_then_split(ns):
            if normalizer is not None:
                normalizer.normalize(ns)
            return self._split(ns, norm)

        pts.split_with_tokens(normalize_then_split)
        return pts
