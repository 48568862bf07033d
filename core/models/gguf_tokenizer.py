"""A tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.

The metadata is rewritten as the tokenizer.json a Hugging Face tokenizer of the same
kind would have, and handed to `ember.tokenizers.Tokenizer.from_dict`:

- "gpt2": byte-level BPE (GPT-2, Llama 3, Qwen2 ...): vocab, merges, and the pre-split
  regex named by `tokenizer.ggml.pre`.
- "llama": SentencePiece BPE with byte fallback (Llama 2, Mistral ...): "▁" for spaces;
  when the file has no merges they are derived from the piece scores (a merge ranks by
  the score of the piece it makes, as SentencePiece applies them). With
  `tokenizer.ggml.add_space_prefix` false (Gemma 3) no "▁" is put before the text.
  Gemma files (general.architecture gemma, gemma2, gemma3) store the pieces made of
  spaces as spaces, and their scores do not follow the merge order: those pieces are
  spelled with "▁" again and merges rank by the position of the piece they make, as
  transformers reads these files.
"""

import math

from ..errors import FormatError

_GEMMA = ("gemma", "gemma2", "gemma3")

# tokenizer.ggml.token_type values
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# Pre-split patterns by tokenizer.ggml.pre (the public patterns of those tokenizers).
_GPT2_SPLIT = None  # the ByteLevel pre-tokenizer's own regex
_SPLITS = {
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
_SPLITS["llama3"] = _SPLITS["llama-bpe"]
_SPLITS["smaug-bpe"] = _SPLITS["llama-bpe"]


def _bad(path, field, why):
    return FormatError(f"{path}: {field} {why}", path=path, field=field)


def _list_of(md, field, kinds, path, length=None):
    """md[field] (absent: None) checked to be a list of `kinds`, of `length` if given."""
    values = md.get(field)
    if values is None:
        return None
    if not isinstance(values, (list, tuple)):
        raise _bad(path, field, f"must be an array, not {type(values).__name__}")
    for i, v in enumerate(values):
        if not isinstance(v, kinds) or isinstance(v, bool):
            raise _bad(path, f"{field}[{i}]", f"has the wrong type {type(v).__name__}")
    if length is not None and len(values) != length:
        raise _bad(path, field, f"has {len(values)} entries for {length} tokens")
    return list(values)


def _token_id(md, field, n_tokens, path, default=None):
    value = md.get(field, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < n_tokens:
        raise _bad(path, field, f"is {value!r}, not a token id (0 to {n_tokens - 1})")
    return value


def tokenizer_json_from_metadata(md, path="a GGUF file"):
    """The tokenizer.json dict equivalent to the metadata (every field read is
    type- and range-checked into a FormatError naming the file and field)."""
    kind = md.get("tokenizer.ggml.model")
    tokens = md.get("tokenizer.ggml.tokens")
    if kind is None or tokens is None:
        raise FormatError(
            f"{path}: no tokenizer in the metadata (tokenizer.ggml.model and "
            "tokenizer.ggml.tokens are needed)",
            path=path,
            field="tokenizer.ggml.model" if kind is None else "tokenizer.ggml.tokens",
        )
    if not isinstance(kind, str):
        raise _bad(path, "tokenizer.ggml.model", f"must be a string, not {type(kind).__name__}")
    tokens = _list_of(md, "tokenizer.ggml.tokens", str, path)
    types = _list_of(md, "tokenizer.ggml.token_type", int, path, len(tokens)) or [NORMAL] * len(
        tokens
    )
    _list_of(md, "tokenizer.ggml.merges", str, path)
    scores = _list_of(md, "tokenizer.ggml.scores", (int, float), path, len(tokens))
    if scores is not None and not all(map(math.isfinite, scores)):
        raise _bad(path, "tokenizer.ggml.scores", "must be finite numbers")
    if not isinstance(md.get("tokenizer.ggml.pre", ""), str):
        raise _bad(path, "tokenizer.ggml.pre", "must be a string")
    for flag in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix"):
        if not isinstance(md.get(flag, False), bool):
            raise _bad(path, flag, "must be a bool")
    gemma = kind == "llama" and md.get("general.architecture") in _GEMMA
    respelled = set()
    if gemma:
        respelled = {i for i, t in enumerate(tokens) if t and not t.strip(" ")}
        tokens = ["\u2581" * len(t) if i in respelled else t for i, t in enumerate(tokens)]
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": ty == CONTROL,
        }
        for i, (t, ty) in enumerate(zip(tokens, types, strict=True))
        if ty in (CONTROL, USER_DEFINED) and i not in respelled  # those go through BPE
    ]
    merges = md.get("tokenizer.ggml.merges")
    bos = _token_id(md, "tokenizer.ggml.bos_token_id", len(tokens), path)
    eos = _token_id(md, "tokenizer.ggml.eos_token_id", len(tokens), path)
    if kind == "gpt2":
        add_bos = bool(md.get("tokenizer.ggml.add_bos_token", False))
        pre = md.get("tokenizer.ggml.pre", "default")
        pattern = _SPLITS.get(pre, _GPT2_SPLIT)
        if pattern is None:
            pre_tok = {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": True,
                "use_regex": True,
            }
        else:
            pre_tok = {
                "type": "Sequence",
                "pretokenizers": [
                    {
                        "type": "Split",
                        "pattern": {"Regex": pattern},
                        "behavior": "Isolated",
                        "invert": False,
                    },
                    {
                        "type": "ByteLevel",
                        "add_prefix_space": False,
                        "trim_offsets": True,
                        "use_regex": False,
                    },
                ],
            }
        model = {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": pre in ("llama-bpe", "llama3", "smaug-bpe"),
            "vocab": vocab,
            "merges": list(merges or []),
        }
        d = {
            "normalizer": None,
            "pre_tokenizer": pre_tok,
            "decoder": {
                "type": "ByteLevel",
                "add_prefix_space": True,
                "trim_offsets": True,
                "use_regex": True,
            },
        }
    elif kind == "llama":
        add_bos = bool(md.get("tokenizer.ggml.add_bos_token", True))
        unk = _token_id(md, "tokenizer.ggml.unknown_token_id", len(tokens), path, default=0)
        scores = md.get("tokenizer.ggml.scores")
        if merges is None and gemma:
            merges = _merges_by_position(tokens, vocab)
        elif merges is None:
            merges = _merges_from_scores(tokens, types, scores, vocab)
        prefix = md.get("tokenizer.ggml.add_space_prefix", True)
        replace = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
        decoders = [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
        ]
        model = {
            "type": "BPE",
            "dropout": None,
            "unk_token": tokens[unk] if unk is not None else None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": list(merges),
        }
        if prefix:  # "▁" before the text, and its space stripped again when decoding
            normalizer = {
                "type": "Sequence",
                "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, replace],
            }
            decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
        else:
            normalizer = replace
        d = {
            "normalizer": normalizer,
            "pre_tokenizer": None,
            "decoder": {"type": "Sequence", "decoders": decoders},
        }
    else:
        raise FormatError(
            f"{path}: tokenizer.ggml.model {kind!r} is not supported (gpt2, llama)",
            path=path,
            field="tokenizer.ggml.model",
        )
    d.update(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "model": model,
            "post_processor": _bos_template(tokens, bos) if add_bos and bos is not None else None,
        }
    )
    if eos is not None:
        d["_eos_token_id"] = int(eos)
    return d


