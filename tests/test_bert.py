"""BERT encoder and sentence-embedding parity with transformers (PyTorch CPU).

Tiny random models are built and saved by transformers in the test; the real
all-MiniLM-L6-v2 weights come from ember's cache (fetched like `make models`).
"""
import json
import os

import numpy as np
import pytest

import ember
from ember.models.bert import BertConfig, BertModel
from ember.models.pooling import read_pooling_config
from ember.nn import VarBuilder
from ember.pipelines import SentenceEmbedder
from helpers import require
from minilm_fixtures import SENTENCES, minilm_dir, minilm_reference  # noqa: F401 (fixtures)

WORDS = ("the a cat dog sat on mat ran in park big small red blue house tree bird sings "
         "quickly slowly over under and or is was it very jump ##s ##ed ##ing").split()


def _tiny_config(transformers, **overrides):
    base = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
                hidden_act="gelu")
    base.update(overrides)
    return transformers.BertConfig(**base)


def _save_tiny(tmp_path, name, model_cls="BertModel", seed=0, **overrides):
    torch = require("torch")
    transformers = require("transformers")
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(_tiny_config(transformers, **overrides)).eval()
    path = tmp_path / name
    model.save_pretrained(str(path), safe_serialization=True)
    return path, model


def _inputs(torch, batch=3, tokens=11, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (batch, tokens), generator=g)
    mask = torch.ones(batch, tokens, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 2:] = 0
    types = torch.randint(0, 2, (batch, tokens), generator=g)
    return ids, mask, types


def _ember_model(path, device):
    cfg = BertConfig.from_json(os.path.join(path, "config.json"))
    return BertModel(cfg, VarBuilder.from_dir(path, dtype=ember.f32, device=device))


@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_tiny_bert_last_hidden_state_matches_transformers(tmp_path, device, act):
    torch = require("torch")
    path, ref_model = _save_tiny(tmp_path, f"tiny-{act}", hidden_act=act)
    ids, mask, types = _inputs(torch)
    with torch.no_grad():
        expected = ref_model(input_ids=ids, attention_mask=mask,
                             token_type_ids=types).last_hidden_state.numpy()
    model = _ember_model(path, device)
    out = model(ember.tensor(ids.numpy(), device=device), ember.tensor(mask.numpy(), device=device),
                ember.tensor(types.numpy(), device=device))
    real = mask.numpy().astype(bool)  # padded rows are not compared: nobody reads them
    assert np.abs(out.numpy()[real] - expected[real]).max() <= 1e-4
    # Without mask and token types (all type 0): the default path must agree too.
    with torch.no_grad():
        expected = ref_model(input_ids=ids).last_hidden_state.numpy()
    out = model(ember.tensor(ids.numpy(), device=device))
    assert np.abs(out.numpy() - expected).max() <= 1e-4


@pytest.mark.parametrize("with_types", [False, True])
def test_skipping_the_padding_matches_transformers_on_the_real_tokens(tmp_path, device,
                                                                        with_types):
    """lengths= runs the token-wise steps on the real tokens only: the real positions must
    equal transformers' (which computes the padding too), the padded ones are zeros."""
    torch = require("torch")
    path, ref_model = _save_tiny(tmp_path, "tiny-packed")
    ids, mask, types = _inputs(torch)
    lengths = mask.sum(1).tolist()                       # [11, 7, 2]
    kwargs = {"token_type_ids": types} if with_types else {}
    with torch.no_grad():
        expected = ref_model(input_ids=ids, attention_mask=mask, **kwargs).last_hidden_state.numpy()
    model = _ember_model(path, device)
    et = {"token_type_ids": ember.tensor(types.numpy(), device=device)} if with_types else {}
    out = model(ember.tensor(ids.numpy(), device=device), lengths=lengths, **et).numpy()
    real = mask.numpy().astype(bool)
    assert np.abs(out[real] - expected[real]).max() <= 1e-4
    assert not out[~real].any()
    # No padding at all: the same as the unpacked path.
    full = model(ember.tensor(ids.numpy(), device=device), lengths=[11, 11, 11]).numpy()
    plain = model(ember.tensor(ids.numpy(), device=device)).numpy()
    np.testing.assert_array_equal(full, plain)


@pytest.mark.parametrize("lengths,pattern", [([11, 12, 3], r"lengths \[11, 12, 3\] must lie in \[0, 11\]"),
                                             ([3, -1, 2], r"must lie in \[0, 11\]"),
                                             ([3, 2], r"2 lengths for a batch of 3 rows")])
