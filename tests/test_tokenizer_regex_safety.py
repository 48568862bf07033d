"""Tokenizer regexes that would backtrack exponentially (ReDoS) are refused when the
file is read, with a FormatError naming the file, the field and the pattern; the
patterns real tokenizers ship are accepted and still give the same words."""
import json

import pytest

from ember.errors import FormatError
from ember.models.gguf_tokenizer import _SPLITS
from ember.tokenizers import Tokenizer
from ember.tokenizers._regex import PatternError, compile_pattern
from ember.tokenizers.pre_tokenizers import GPT2_PATTERN

VOCAB = {"[UNK]": 0, "a": 1, "!": 2}

O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SHIPPED = [GPT2_PATTERN, O200K, *sorted(set(_SPLITS.values())),
           r"\d{1,3}(?=(?:\d{3})*\b)", r"(?=(\d{3})+(?!\d))", r" {2,}", r"\s+", r"\p{N}",
           r" ?[^(\s|[.,!?…。，、।۔،])]+", r"[一-龥\u3040-ゟ゠-ヿ]+", r"(?:ab|cd)+"]

CATASTROPHIC = [r"(a+)+$", r"(a*)*$", r"(a|a)+$", r"(\s*\w)*$", r"(\d{1,3})+$", r"(?:x(?:a|a))+$",
                r"(?:(?:a|)a)+$", r"((ab)+|a)+$", r"(?:a?a)+$", r"(.*,)+x"]


def _doc(section, key):
    spec = {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": key}, "behavior": "Isolated"},
            "normalizer": {"type": "Replace", "pattern": {"Regex": key}, "content": "a"},
            "decoder": {"type": "Replace", "pattern": {"Regex": key}, "content": "a"}}[section]
    return {"model": {"type": "WordLevel", "vocab": VOCAB, "unk_token": "[UNK]"}, section: spec}


@pytest.mark.parametrize("section", ["pre_tokenizer", "normalizer", "decoder"])
def test_the_reported_pattern_is_refused_naming_file_field_and_pattern(tmp_path, section):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(_doc(section, r"(a+)+$")), encoding="utf-8")
    with pytest.raises(FormatError) as info:
        Tokenizer.from_file(path)
    msg = str(info.value)
    assert msg.startswith(str(path) + ": " + section + ".pattern.Regex ")
    assert "'(a+)+$'" in msg and "exponential" in msg


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_catastrophic_patterns_are_refused(pattern):
    with pytest.raises(PatternError, match="exponential time"):
        compile_pattern(pattern)


@pytest.mark.parametrize("pattern", SHIPPED)
def test_shipped_patterns_are_accepted(pattern):
    rx = compile_pattern(pattern)
    assert rx.search("x" + "a" * 30 + "!  ab 123 4567 中文") is not None


def test_an_accepted_split_still_splits():
    tok = Tokenizer.from_str(json.dumps(_doc("pre_tokenizer", r"a+")))
    assert tok.pre_tokenizer.pre_tokenize_str("aa!a") == [("aa", (0, 2)), ("!", (2, 3)), ("a", (3, 4))]
