"""Post-processors: add special tokens around the encoded sequence(s)."""

from . import _unicode as U
from ._config import MAX_ID, build
from .encoding import Encoding
from .errors import EncodeError

_SPACE_CHAR = "\u0120"  # the byte-level char for b" "


class PostProcessor:
    def added_tokens(self, is_pair):
        return 0

    def num_special_tokens_to_add(self, is_pair):
        return self.added_tokens(is_pair)

    def process_encodings(self, encodings, add_special_tokens):
        raise NotImplementedError

    def process(self, encoding, pair=None, add_special_tokens=True):
        encs = [encoding] if pair is None else [encoding, pair]
        for i, e in enumerate(encs):
            e.set_sequence_id(i)
        return Encoding.merge(self.process_encodings(encs, add_special_tokens))

    def __repr__(self):
        fields = ", ".join(
            "%s=%r" % kv for kv in sorted(vars(self).items()) if not kv[0].startswith("_")
        )
        return "%s(%s)" % (type(self).__name__, fields)


def trim_offsets(encoding, add_prefix_space):
    """Byte-level offsets exclude the leading/trailing spaces of each token."""
    offsets = encoding.offsets
    for i, token in enumerate(encoding.tokens):
        lead = 0
        for c in token:
            if c == _SPACE_CHAR or c in U.WHITESPACE:
                lead += 1
            else:
                break
        trail = 0
        for c in reversed(token):
            if c == _SPACE_CHAR or c in U.WHITESPACE:
                trail += 1
            else:
                break
        if not lead and not trail:
            continue
        s, e = offsets[i]
        if lead:
            if (i == 0 or s == 0) and add_prefix_space and lead == 1:
                lead = 0
            s = min(s + lead, e)
        if trail and e >= trail:
            e = max(e - trail, s)
        offsets[i] = (s, e)


class TemplateProcessing(PostProcessor):
    """Templates of pieces: ('A'|'B', type_id) sequences and special tokens."""

    def __init__(self, single, pair=None, special_tokens=None):
        self.special_tokens = {}
        for item in special_tokens or []:
            if isinstance(item, dict):
                self.special_tokens[item["id"]] = (list(item["ids"]), list(item["tokens"]))
            elif isinstance(item, (tuple, list)) and len(item) == 2:
                name, tid = item
                if isinstance(name, int):
                    name, tid = tid, name
                self.special_tokens[name] = ([tid], [name])
            else:
                raise ValueError("special_tokens items are (token, id) pairs")
        self.single = _parse_template(single)
        self.pair = _parse_template(pair) if pair is not None else None
        for piece in self.single + (self.pair or []):
            if piece[0] == "special" and piece[1] not in self.special_tokens:
                raise ValueError("template uses %r which is not in special_tokens" % piece[1])

    @classmethod
    def from_dict(cls, d, ctx):
        sctx = ctx.field("special_tokens")
        specials = []
        for name, spec in ctx.get(d, "special_tokens", {}, dict).items():
            s = sctx.field(name)
            s.obj(spec)
            ids = [
                s.field("ids").item(k).id_value(v)
                for k, v in enumerate(s.get(spec, "ids", kind=list))
            ]
            tokens = s.str_list(spec, "tokens")
            if len(ids) != len(tokens):
                raise s.error("has %d ids but %d tokens" % (len(ids), len(tokens)))
            specials.append({"id": s.get(spec, "id", name, str), "ids": ids, "tokens": tokens})
        single = _template_from_json(ctx.get(d, "single", kind=list), ctx.field("single"))
        pair = ctx.get(d, "pair", None, list)
        if pair is not None:
            pair = _template_from_json(pair, ctx.field("pair"))
        try:
            return cls(single, pair, specials)
        except ValueError as exc:
            raise ctx.error("is invalid: %s" % exc) from None

    def added_tokens(self, is_pair):
        template = self.pair if is_pair else self.single
        return sum(len(self.special_tokens[p[1]][0]) for p in template or [] if p[0] == "special")

    def process_encodings(self, encodings, add_special_tokens):
        if len(encodings) == 2:
            if self.pair is None:
                raise EncodeError("TemplateProcessing: no pair template to encode a pair")
            template = self.pair
        else:
            template = self.single
        out = []
        for kind, name, type_id in template:
            if kind == "sequence":
                i = 0 if name == "A" else 1
                if i >= len(encodings):
                    raise EncodeError(
                        "TemplateProcessing: template uses $%s without a second sequence" % name
                    )
                e = encodings[i]
                e.set_type_ids(type_id)
                e.set_sequence_id(i)
                out.append(e)
            elif add_special_tokens:
                ids, tokens = self.special_tokens[name]
                out.append(Encoding.special(ids, tokens, type_id))
        return out


def _parse_template(template):
    """A template string ('[CLS] $A:0 [SEP]') or list → [(kind, name, type_id)]."""
    if isinstance(template, str):
        template = template.split()
    pieces = []
    for item in template:
        if isinstance(item, tuple) and len(item) == 3:
            pieces.append(item)
            continue
        if not isinstance(item, str):
            raise ValueError("bad template piece %r" % (item,))
        content, type_id = item, 0
        if ":" in item[1:]:
            content, _, num = item.rpartition(":")
            if num.isdigit():
                type_id = int(num)
            else:
                content = item
        if content.startswith("$"):
            rest = content[1:]
            if rest in ("", "A", "a"):
                pieces.append(("sequence", "A", type_id))
            elif rest in ("B", "b"):
                pieces.append(("sequence", "B", type_id))
            elif rest.isdigit():
                pieces.append(("sequence", "A", int(rest)))
            else:
                raise ValueError("bad template piece %r" % item)
        else:
            pieces.append(("special", content, type_id))
    return pieces