def test_bad_lengths_name_the_lengths(tmp_path, lengths, pattern):
    torch = require("torch")
    path, _ = _save_tiny(tmp_path, "tiny-lengths")
    ids, _, _ = _inputs(torch)
    with pytest.raises(ember.ShapeMismatch, match=pattern):
        _ember_model(path, ember.Device.cpu())(ember.tensor(ids.numpy()), lengths=lengths)


def test_checkpoints_nested_under_bert_prefix_load(tmp_path, device):
    torch = require("torch")
    path, ref_model = _save_tiny(tmp_path, "mlm", model_cls="BertForMaskedLM")
    ids, mask, _ = _inputs(torch, seed=3)
    with torch.no_grad():
        expected = ref_model.bert(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    out = _ember_model(path, device)(ember.tensor(ids.numpy(), device=device),
                                     ember.tensor(mask.numpy(), device=device))
    real = mask.numpy().astype(bool)
    assert np.abs(out.numpy()[real] - expected[real]).max() <= 1e-4


def test_config_that_disagrees_with_the_checkpoint_names_the_tensor(tmp_path):
    path, _ = _save_tiny(tmp_path, "tiny")
    cfg = BertConfig.from_json(os.path.join(path, "config.json"))
    cfg.intermediate_size = 40
    with pytest.raises(ember.ShapeMismatch,
                       match=r"encoder\.layer\.0\.intermediate\.dense\.weight.*model\.safetensors"):
        BertModel(cfg, VarBuilder.from_dir(path))


@pytest.mark.parametrize("field,value,pattern", [
    ("num_attention_heads", 5, "not divisible by num_attention_heads"),
    ("hidden_size", 0, "'hidden_size'"),
    ("position_embedding_type", "relative_key", "position_embedding_type"),
    ("model_type", "roberta", "model_type 'roberta'"),
])
def test_bad_config_names_the_field(tmp_path, field, value, pattern):
    cfg = {"hidden_size": 32, "num_attention_heads": 4, field: value}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ember.FormatError, match=pattern):
        BertConfig.from_json(str(tmp_path / "config.json"))


def test_too_many_tokens_is_a_clear_error(tmp_path):
    path, _ = _save_tiny(tmp_path, "tiny")
    model = _ember_model(path, ember.Device.cpu())
    with pytest.raises(ember.ShapeMismatch, match="exceed max_position_embeddings 64"):
        model(ember.zeros(1, 65, dtype=ember.i64))


# --- sentence-transformers pipeline on a tiny model ------------------------------------------------
def _write_tokenizer(path):
    tk = require("tokenizers")
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)}
    tok = tk.Tokenizer(tk.models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    tok.post_processor = tk.processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tok.save(str(path / "tokenizer.json"))
    return tok


def _sentence_dir(tmp_path, mode, normalize):
    path, model = _save_tiny(tmp_path, f"st-{mode}-{normalize}", seed=5)
    tok = _write_tokenizer(path)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir()
    flags = {f: False for f in ("pooling_mode_cls_token", "pooling_mode_mean_tokens",
                                "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens")}
    flags[{"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
           "max": "pooling_mode_max_tokens",
           "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens"}[mode]] = True
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                **flags}))
    return path, model, tok


TINY_TEXTS = ["the cat sat on the mat", "a dog", "big red bird sings very quickly over the house",
              "it", "the small blue tree and the big house", "dog ran", "jumps jumped jumping",
              "a cat is in the park", "Zebra!"]


def _reference_embeddings(torch, model, tok, texts, mode, normalize):
    """One text at a time, no padding at all: what the pooling means, computed in torch."""
    out = []
    for text in texts:
        ids = torch.tensor([tok.encode(text).ids])
        with torch.no_grad():
            h = model(input_ids=ids).last_hidden_state[0]
        v = {"mean": h.mean(0), "cls": h[0], "max": h.max(0).values,
             "mean_sqrt_len": h.sum(0) / (h.shape[0] ** 0.5)}[mode]
        if normalize:
            v = torch.nn.functional.normalize(v, dim=-1)
        out.append(v.numpy())
    return np.stack(out)


@pytest.mark.parametrize("mode,normalize", [("mean", True), ("mean", False), ("cls", False),
                                            ("max", True), ("mean_sqrt_len", False)])
