"""tokenizer.json values are type- and range-checked: every malformed field is a
FormatError naming the file and the field (the fuzz run found these as TypeErrors,
"unhashable" vocab values and RecursionErrors), and inputs a valid file cannot encode
are an EncodeError, both ember errors."""
import json
import os

import pytest

from ember.errors import EmberError, FormatError
from ember.tokenizers import Tokenizer
from ember.tokenizers.errors import EncodeError

WORDLEVEL = {"model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"}}


def _with(base, **changes):
    doc = json.loads(json.dumps(base))
    for dotted, value in changes.items():
        node = doc
        keys = dotted.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return doc


@pytest.mark.parametrize("doc, field", [
    (_with(WORDLEVEL, model__vocab={"a": [1]}), "model.vocab maps 'a' to [1]"),
    (_with(WORDLEVEL, model__vocab={"a": {"x": 1}}), "model.vocab maps 'a'"),
    (_with(WORDLEVEL, model__vocab={"a": "1"}), "model.vocab maps 'a' to '1'"),
    (_with(WORDLEVEL, model__vocab={"a": -1}), "model.vocab maps 'a' to -1"),
    (_with(WORDLEVEL, model__vocab={"a": True}), "model.vocab maps 'a' to True"),
    (_with(WORDLEVEL, model__vocab={"ok": 0, "big": 2**32}), "model.vocab maps 'big' to 4294967296"),
    (_with(WORDLEVEL, model__vocab=None), "model.vocab must not be null"),
    ({"model": {"type": "WordPiece", "vocab": {"a": 0}, "max_input_chars_per_word": -5}},
     "model.max_input_chars_per_word is -5"),
    ({"model": {"type": "BPE", "vocab": {"a": 0.5}, "merges": []}}, "model.vocab maps 'a' to 0.5"),
    ({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 7}}, "model.dropout is 7"),
    ({"model": {"type": "Unigram", "vocab": [["a", "x"]]}}, "model.vocab[0][1] must be a number"),
    ({"model": {"type": "Unigram", "vocab": [["a", 0.0]], "unk_id": -1}}, "model.unk_id is -1"),
    (_with(WORDLEVEL, normalizer={"type": "Sequence", "normalizers": [None]}),
     "normalizer.normalizers[0] must be an object"),
    (_with(WORDLEVEL, pre_tokenizer={"type": "Sequence", "pretokenizers": [5]}),
     "pre_tokenizer.pretokenizers[0] must be an object"),
    (_with(WORDLEVEL, padding={"pad_to_multiple_of": 0}), "padding.pad_to_multiple_of is 0"),
    (_with(WORDLEVEL, padding={"strategy": {"Fixed": -3}}), "padding.strategy.Fixed is -3"),
    (_with(WORDLEVEL, padding={"strategy": {"Fixed": 2 ** 40}}), "padding.strategy.Fixed is"),
    (_with(WORDLEVEL, padding={"pad_id": "0"}), "padding.pad_id has the wrong type str"),
    (_with(WORDLEVEL, truncation={"max_length": 4, "stride": -1}), "truncation.stride is -1"),
    (_with(WORDLEVEL, added_tokens=[{"id": -2, "content": "x"}]), "added_tokens[0].id is -2"),
    (_with(WORDLEVEL, post_processor={"type": "TemplateProcessing", "single": [], "special_tokens": {
        "x": {"id": "x", "ids": ["1"], "tokens": ["x"]}}}), "post_processor.special_tokens.x.ids[0] must be a token id"),
    (_with(WORDLEVEL, post_processor={"type": "TemplateProcessing", "single": [], "special_tokens": {
        "x": {"id": "x", "ids": [1], "tokens": [1]}}}), "post_processor.special_tokens.x.tokens[0] must be a string"),
    (_with(WORDLEVEL, post_processor={"type": "BertProcessing", "sep": ["[SEP]", -1], "cls": ["[CLS]", 1]}),
     "post_processor.sep must be [token, id]"),
])
def test_malformed_fields_name_file_and_field(doc, field):
    with pytest.raises(FormatError) as info:
        Tokenizer.from_str(json.dumps(doc), source="m/tokenizer.json")
    assert str(info.value).startswith("m/tokenizer.json: ")
    assert field in str(info.value)


@pytest.mark.parametrize("text, why", [
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ('{"model": {"type": "Unigram", "vocab": [["a", NaN]]}}', "NaN is not a JSON number"),
    ('{"model": {"type": "Unigram", "vocab": [["a", -Infinity]]}}', "Infinity is not a JSON number"),
])
def test_json_the_reference_refuses_is_a_format_error(text, why):
    with pytest.raises(FormatError, match=why):
        Tokenizer.from_str(text, source="m/tokenizer.json")


def test_a_directory_or_fifo_is_a_format_error_not_a_hang(tmp_path):
    with pytest.raises(FormatError, match="is not a regular file"):
        Tokenizer.from_file(tmp_path)
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "tokenizer.json"
        os.mkfifo(fifo)
        with pytest.raises(FormatError, match="is not a regular file"):
            Tokenizer.from_file(fifo)
    with pytest.raises(FormatError, match="cannot be read"):
        Tokenizer.from_file(tmp_path / "absent.json")
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"model": "\xff"}')
    with pytest.raises(FormatError, match="cannot be read"):
        Tokenizer.from_file(bad)


@pytest.mark.parametrize("model", [
    {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "[UNK]"},
    {"type": "WordPiece", "vocab": {"a": 0}, "unk_token": "[UNK]"},
    {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"},
    {"type": "Unigram", "vocab": [["a", -1.0]]},
])
def test_an_unknown_char_without_an_unknown_token_is_an_encode_error(model):
    tok = Tokenizer.from_str(json.dumps({"model": model}))
    assert tok.encode("a").ids == [0]
    with pytest.raises(EncodeError) as info:
        tok.encode("b")
    assert isinstance(info.value, EmberError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("kind", ["WordLevel", "WordPiece", "BPE"])
def test_an_id_given_to_two_tokens_decodes_to_the_last_one(kind):
    # which token such an id decodes to is ember's choice (the reference builds its
    # reverse map in a hash map's order): the last one in the file
    model = {"type": kind, "vocab": {"a": 0, "b": 1, "c": 1}}
    if kind == "BPE":
        model["merges"] = []
    tok = Tokenizer.from_str(json.dumps({"model": model}))
    assert (tok.id_to_token(1), tok.id_to_token(0), tok.token_to_id("b")) == ("c", "a", 1)
