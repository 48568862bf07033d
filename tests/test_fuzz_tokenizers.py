"""Fuzzing tokenizer.json: mutated small WordPiece, BPE, byte-level BPE and Unigram files
are read and used (encode, pairs, batches, decode); the only acceptable outcomes are a
working tokenizer or one of ember's own errors, never another exception or a hang.

EMBER_FUZZ_CASES sets the cases per format (300 by default, a few seconds); run with -s
to see the outcome counts.
"""
import collections
import json
import zlib

import pytest
from fuzz_mutator import cases_per_format, mutated_documents

from ember.errors import EmberError
from ember.tokenizers import Tokenizer
from ember.tokenizers._bytes import BYTE_TO_CHAR

SAMPLES = ["Hello world!", "unaffable café 中文 12", "  \t\n", "", "the thethe [MASK] <s>x</s>", "a" * 300]


def _wordpiece():
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "!",
                                         "un", "##aff", "##able", "caf", "##é", "中", "文", "1", "##2", "the"])}
    return {"version": "1.0", "truncation": {"max_length": 16, "strategy": "LongestFirst", "stride": 0,
                                             "direction": "Right"},
            "padding": {"strategy": {"Fixed": 20}, "direction": "Right", "pad_id": 0, "pad_type_id": 0,
                        "pad_token": "[PAD]", "pad_to_multiple_of": None},
            "added_tokens": [{"id": 0, "content": "[PAD]", "special": True, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False},
                             {"id": 4, "content": "[MASK]", "special": True, "single_word": False, "lstrip": True,
                              "rstrip": False, "normalized": False}],
            "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                           "strip_accents": None, "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}},
                                          {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                               "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                        {"Sequence": {"id": "A", "type_id": 0}},
                                        {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                                        {"Sequence": {"id": "B", "type_id": 1}},
                                        {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
                               "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                                  "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": vocab}}


def _bpe():
    merges = [["t", "h"], ["th", "e</w>"], ["h", "e"], ["l", "l"], ["he", "ll"], ["hell", "o</w>"]]
    pieces = ["<unk>", "<cls>", "<sep>"] + list("abcdefghijklmnopqrstuvwxyz!") + \
        [c + "</w>" for c in "abcdefghijklmnopqrstuvwxyz!"]
    pieces += ["th", "the</w>", "he", "ll", "hell", "hello</w>"]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "StripAccents"},
                                                               {"type": "Lowercase"}]},
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": {"type": "BertProcessing", "sep": ["<sep>", 2], "cls": ["<cls>", 1]},
            "decoder": {"type": "BPEDecoder", "suffix": "</w>"},
            "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                      "end_of_word_suffix": "</w>", "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": {p: i for i, p in enumerate(pieces)}, "merges": merges}}


def _byte_level_bpe():
    alphabet = sorted(BYTE_TO_CHAR.values())
    merges = [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["l", "l"], ["Ġ", "w"], ["o", "r"], ["Ġw", "or"]]
    pieces = ["<s>", "</s>"] + alphabet + [a + b for a, b in merges]
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": 0, "content": "<s>", "special": True, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False},
                             {"id": 1, "content": "</s>", "special": True, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False}],
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            "post_processor": {"type": "Sequence", "processors": [
                {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
                {"type": "RobertaProcessing", "sep": ["</s>", 1], "cls": ["<s>", 0], "trim_offsets": True,
                 "add_prefix_space": False}]},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                      "vocab": {p: i for i, p in enumerate(pieces)}, "merges": merges}}


def _unigram():
    pieces = [["<unk>", 0.0], ["<s>", 0.0], ["</s>", 0.0], ["\u2581", -2.0], ["\u2581the", -3.0], ["the", -4.0],
              ["h", -5.0], ["e", -5.0], ["l", -5.0], ["o", -5.0], ["\u2581hello", -6.0], ["wor", -7.0],
              ["ld", -7.5], ["!", -8.0]] + [["<0x%02X>" % b, -10.0] for b in range(256)]
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": 0, "content": "<unk>", "special": True, "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False}],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
            "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                              "split": True},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                          {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                               "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                        {"Sequence": {"id": "B", "type_id": 1}}],
                               "special_tokens": {"</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": True, "vocab": pieces}}


SEEDS = {"wordpiece": _wordpiece, "bpe": _bpe, "byte_level_bpe": _byte_level_bpe, "unigram": _unigram}


def exercise(text):
    """Read a tokenizer.json text and use every part of it."""
    tok = Tokenizer.from_str(text, source="fuzz/tokenizer.json")
    for s in SAMPLES:
        enc = tok.encode(s)
        tok.decode(enc.ids)
        tok.decode(enc.ids, skip_special_tokens=False)
    tok.encode(SAMPLES[0], SAMPLES[1])
    tok.encode_batch([SAMPLES[1], (SAMPLES[0], SAMPLES[4])])
    tok.encode(["pre", "tokenized"], is_pretokenized=True)
    tok.decode([0, 1, 2, 5, 17, 999999])
    tok.get_vocab_size()


def run_fuzz(name, count):
    outcomes = collections.Counter()
    failures = []
    seed_doc = SEEDS[name]()
    exercise(json.dumps(seed_doc))  # the seed itself works
    for i, text in enumerate(mutated_documents(seed_doc, count, seed=zlib.crc32(name.encode()))):
        try:
            exercise(text)
            outcomes["ok"] += 1
        except EmberError as exc:
            outcomes[type(exc).__name__] += 1
        except Exception as exc:  # what the test exists to find
            outcomes["FOREIGN " + type(exc).__name__] += 1
            failures.append((i, f"{type(exc).__name__}: {str(exc)[:200]}", text[:300]))
    return outcomes, failures


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_mutated_tokenizer_json_gives_only_ember_errors(name):
    count = cases_per_format()
    outcomes, failures = run_fuzz(name, count)
    print(f"tokenizer.json {name}: {count} cases: {dict(sorted(outcomes.items()))}")
    assert not failures, "\n".join(f"case {i}: {err}\n  {text}" for i, err, text in failures[:5])
    assert outcomes["ok"] > count // 10  # most mutations still load: the mutator is not only breaking JSON
