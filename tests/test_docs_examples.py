"""docs/migrating-from-pytorch.md runs: every ```python block of its cheat sheet is
executed (the ember side always, the PyTorch side where torch is installed) and where a
pair both compute `result` the two agree; the worked example's excerpts are the code of
examples/port_a_pytorch_model.py, which runs and verifies within tolerance."""
import json
import os
import re
import subprocess
import sys

import ember
import numpy as np
import pytest
from helpers import require

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "migrating-from-pytorch.md")
EXAMPLE = os.path.join(ROOT, "examples", "port_a_pytorch_model.py")
FENCE = re.compile(r"^```python(?:[ \t]+(\w+))?[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SECTION = re.compile(r"^### (.+)$", re.MULTILINE)


def _blocks():
    """(section title, tag, code) for every ```python block, in order."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    heads = [(m.start(), m.group(1)) for m in SECTION.finditer(text)]
    out = []
    for m in FENCE.finditer(text):
        title = next((t for pos, t in reversed(heads) if pos < m.start()), "")
        out.append((title, m.group(1), m.group(2)))
    return out


def _pairs():
    """{section: (torch code, ember code)} for the cheat sheet."""
    pairs = {}
    for title, tag, code in _blocks():
        if tag in ("torch", "ember"):
            pairs.setdefault(title, {})[tag] = code
    return pairs


PAIRS = _pairs()


def test_every_python_block_is_a_tested_kind_and_every_section_is_paired():
    tags = [tag for _, tag, _ in _blocks()]
    assert set(tags) <= {"torch", "ember", "example"}, tags
    assert len(PAIRS) >= 8
    for title, pair in PAIRS.items():
        assert set(pair) == {"torch", "ember"}, title


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A tiny random Llama directory written without torch (numpy weights, config.json)."""
    path = tmp_path_factory.mktemp("tiny-llama")
    h, inter, layers, heads, kv, vocab = 32, 64, 2, 4, 2, 64
    hd = h // heads
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    tensors = {"model.embed_tokens.weight": w(vocab, h), "lm_head.weight": w(vocab, h),
               "model.norm.weight": 1 + w(h)}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors.update({
            p + "input_layernorm.weight": 1 + w(h), p + "post_attention_layernorm.weight": 1 + w(h),
            p + "self_attn.q_proj.weight": w(heads * hd, h), p + "self_attn.k_proj.weight": w(kv * hd, h),
            p + "self_attn.v_proj.weight": w(kv * hd, h), p + "self_attn.o_proj.weight": w(h, heads * hd),
            p + "mlp.gate_proj.weight": w(inter, h), p + "mlp.up_proj.weight": w(inter, h),
            p + "mlp.down_proj.weight": w(h, inter)})
    ember.io.save_safetensors({k: ember.from_numpy(v) for k, v in tensors.items()},
                              str(path / "model.safetensors"))
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": h,
              "intermediate_size": inter, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
              "hidden_act": "silu", "torch_dtype": "float32"}
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def _run(code, model_dir, title, side):
    scope = {"model_dir": model_dir, "__name__": f"doc_{side}"}
    try:
        exec(compile(code, f"{DOC} [{title}, {side}]", "exec"), scope)  # noqa: S102 (the doc is ours)
    except Exception as exc:
        raise AssertionError(f"the {side} block of '{title}' fails: {exc!r}") from exc
    return scope


def _arrays(value):
    if isinstance(value, (list, tuple)):
        return [_arrays(v) for v in value]
    if isinstance(value, ember.Tensor):
        return value.numpy()
    if hasattr(value, "detach"):
        return value.detach().numpy()
    return np.asarray(value)


def _assert_same(got, want, where):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, w, f"{where}[{i}]")
        return
    assert got.shape == want.shape, f"{where}: shape {got.shape} vs torch {want.shape}"
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-4,
                               atol=1e-5, err_msg=where)


@pytest.mark.parametrize("title", sorted(PAIRS))
def test_the_ember_side_runs(title, model_dir):
    scope = _run(PAIRS[title]["ember"], model_dir, title, "ember")
    assert "result" in scope, f"'{title}': the ember block sets no result"


@pytest.mark.parametrize("title", sorted(PAIRS))
def test_the_pytorch_side_runs_and_agrees(title, model_dir):
    require("torch")
    if "transformers" in PAIRS[title]["torch"]:
        require("transformers")
    want = _run(PAIRS[title]["torch"], model_dir, title, "torch")["result"]
    got = _run(PAIRS[title]["ember"], model_dir, title, "ember")["result"]
    _assert_same(_arrays(got), _arrays(want), title)


def test_the_worked_example_excerpts_are_the_example_code():
    with open(EXAMPLE, encoding="utf-8") as f:
        source = f.read()
    excerpts = [code for _, tag, code in _blocks() if tag == "example"]
    assert len(excerpts) >= 5
    for code in excerpts:
        assert code in source, f"not in {EXAMPLE}:\n{code}"


def test_the_worked_example_ports_and_verifies(tmp_path):
    require("torch")
    out = subprocess.run([sys.executable, EXAMPLE, str(tmp_path)], capture_output=True,
                         text=True, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all 4 pairs within atol=0.0001 rtol=0.0001" in out.stdout
    assert os.path.isfile(tmp_path / "net.safetensors")
    for name in ("conv", "fc1", "fc2"):
        assert re.search(rf"^{name}\s+\S+\s+\S+\s+ok$", out.stdout, re.MULTILINE), out.stdout
