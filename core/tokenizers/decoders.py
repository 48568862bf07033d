"""Decoders: turn a list of token strings back into text."""

from ._bytes import CHAR_TO_BYTE
from ._config import build, compile_pattern_of
from ._regex import find_iter


class Decoder:
    def decode_chain(self, tokens):
        raise NotImplementedError

    def decode(self, tokens):
        return "".join(self.decode_chain(list(tokens)))

    def __repr__(self):
        fields = ", ".join(
            "%s=%r" % kv for kv in sorted(vars(self).items()) if not kv[0].startswith("_")
        )
        return "%s(%s)" % (type(self).__name__, fields)


_CLEANUPS = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def cleanup(text):
    """Undo the spaces that tokenization put before English punctuation/contractions."""
    for a, b in _CLEANUPS:
        text = text.replace(a, b)
    return text


class WordPiece(Decoder):
    def __init__(self, prefix="##", cleanup=True):
        self.prefix = prefix
        self.cleanup = cleanup

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(ctx.get(d, "prefix", "##", str), ctx.get(d, "cleanup", True, bool))

    def decode_chain(self, tokens):
        out = []
        prefix = self.prefix
        for i, tok in enumerate(tokens):
            if i:
                tok = tok.replace(prefix, "", 1) if tok.startswith(prefix) else " " + tok
            if self.cleanup:
                tok = cleanup(tok)
            out.append(tok)
        return out


class ByteLevel(Decoder):
    def __init__(self, **_ignored):
        pass

    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def decode_chain(self, tokens):
        data = bytearray()
        for tok in tokens:
            try:
                data.extend(CHAR_TO_BYTE[c] for c in tok)
            except KeyError:
                data.extend(tok.encode("utf-8", "surrogatepass"))
        return [data.decode("utf-8", "replace")]


class Metaspace(Decoder):
    def __init__(self, replacement="\u2581", prepend_scheme="always", split=True):
        self.replacement = replacement
        self.prepend_scheme = prepend_scheme
        self.split = split

    @classmethod
    def from_dict(cls, d, ctx):
        repl = ctx.get(d, "replacement", None, str)
        if repl is None:
            repl = ctx.get(d, "str_rep", "\u2581", str)
        scheme = ctx.get(d, "prepend_scheme", None, str)
        if scheme is None:
            scheme = "always" if ctx.get(d, "add_prefix_space", True, bool) else "never"
        return cls(repl, scheme, ctx.get(d, "split", True, bool))

    def decode_chain(self, tokens):
        r = self.replacement
        out = []
        for i, tok in enumerate(tokens):
            if i == 0 and self.prepend_scheme != "never":
                out.append(tok.replace(r, ""))
            else:
                out.append(tok.replace(r, " "))
        return out


class BPEDecoder(Decoder):
    def __init__(self, suffix="</w>"):
        self.suffix = suffix

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(ctx.get(d, "suffix", "</w>", str))

    def decode_chain(self, tokens):
        last = len(tokens) - 1
        return [t.replace(self.suffix, "" if i == last else " ") for i, t in enumerate(tokens)]


def _byte_of(token):
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        try:
            return int(token[3:5], 16)
        except ValueError:
            return None
    return None


class ByteFallback(Decoder):
    """<0xNN> tokens are gathered into bytes and decoded as UTF-8."""

    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def decode_chain(self, tokens):
        out = []
        pending = bytearray()

        def flush():
            try:
                out.append(pending.decode("utf-8"))
            except UnicodeDecodeError:
                out.extend("\ufffd" for _ in range(len(pending)))
            pending.clear()

        for tok in tokens:
            b = _byte_of(tok)
            if b is not None:
                pending.append(b)
                continue
            if pending:
                flush()
            out.append(tok)
        if pending:
            flush()
        return out


class Fuse(Decoder):
    @classmethod
    def from_dict(cls, d, ctx):
        return cls()

    def decode_chain(self, tokens):
        return ["".join(tokens)]


class Strip(Decoder):
    def __init__(self, content=" ", left=0, right=0):
        self.content = content
        self.left = left
        self.right = right

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            ctx.get(d, "content", " ", str), ctx.get(d, "start", 0, int), ctx.get(d, "stop", 0, int)
        )

    def decode_chain(self, tokens):
        out = []
        c = self.content
        for tok in tokens:
            i = 0
            while i < self.left and i < len(tok) and tok[i] == c:
                i += 1
            j = len(tok)
            k = 0
            while k < self.right and j > i and tok[j - 1] == c:
                j -= 1
                k += 1
            out.append(tok[i:j])
        return out


class Replace(Decoder):
    def __init__(self, pattern, content, _ctx=None):
        from ._config import Ctx

        self.pattern = pattern
        self.content = content
        if isinstance(pattern, str):
            pattern = {"String": pattern}
        self._rx = compile_pattern_of(pattern, _ctx or Ctx("<Replace>", "pattern"))

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            ctx.get(d, "pattern", kind=dict), ctx.get(d, "content", kind=str), ctx.field("pattern")
        )

    def decode_chain(self, tokens):
        out = []
        for tok in tokens:
            parts = []
            prev = 0
            for s, e in find_iter(self._rx, tok):
                parts.append(tok[prev:s])
                parts.append(self.content)
                prev = e
            parts.append(tok[prev:])
            out.append("".join(parts))
        return out


class CTC(Decoder):
    def __init__(self, pad_token="<pad>", word_delimiter_token="|", cleanup=True):
        self.pad_token = pad_token
        self.word_delimiter_token = word_delimiter_token
        self.cleanup = cleanup

    @classmethod
    def from_dict(cls, d, ctx):
        return cls(
            ctx.get(d, "pad_token", "<pad>", str),
            ctx.get(d, "word_delimiter_token", "|", str),
            ctx.get(d, "cleanup", True, bool),
        )

    def decode_chain(self, tokens):
        out = []
        prev = object()
        for tok in tokens:
            if tok == prev:
                continue
            prev = tok
            t = tok.replace(self.pad_token, "")
            if self.cleanup:
                t = cleanup(t).replace(self.word_delimiter_token, " ")
            if t:
                out.append(t)
        return out


class Sequence(Decoder):
    def __init__(self, decoders):
        self.decoders = list(decoders)

    @classmethod
    def from_dict(cls, d, ctx):
        items = ctx.get(d, "decoders", kind=list)
        sub = ctx.field("decoders")
        return cls([from_dict(x, sub.item(i), optional=False) for i, x in enumerate(items)])

    def decode_chain(self, tokens):
        for dec in self.decoders:
            tokens = dec.decode_chain(tokens)
        return tokens


REGISTRY = {
    "WordPiece": WordPiece.from_dict,
    "ByteLevel": ByteLevel.from_dict,
    "Metaspace": Metaspace.from_dict,
    "BPEDecoder": BPEDecoder.from_dict,
    "ByteFallback": ByteFallback.from_dict,
    "Fuse": Fuse.from_dict,
    "Strip": Strip.from_dict,
    "Replace": Replace.from_dict,
    "CTC": CTC.from_dict,
    "Sequence": Sequence.from_dict,
}


def from_dict(d, ctx, optional=True):
    """Build a decoder from its tokenizer.json object (None stays None)."""
    return build(REGISTRY, d, ctx, "decoder", optional)