def _bos_template(tokens, bos):
    b = tokens[bos]
    return {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": b, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
        ],
        "pair": [
            {"SpecialToken": {"id": b, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": b, "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {b: {"id": b, "ids": [int(bos)], "tokens": [b]}},
    }


def _merges_from_scores(tokens, types, scores, vocab):
    """SentencePiece BPE merges: every split of a normal piece into two pieces of the
    vocabulary, ranked by the merged piece's score (higher first)."""
    if scores is None:
        scores = [-float(i) for i in range(len(tokens))]
    found = []
    for i, (piece, ty) in enumerate(zip(tokens, types, strict=True)):
        if ty != NORMAL or len(piece) < 2:
            continue
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            ia, ib = vocab.get(a), vocab.get(b)
            if ia is not None and ib is not None:
                found.append((-scores[i], i, ia, ib, a, b))
    found.sort()
    return [f"{a} {b}" for *_, a, b in found]


def _merges_by_position(tokens, vocab):
    """Gemma's merges: every split of a piece into two pieces of the vocabulary, ranked by
    the merged piece's position in the file (earlier first), then the longer left part.
    Pieces come in position order, so the ranking is the order they are found in."""
    merges = []
    for i, piece in enumerate(tokens):
        if vocab.get(piece) != i:
            continue  # a duplicate spelling: its first position ranks it
        for k in range(len(piece) - 1, 0, -1):
            left = piece[:k]
            if left in vocab:
                right = piece[k:]
                if right in vocab:
                    merges.append(f"{left} {right}")
    return merges


def tokenizer_from_metadata(md, path="a GGUF file"):
    from ..tokenizers import Tokenizer

    d = tokenizer_json_from_metadata(md, path)
    d.pop("_eos_token_id", None)
    return Tokenizer.from_dict(d, source=f"{path} (tokenizer.ggml.*)")
