"""Refusing tokenizer regexes whose matching can take exponential time (ReDoS).

Patterns from tokenizer.json run on Python's `re`, a backtracking matcher with no step
budget and no timeout: `(a+)+$` on 'a' * 30 + '!' tries 2^30 ways to split the a's and
never returns (the reference's Oniguruma gives up at its retry limit instead). Writing
a budgeted matcher in Python would make ordinary pre-tokenization many times slower, so
ember checks the pattern's structure once, when the file is read, and refuses the two
shapes that make a backtracking matcher try exponentially many ways to match one text:

1. a variable quantifier (`+`, `*`, `?`, `{m,n}` with m < n) inside a repeated group,
   e.g. `(a+)+`, `(\\s*\\w)*`, `(\\d{1,3})+`: the same run of text splits into
   iterations in exponentially many ways;
2. alternatives that can start with the same character, or that can match nothing,
   inside a repeated group, e.g. `(a|a)+` (which `re` parses as `a(?:|)`), `(\\w|\\d)*`,
   `(?:(?:a|)a)+`: each iteration can take either branch.

A fixed-width body (`(?:\\d{3})+`) or alternatives with disjoint first characters
(`(?:ab|cd)+`) are unambiguous and kept. The check is conservative (it may refuse an
unusual pattern that would in fact run fast) and about exponential blow-up only: the
patterns tokenizers ship (GPT-2, Llama 3, Qwen2, o200k, ...) pass it, and their
matching is linear.

The check reads the `re` module's own parse of the translated pattern (`re._parser`,
present from Python 3.11, the oldest version ember supports).
"""

from re import _constants as C
from re import _parser

ALL = ((0, 0x10FFFF),)


def _union(a, b):
    return tuple(sorted(set(a) | set(b)))


def _overlaps(a, b):
    return any(lo1 <= hi2 and lo2 <= hi1 for lo1, hi1 in a for lo2, hi2 in b)


def _case_variants(c):
    ch = chr(c)
    return tuple(sorted({(ord(x), ord(x)) for x in (ch, ch.lower(), ch.upper()) if len(x) == 1}))


def _class_set(items, icase):
    ranges = []
    for op, av in items:
        if op is C.LITERAL:
            ranges.extend(_case_variants(av) if icase else ((av, av),))
        elif op is C.RANGE:
            if icase:
                return ALL
            ranges.append(av)
        else:  # NEGATE, CATEGORY, ...: anything, to stay on the safe side
            return ALL
    return tuple(ranges)


def _first(seq, icase):
    """(the chars a match of seq can start with, whether seq can match the empty string)."""
    chars = ()
    for op, av in seq:
        item, nullable = _first_item(op, av, icase)
        chars = _union(chars, item)
        if not nullable:
            return chars, False
    return chars, True


def _first_item(op, av, icase):
    if op is C.LITERAL:
        return (_case_variants(av) if icase else ((av, av),)), False
    if op in (C.NOT_LITERAL, C.ANY):
        return ALL, False
    if op is C.IN:
        return _class_set(av, icase), False
    if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
        lo, _, body = av
        chars, nullable = _first(body, icase)
        return chars, nullable or lo == 0
    if op is C.SUBPATTERN:
        _, add, _, body = av
        return _first(body, icase or bool(add & C.SRE_FLAG_IGNORECASE))
    if op is C.ATOMIC_GROUP:
        return _first(av, icase)
    if op is C.BRANCH:
        chars, nullable = (), False
        for alt in av[1]:
            c, n = _first(alt, icase)
            chars, nullable = _union(chars, c), nullable or n
        return chars, nullable
    if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
        return (), True
    return ALL, True  # group references and anything else: assume the worst


class Ambiguous(Exception):
    """The reason a pattern was refused."""


def _walk(seq, repeated, icase):
    for op, av in seq:
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, body = av
            if repeated and lo != hi:
                raise Ambiguous("a quantifier inside a repeated group")
            _walk(body, repeated or hi > 1, icase)
        elif op is C.SUBPATTERN:
            _, add, _, body = av
            _walk(body, repeated, icase or bool(add & C.SRE_FLAG_IGNORECASE))
        elif op is C.ATOMIC_GROUP:
            _walk(av, False, icase)  # no backtracking into it once it has matched
        elif op is C.BRANCH:
            alts = av[1]
            if repeated:
                firsts = [_first(alt, icase) for alt in alts]
                if any(nullable for _, nullable in firsts):
                    raise Ambiguous("an alternative that can match nothing inside a repeated group")
                for i in range(len(firsts)):
                    for j in range(i):
                        if _overlaps(firsts[i][0], firsts[j][0]):
                            raise Ambiguous(
                                "alternatives that can start with the same character "
                                "inside a repeated group"
                            )
            for alt in alts:
                _walk(alt, repeated, icase)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            _walk(av[1], repeated, icase)
        elif op is C.GROUPREF_EXISTS:
            _, yes, no = av
            _walk(yes, repeated, icase)
            if no is not None:
                _walk(no, repeated, icase)


def backtracking_hazard(re_source, flags=0):
    """None if `re_source` (a pattern for `re`) has neither shape above, else the reason."""
    try:
        _walk(_parser.parse(re_source, flags), False, bool(flags & C.SRE_FLAG_IGNORECASE))
    except Ambiguous as exc:
        return str(exc)
    return None
