"""Open a tokenizer.json for a pipeline, with its padding and truncation turned off
(pipelines batch by length and truncate themselves)."""

import os

from ..errors import EmberError


def load_tokenizer(path, max_length=None):
    """ember's pure-Python Tokenizer; the `tokenizers` package stands in while
    ember.tokenizers has no Tokenizer (both share the API used here). Padding is turned
    off; truncation is set to `max_length` (sentence-transformers' max_seq_length, which
    overrides tokenizer.json's own setting)."""
    if not os.path.isfile(path):
        raise EmberError(f"tokenizer: {path} does not exist", path=path)
    try:
        from ..tokenizers import Tokenizer
    except ImportError:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmberError(
                f"tokenizer: ember.tokenizers has no Tokenizer here and the `tokenizers` "
                f"package is missing ({exc})",
                path=path,
            ) from None
    tok = Tokenizer.from_file(path)
    if hasattr(tok, "no_padding"):
        tok.no_padding()
    if max_length and hasattr(tok, "enable_truncation"):
        tok.enable_truncation(max_length)
    elif hasattr(tok, "no_truncation"):
        tok.no_truncation()
    return tok


def encode_ids(tok, texts, max_length):
    """Token ids per text, unpadded, cut to `max_length` keeping the final special token
    (e.g. [SEP]), which is where truncation before post-processing would leave it."""
    out = []
    for enc in tok.encode_batch(list(texts)):
        ids = list(enc.ids)
        mask = getattr(enc, "attention_mask", None)
        if mask is not None and len(mask) == len(ids):
            n = sum(1 for m in mask if m)
            ids = ids[:n]  # padding (if the tokenizer still adds it) is on the right
        if max_length and len(ids) > max_length:
            ids = ids[: max_length - 1] + ids[-1:]
        out.append(ids)
    return out