def _template_from_json(items, ctx):
    pieces = []
    for i, item in enumerate(items):
        ictx = ctx.item(i)
        ictx.obj(item)
        if "Sequence" in item:
            seq = ictx.field("Sequence").obj(item["Sequence"])
            name = seq.get("id", "A")
            if name not in ("A", "B"):
                raise ictx.field("Sequence.id").error("%r is not 'A' or 'B'" % (name,))
            pieces.append(("sequence", name, ictx.field("Sequence").int_in(seq, "type_id", 0)))
        elif "SpecialToken" in item:
            sp = ictx.field("SpecialToken").obj(item["SpecialToken"])
            pieces.append(
                (
                    "special",
                    ictx.field("SpecialToken").get(sp, "id", kind=str),
                    ictx.field("SpecialToken").int_in(sp, "type_id", 0),
                )
            )
        else:
            raise ictx.error("must be {'Sequence': ...} or {'SpecialToken': ...}")
    return pieces


def _token_pair(value, ctx, key):
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], int)
        or isinstance(value[1], bool)
        or not 0 <= value[1] <= MAX_ID
    ):
        raise ctx.field(key).error("must be [token, id]")
    return value[0], value[1]


class BertProcessing(PostProcessor):
    """[CLS] A [SEP] (B [SEP]); B and its [SEP] get type id 1."""

    def __init__(self, sep=("[SEP]", 102), cls=("[CLS]", 101)):
        self.sep = tuple(sep)
        self.cls = tuple(cls)

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            _token_pair(ctx.get(d, "sep"), ctx, "sep"), _token_pair(ctx.get(d, "cls"), ctx, "cls")
        )

    def added_tokens(self, is_pair):
        return 3 if is_pair else 2

    def process_encodings(self, encodings, add_special_tokens):
        if not add_special_tokens:
            return encodings
        out = [
            Encoding.special([self.cls[1]], [self.cls[0]], 0),
            encodings[0],
            Encoding.special([self.sep[1]], [self.sep[0]], 0),
        ]
        if len(encodings) > 1:
            out += [encodings[1], Encoding.special([self.sep[1]], [self.sep[0]], 1)]
        return out


class RobertaProcessing(PostProcessor):
    """<s> A </s> (</s> B </s>); every type id is 0."""

    def __init__(self, sep=("</s>", 2), cls=("<s>", 0), trim_offsets=True, add_prefix_space=True):
        self.sep = tuple(sep)
        self.cls = tuple(cls)
        self.trim_offsets = trim_offsets
        self.add_prefix_space = add_prefix_space

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            _token_pair(ctx.get(d, "sep"), ctx, "sep"),
            _token_pair(ctx.get(d, "cls"), ctx, "cls"),
            ctx.get(d, "trim_offsets", True, bool),
            ctx.get(d, "add_prefix_space", True, bool),
        )

    def added_tokens(self, is_pair):
        return 4 if is_pair else 2

    def process_encodings(self, encodings, add_special_tokens):
        if self.trim_offsets:
            for e in encodings:
                trim_offsets(e, self.add_prefix_space)
        for e in encodings:
            e.set_type_ids(0)
        if not add_special_tokens:
            return encodings
        sep, cls_ = self.sep, self.cls
        out = [
            Encoding.special([cls_[1]], [cls_[0]], 0),
            encodings[0],
            Encoding.special([sep[1]], [sep[0]], 0),
        ]
        if len(encodings) > 1:
            out += [
                Encoding.special([sep[1]], [sep[0]], 0),
                encodings[1],
                Encoding.special([sep[1]], [sep[0]], 0),
            ]
        return out


class ByteLevel(PostProcessor):
    """Only trims the byte-level spaces out of the offsets (when trim_offsets)."""

    def __init__(self, trim_offsets=True, add_prefix_space=True):
        self.trim_offsets = trim_offsets
        self.add_prefix_space = add_prefix_space

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            ctx.get(d, "trim_offsets", True, bool), ctx.get(d, "add_prefix_space", True, bool)
        )

    def process_encodings(self, encodings, add_special_tokens):
        if self.trim_offsets:
            for e in encodings:
                trim_offsets(e, self.add_prefix_space)
        return encodings


class Sequence(PostProcessor):
    def __init__(self, processors):
        self.processors = list(processors)

    @classmethod
    def from_dict(cls, d, ctx):
        items = ctx.get(d, "processors", kind=list)
        sub = ctx.field("processors")
        return cls([from_dict(x, sub.item(i), optional=False) for i, x in enumerate(items)])

    def added_tokens(self, is_pair):
        return sum(p.added_tokens(is_pair) for p in self.processors)

    def process_encodings(self, encodings, add_special_tokens):
        for p in self.processors:
            encodings = p.process_encodings(encodings, add_special_tokens)
        return encodings


REGISTRY = {
    "TemplateProcessing": TemplateProcessing.from_dict,
    "BertProcessing": BertProcessing.from_dict,
    "RobertaProcessing": RobertaProcessing.from_dict,
    "ByteLevel": ByteLevel.from_dict,
    "Sequence": Sequence.from_dict,
}


def from_dict(d, ctx, optional=True):
    """Build a post-processor from its tokenizer.json object (None stays None)."""
    return build(REGISTRY, d, ctx, "post_processor", optional)


def default_process(encoding, pair, add_special_tokens):
    """What happens without a post-processor: the pair is appended."""
    encoding.set_sequence_id(0)
    if pair is None:
        return encoding
    pair.set_sequence_id(1)
    return Encoding.merge([encoding, pair])
