"""ember.tokenizers: a pure-Python reader of Hugging Face tokenizer.json files.

    from ember.tokenizers import Tokenizer
    tok = Tokenizer.from_file("tokenizer.json")
    enc = tok.encode("Hello world")        # enc.ids, enc.tokens, enc.attention_mask, ...
    tok.decode(enc.ids)

No native code and no numpy: it runs wherever Python does (Pyodide included).
Ids, tokens, type ids and attention masks match the `tokenizers` package.
"""

from ..errors import FormatError
from . import decoders, models, normalizers, post_processors, pre_tokenizers
from .added_vocabulary import AddedToken
from .encoding import Encoding
from .tokenizer import Tokenizer

processors = post_processors  # the name the `tokenizers` package uses

__all__ = [
    "AddedToken",
    "Encoding",
    "FormatError",
    "Tokenizer",
    "decoders",
    "models",
    "normalizers",
    "post_processors",
    "pre_tokenizers",
    "processors",
]
