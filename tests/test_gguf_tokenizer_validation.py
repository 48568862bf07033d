"""A GGUF file's tokenizer.ggml.* metadata is type- and range-checked: each malformed
field is a FormatError naming the file and the field (not a TypeError or IndexError)."""
import pytest

from ember.errors import FormatError
from ember.models.gguf_tokenizer import tokenizer_from_metadata

GOOD = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab", "<s>"],
        "tokenizer.ggml.token_type": [1, 1, 1, 3], "tokenizer.ggml.merges": ["a b"],
        "tokenizer.ggml.bos_token_id": 3, "tokenizer.ggml.eos_token_id": 3}


@pytest.mark.parametrize("field, value, why", [
    ("tokenizer.ggml.model", 5, "must be a string"),
    ("tokenizer.ggml.tokens", "abc", "must be an array"),
    ("tokenizer.ggml.tokens", ["a", 5, "ab", "<s>"], "tokenizer.ggml.tokens[1] has the wrong type int"),
    ("tokenizer.ggml.token_type", [1, 1], "has 2 entries for 4 tokens"),
    ("tokenizer.ggml.token_type", [1, 1, "x", 3], "tokenizer.ggml.token_type[2]"),
    ("tokenizer.ggml.merges", [["a", "b"]], "tokenizer.ggml.merges[0]"),
    ("tokenizer.ggml.scores", [0.0, float("nan"), 0.0, 0.0], "must be finite"),
    ("tokenizer.ggml.bos_token_id", 99, "is 99, not a token id (0 to 3)"),
    ("tokenizer.ggml.eos_token_id", -1, "is -1, not a token id"),
    ("tokenizer.ggml.eos_token_id", "3", "is '3', not a token id"),
    ("tokenizer.ggml.pre", ["llama3"], "tokenizer.ggml.pre must be a string"),
    ("tokenizer.ggml.add_bos_token", "yes", "must be a bool"),
])
def test_malformed_tokenizer_metadata_names_file_and_field(field, value, why):
    md = dict(GOOD, **{field: value})
    with pytest.raises(FormatError) as info:
        tokenizer_from_metadata(md, "m.gguf")
    assert str(info.value).startswith("m.gguf: ")
    assert why in str(info.value)


def test_the_unchanged_metadata_loads():
    tok = tokenizer_from_metadata(dict(GOOD, **{"tokenizer.ggml.add_bos_token": True}), "m.gguf")
    assert tok.encode("ab").ids == [3, 2]