def test_sentence_embedder_pooling_matches_unpadded_reference(tmp_path, device, mode, normalize):
    torch = require("torch")
    path, model, tok = _sentence_dir(tmp_path, mode, normalize)
    emb = SentenceEmbedder.from_pretrained(str(path), device=device)
    assert (emb.pooling.mode, emb.pooling.normalize) == (mode, normalize)
    expected = _reference_embeddings(torch, model, tok, TINY_TEXTS, mode, normalize)
    # batch_size 4 mixes lengths inside batches and spreads the texts over three of them.
    got = emb.encode(TINY_TEXTS, batch_size=4)
    assert got.shape == (len(TINY_TEXTS), 32) and got.device == device
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-4, rtol=1e-4)


def test_batch_tokens_bounds_the_padded_batch_and_keeps_the_vectors(tmp_path, device):
    torch = require("torch")
    path, model, tok = _sentence_dir(tmp_path, "mean", True)
    emb = SentenceEmbedder.from_pretrained(str(path), device=device)
    expected = _reference_embeddings(torch, model, tok, TINY_TEXTS, "mean", True)
    # 12 padded tokens a batch: the longest texts go alone (one past the budget), the
    # shortest several together.
    got = emb.encode(TINY_TEXTS + ["the cat sat on the mat and the dog ran in the park"],
                     batch_size=64, batch_tokens=12).numpy()
    np.testing.assert_allclose(got[:-1], expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(ember.EmberError, match="batch_tokens must be >= 1"):
        emb.encode(TINY_TEXTS, batch_tokens=0)


def test_batch_bounds_fill_each_batch_up_to_rows_and_padded_tokens():
    from ember.pipelines.sentence_embedder import batch_bounds

    # longest first: 20 // 10 = 2 rows, 20 // 9 = 2, then three rows of 5 (batch_size 3)
    assert batch_bounds([10, 10, 9, 5, 5, 5, 1], 3, 20) == [(0, 2), (2, 4), (4, 7)]
    # a text past the budget goes alone; an empty list has no batch
    assert batch_bounds([50, 3, 3], 8, 20) == [(0, 1), (1, 3)]
    assert batch_bounds([], 8, 20) == []


def test_similarity_is_the_cosine_matrix(tmp_path):
    path, _, _ = _sentence_dir(tmp_path, "mean", False)
    emb = SentenceEmbedder.from_pretrained(str(path), device="cpu")
    a = emb.encode(TINY_TEXTS[:3]).numpy()
    b = emb.encode(TINY_TEXTS[3:]).numpy()
    expected = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ \
        (b / np.linalg.norm(b, axis=1, keepdims=True)).T
    np.testing.assert_allclose(emb.similarity(ember.tensor(a), ember.tensor(b)).numpy(), expected,
                               atol=1e-5)
    np.testing.assert_allclose(emb.similarity(TINY_TEXTS[:3], TINY_TEXTS[3:]).numpy(), expected,
                               atol=1e-5)


def test_encode_normalize_override_and_empty_input(tmp_path):
    path, _, _ = _sentence_dir(tmp_path, "mean", False)
    emb = SentenceEmbedder.from_pretrained(str(path), device="cpu")
    v = emb.encode(TINY_TEXTS, normalize=True).numpy()
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert emb.encode([]).shape == (0, 32)
    with pytest.raises(ember.EmberError, match="strings"):
        emb.encode([1, 2])


def test_unsupported_sentence_transformers_module_is_named(tmp_path):
    (tmp_path / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Dense",
                                                        "path": "2_Dense"}]))
    with pytest.raises(ember.FormatError, match="Dense"):
        read_pooling_config(str(tmp_path))


# --- the real all-MiniLM-L6-v2 ----------------------------------------------------------------------
def test_minilm_matches_sentence_transformers_pipeline(device, minilm_dir, minilm_reference):
    emb = SentenceEmbedder.from_pretrained(minilm_dir, device=device)
    got = emb.encode(SENTENCES, batch_size=8).numpy()
    assert got.shape == (len(SENTENCES), 384)
    cos = (got * minilm_reference).sum(1) / (np.linalg.norm(got, axis=1) *
                                             np.linalg.norm(minilm_reference, axis=1))
    worst = int(np.argmin(cos))
    print(f"{device} vs sentence-transformers: min cosine {cos.min():.7f} over {len(SENTENCES)}")
    assert cos.min() >= 0.9999, f"sentence {worst} {SENTENCES[worst]!r}: cosine {cos[worst]}"
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_minilm_by_name_resolves_the_cached_default(minilm_dir):
    emb = SentenceEmbedder.from_pretrained("all-MiniLM-L6-v2", device="cpu")
    assert os.path.samefile(emb.model_path, minilm_dir)
    assert emb.max_seq_length == 256 and emb.pooling.normalize
