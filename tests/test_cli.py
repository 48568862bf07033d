"""The `ember` command: embed, info and the demo, in-process and as `python -m ember.cli`."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ember.cli import main
from helpers import require
from minilm_fixtures import minilm_dir  # noqa: F401 (a fixture)


def _reference(minilm_dir, texts):
    """Mean-pooled, normalized all-MiniLM-L6-v2 vectors from transformers (torch CPU)."""
    torch = require("torch")
    transformers = require("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    model = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    enc = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_embed_prints_one_vector_per_text(capsys, minilm_dir):
    texts = ["A kitten naps in the sun.", "Interest rates rose again."]
    code, out, _ = _run(capsys, "embed", "--device", "cpu", "--model", minilm_dir, *texts)
    assert code == 0
    rows = np.array([[float(v) for v in line.split()] for line in out.strip().splitlines()])
    assert rows.shape == (2, 384)
    expected = _reference(minilm_dir, texts)
    cos = (rows * expected).sum(1) / np.linalg.norm(rows, axis=1)
    assert cos.min() >= 0.9999


def test_embed_json_with_the_default_model(capsys, minilm_dir):
    code, out, _ = _run(capsys, "embed", "--device", "cpu", "--json", "hello world")
    assert code == 0
    doc = json.loads(out)
    assert doc["model"] == "all-MiniLM-L6-v2" and doc["device"] == "cpu"
    v = np.array(doc["embeddings"])
    assert v.shape == (1, 384)
    assert float((v[0] * _reference(minilm_dir, ["hello world"])[0]).sum()) >= 0.9999


def test_embed_query_ranks_by_similarity(capsys, minilm_dir):
    texts = ["The quarterly earnings beat expectations.", "A small kitten is sleeping.",
             "The train leaves at noon."]
    code, out, _ = _run(capsys, "embed", "--device", "cpu", "--query", "a photo of a cat", *texts)
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 3
    scores = [float(line.split()[0]) for line in lines]
    ranked = [line.split(None, 1)[1] for line in lines]
    ref = _reference(minilm_dir, ["a photo of a cat"] + texts)
    ref_scores = ref[1:] @ ref[0]
    assert ranked == [texts[i] for i in np.argsort(-ref_scores)]
    assert ranked[0] == "A small kitten is sleeping."
    np.testing.assert_allclose(scores, np.sort(ref_scores)[::-1], atol=1e-3)

    code, out, _ = _run(capsys, "embed", "--device", "cpu", "--json", "--query", "a cat", *texts)
    doc = json.loads(out)
    assert doc["query"] == "a cat" and [r["text"] for r in doc["results"]][0] == texts[1]


def test_embed_without_texts_says_so(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", open(os.devnull))
    code, _, err = _run(capsys, "embed", "--device", "cpu")
    assert code == 2 and "at least one TEXT" in err


def test_embed_unknown_model_lists_the_places(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, _, err = _run(capsys, "embed", "--device", "cpu", "--model", "org/no-such-model", "x")
    assert code == 1
    assert "not found; looked in" in err and "models--org--no-such-model" in err


def test_info_lists_cpu_and_wgpu(capsys):
    code, out, _ = _run(capsys, "info")
    assert code == 0
    import numpy
    assert out.startswith("cpu     available: numpy " + numpy.__version__)
    assert "\nwgpu    " in out and "\ncuda    " in out
    code, out, _ = _run(capsys, "info", "--json")
    doc = json.loads(out)
    assert doc["cpu"]["numpy"] == numpy.__version__
    assert isinstance(doc["wgpu"]["available"], bool)
    if not doc["wgpu"]["available"]:
        assert doc["wgpu"]["reason"]


def test_demo_entry_point_ranks_the_cat_sentences_first(capsys, minilm_dir):
    code, out, _ = _run(capsys, "demo", "--device", "cpu")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("ember semantic search") and "device: cpu" in lines[0]
    assert lines[1].startswith("timings:") and "load" in lines[1] and "embed" in lines[1]
    results = [line.split(None, 1) for line in lines[3:]]
    assert len(results) == 12
    scores = [float(s) for s, _ in results]
    assert scores == sorted(scores, reverse=True)
    top3 = " ".join(text for _, text in results[:3]).lower()
    assert "cat" in top3 and "kitten" in top3


def test_python_m_ember_cli_runs_the_demo_on_the_best_device(minilm_dir):
    """What `make demo` runs after `make models`."""
    done = subprocess.run([sys.executable, "-m", "ember.cli", "demo"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert "device: " in done.stdout and "timings:" in done.stdout
    assert len([line for line in done.stdout.splitlines() if line.startswith("  ")]) == 12


def test_embed_reads_texts_from_stdin(capsys, monkeypatch, minilm_dir):
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO("first line\n\nsecond line\n"))
    code, out, _ = _run(capsys, "embed", "--device", "cpu", "--json")
    assert code == 0
    v = np.array(json.loads(out)["embeddings"])
    assert v.shape == (2, 384)
    expected = _reference(minilm_dir, ["first line", "second line"])
    assert ((v * expected).sum(1)).min() >= 0.9999


def test_embed_fetches_the_default_model_when_the_cache_is_empty(capsys, monkeypatch, tmp_path,
                                                                  minilm_dir):
    """`ember embed` without --model and without `make models`: it fetches (here the fetch
    is replaced by a copy of the real model) and says so on stderr."""
    import shutil
    from ember import hub
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fetched = []

    def fake_fetch(dest=None, force=False, log=print):
        fetched.append(hub.default_model_dir())
        shutil.copytree(minilm_dir, hub.default_model_dir())
        return hub.default_model_dir()

    monkeypatch.setattr(hub, "fetch_default_model", fake_fetch)
    code, out, err = _run(capsys, "embed", "--device", "cpu", "--json", "a kitten")
    assert code == 0 and fetched == [str(tmp_path / "cache" / "models" / "all-MiniLM-L6-v2")]
    assert "fetching" in err
    v = np.array(json.loads(out)["embeddings"][0])
    assert float(v @ _reference(minilm_dir, ["a kitten"])[0]) >= 0.9999


def test_import_ember_and_the_cli_stay_light():
    """Cold start: importing ember, its pipelines and the CLI loads no GPU driver, no
    torch/transformers, no tokenizer or safetensors package."""
    heavy = ("wgpu", "torch", "transformers", "tokenizers", "safetensors", "huggingface_hub",
             "cupy")
    code = ("import sys, ember, ember.pipelines, ember.cli, ember.hub, ember.models.bert; "
            "ember.cli.build_parser(); "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
