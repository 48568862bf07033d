"""Reading tokenizer.json sections, with errors that name the file and field."""

from ..errors import FormatError

_MISSING = object()


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
        if value is _MISSING or (value is None and default is not _MISSING):
            if default is _MISSING:
                raise self.field(key).error("is missing")
            return default
        if kind is not None and not isinstance(value, kind) and value is not None:
            raise self.field(key).error("has the wrong type %s" % type(value).__name__)
        if kind in (int, float) and isinstance(value, bool):
            raise self.field(key).error("has the wrong type bool")
        return value

    def type_name(self, d):
        d = self.obj(d)
        t = d.get("type")
        if not isinstance(t, str):
            raise self.field("type").error("is missing")
        return t

    def unsupported(self, type_name):
        return self.field("type").error("%r is not supported" % (type_name,))


def build(registry, d, ctx, what):
    """Construct the component named by d['type'] from `registry` {name: from_dict}."""
    if d is None:
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
