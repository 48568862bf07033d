"""Reading tokenizer.json sections, with errors that name the file and field.

Every value the tokenizer reads goes through a check here (type, and range for ids,
lengths and counts), so a malformed file is a FormatError naming the file and the
field, never a TypeError or a nonsense tokenizer later.
"""

import math

from ..errors import FormatError

_MISSING = object()
MAX_ID = 2**32 - 1  # ids are u32 in the reference


class Ctx:
    """Where a section comes from: `source` is the file name, `path` the JSON field
    (e.g. ``normalizer.normalizers[1]``)."""

    __slots__ = ("source", "path")

    def __init__(self, source="tokenizer.json", path=""):
        self.source = source
        self.path = path

    def field(self, key):
        return Ctx(self.source, "%s.%s" % (self.path, key) if self.path else key)

    def item(self, i):
        return Ctx(self.source, "%s[%d]" % (self.path, i))

    def error(self, message):
        """A FormatError about this field: 'file: field message'."""
        return FormatError("%s: %s %s" % (self.source, self.path, message))

    def obj(self, d):
        if not isinstance(d, dict):
            raise self.error("must be an object, not %s" % type(d).__name__)
        return d

    def get(self, d, key, default=_MISSING, kind=None):
        """d[key] checked against `kind` (a type or tuple); default if absent/null."""
        value = d.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise self.field(key).error(
                    "is missing" if value is _MISSING else "must not be null"
                )
            return default
        if kind is not None and not isinstance(value, kind):
            raise self.field(key).error("has the wrong type %s" % type(value).__name__)
        if kind in (int, float) and isinstance(value, bool):
            raise self.field(key).error("has the wrong type bool")
        return value

    def int_in(self, d, key, default=_MISSING, lo=0, hi=MAX_ID):
        """d[key] as an int in [lo, hi] (default if absent/null)."""
        value = self.get(d, key, default, int)
        if value is not None and value is not default and not lo <= value <= hi:
            raise self.field(key).error("is %d, outside [%d, %d]" % (value, lo, hi))
        return value

    def id_value(self, value):
        """This field's value as a token id."""
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error("must be a token id (an integer), not %s" % type(value).__name__)
        if not 0 <= value <= MAX_ID:
            raise self.error("is %d, not a token id (0 to %d)" % (value, MAX_ID))
        return value

    def finite(self, value):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.error("must be a number, not %s" % type(value).__name__)
        if not math.isfinite(value):
            raise self.error("must be finite, not %r" % value)
        return value

    def str_list(self, d, key, default=_MISSING):
        values = self.get(d, key, default, list)
        if values is not None and values is not default:
            for i, v in enumerate(values):
                if not isinstance(v, str):
                    raise (
                        self.field(key).item(i).error("must be a string, not %s" % type(v).__name__)
                    )
        return values

    def vocab(self, d, key="vocab"):
        """A {token: id} vocabulary."""
        vocab = self.get(d, key, kind=dict)
        ids = vocab.values()
        # the whole check in C where every id is a plain int in range (a Whisper
        # vocabulary's 51,865: 3 ms against 40 for the loop); the loop finds and names a bad one
        if not ids or (set(map(type, ids)) == {int} and min(ids) >= 0 and max(ids) <= MAX_ID):
            return vocab
        vctx = self.field(key)
        for token, tid in vocab.items():
            if not isinstance(tid, int) or isinstance(tid, bool) or not 0 <= tid <= MAX_ID:
                raise vctx.error(
                    "maps %r to %r, not a token id (0 to %d)" % (token[:50], tid, MAX_ID)
                )
        return vocab

    def type_name(self, d):
        d = self.obj(d)
        t = d.get("type")
        if not isinstance(t, str):
            raise self.field("type").error("is missing")
        return t

    def unsupported(self, type_name):
        return self.field("type").error("%r is not supported" % (type_name,))


def build(registry, d, ctx, what, optional=True):
    """Construct the component named by d['type'] from `registry` {name: from_dict}
    (None stays None where the component is optional)."""
    if d is None and optional:
        return None
    t = ctx.type_name(d)
    maker = registry.get(t)
    if maker is None:
        raise ctx.unsupported(t)
    return maker(d, ctx)


def pattern_of(d, ctx):
    """A {'String': s} / {'Regex': r} pattern object → (kind, text)."""
    d = ctx.obj(d)
    if "String" in d:
        if not isinstance(d["String"], str):
            raise ctx.field("String").error("must be a string")
        return "string", d["String"]
    if "Regex" in d:
        if not isinstance(d["Regex"], str):
            raise ctx.field("Regex").error("must be a string")
        return "regex", d["Regex"]
    raise ctx.error("must be {'String': ...} or {'Regex': ...}")


def compile_pattern_of(d, ctx):
    """Compile a String/Regex pattern object into a `re` pattern."""
    from ._regex import PatternError, compile_pattern, literal

    kind, text = pattern_of(d, ctx)
    if kind == "string":
        return literal(text)
    try:
        return compile_pattern(text)
    except PatternError as exc:
        raise ctx.field("Regex").error("cannot be used: %s" % exc) from None
    except Exception as exc:  # re.error
        raise ctx.field("Regex").error("cannot be compiled: %s" % exc) from None
