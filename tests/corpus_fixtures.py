"""A tiny random sentence-embedding model (BERT 2 x 32, WordPiece, mean pooling, normalized)
saved by transformers, and generated corpora, for the corpus tests: fast enough to embed
tens of thousands of rows in a subprocess."""
import json
import random

import pytest

from helpers import require

WORDS = ("the a cat dog sat on mat ran in park big small red blue house tree bird sings "
         "quickly slowly over under and or is was it very jump ##s ##ed ##ing").split()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("corpus-model") / "tiny-st")


def save_tiny_model(path):
    torch = require("torch")
    transformers = require("transformers")
    tk = require("tokenizers")
    torch.manual_seed(17)
    config = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=37, max_position_embeddings=64)
    transformers.BertModel(config).eval().save_pretrained(str(path), safe_serialization=True)
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)}
    tok = tk.Tokenizer(tk.models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = tk.normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    tok.post_processor = tk.processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tok.save(str(path / "tokenizer.json"))
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize"}]
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    return path


def sentences(n, seed=0):
    """n texts of 1 to 40 words (their lengths vary, so windows sort them)."""
    rng = random.Random(seed)
    plain = [w for w in WORDS if not w.startswith("##")]
    return [" ".join(rng.choice(plain) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def write_jsonl(path, texts, **extra):
    with open(path, "w") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"text": text, "n": i, **extra}) + "\n")
    return path


def write_txt(path, texts):
    path.write_text("".join(t + "\n" for t in texts))
    return path
