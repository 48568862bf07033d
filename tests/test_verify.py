"""ember.verify and `ember verify`: an unperturbed model passes block by block for every
family (BERT, Llama-family safetensors directories, GGUF), a model with one layer's
weight perturbed names that layer as the first to diverge (exit status 1), bad input is
exit status 2, a missing reference library names `pip install torch transformers`."""
import json
import subprocess
import sys

import ember
import ember.verify
import numpy as np
import pytest
from ember.cli import main
from ember.nn import Linear, Module
from ember.verify import families
from helpers import require
from minilm_fixtures import minilm_dir  # noqa: F401 (fixture)

torch = require("torch")
transformers = require("transformers")
transformers.logging.set_verbosity_error()

LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 96,
         "max_position_embeddings": 64}


def _bert_dir(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=37,
                                  max_position_embeddings=64)
    model = transformers.BertModel(cfg).eval()
    path = tmp_path / "bert"
    model.save_pretrained(str(path), safe_serialization=True)
    return str(path)


def _llama_dir(tmp_path, config):
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.15)
    path = tmp_path / config.model_type
    model.save_pretrained(str(path), safe_serialization=True)
    return str(path)


def _perturb_ember(monkeypatch, family, module_name):
    """Make `ember verify` load ember's model of `family` with noise about as large as the
    weight itself added to one Linear's weight (the reference keeps the checkpoint's)."""
    real = getattr(families, family)

    def loader(path, device):
        ember_model, *rest = real(path, device)
        layer = dict(ember_model.named_modules())[module_name]
        w = layer.weight.numpy()
        noise = np.random.default_rng(5).standard_normal(w.shape).astype(np.float32)
        layer.weight = ember.tensor(w + noise * np.abs(w).mean(), device=layer.weight.device)
        return (ember_model, *rest)

    monkeypatch.setattr(families, family, loader)


# --- the hook facility ----------------------------------------------------------------------
def test_forward_hooks_see_and_may_replace_outputs_and_come_off():
    lin = Linear(3, 2)
    x = ember.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    plain = lin(x).numpy()
    seen = []
    handle = lin.register_forward_hook(lambda m, args, out: seen.append((m, args[0], out.numpy())))
    np.testing.assert_array_equal(lin(x).numpy(), plain)
    assert seen[0][0] is lin and seen[0][1] is x
    np.testing.assert_array_equal(seen[0][2], plain)
    with lin.register_forward_hook(lambda m, args, out: out * 2.0):
        np.testing.assert_array_equal(lin(x).numpy(), plain * 2)
    np.testing.assert_array_equal(lin(x).numpy(), plain)   # the context manager removed it
    handle.remove()
    handle.remove()   # twice is harmless
    lin(x)
    assert len(seen) == 3
    assert "_forward_hooks" not in lin.state_dict()


# --- compare: any ember module against any torch module ---------------------------------
class _EmberMLP(Module):
    def __init__(self):
        super().__init__()
        self.fc1 = Linear(4, 8)
        self.fc2 = Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _pair_of_mlps(perturb=False):
    torch.manual_seed(3)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    mine = _EmberMLP()
    for ours, theirs in ((mine.fc1, ref[0]), (mine.fc2, ref[2])):
        ours.weight = ember.tensor(theirs.weight.detach().numpy())
        ours.bias = ember.tensor(theirs.bias.detach().numpy())
    if perturb:
        mine.fc2.weight = mine.fc2.weight + 0.5
    return mine, ref


def test_compare_passes_equal_modules_and_names_the_first_divergent_pair():
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    report = ember.verify.compare(*_pair_of_mlps(), (x,), pairs={"fc1": "0", "fc2": "2"})
    assert report.ok and report.first_divergent is None
    assert [p.ember_name for p in report.pairs] == ["fc1", "fc2", ember.verify.OUTPUT]
    assert all(p.max_abs < 1e-5 and p.calls == 1 for p in report.pairs)
    assert report.pairs[0].shape == (5, 8)

    report = ember.verify.compare(*_pair_of_mlps(perturb=True), (x,),
                                  pairs=lambda n: {"fc1": "0", "fc2": "2"}.get(n))
    assert not report.ok
    assert report.first_divergent.ember_name == "fc2"
    assert report.pairs[0].ok and report.pairs[1].max_abs > 0.1
    assert "first divergent: fc2" in str(report)
    assert report.to_dict()["first_divergent"] == "fc2"


def test_compare_refuses_names_that_are_not_in_the_trees():
    mine, ref = _pair_of_mlps()
    with pytest.raises(ember.InvalidArgument, match="no sub-module 'fc9'"):
        ember.verify.compare(mine, ref, (np.zeros((1, 4), np.float32),), pairs={"fc9": "0"})
    with pytest.raises(ember.InvalidArgument, match="torch module has no sub-module '7'"):
        ember.verify.compare(mine, ref, (np.zeros((1, 4), np.float32),), pairs={"fc1": "7"})


# --- ember verify on the families ember ships ---------------------------------------------
def test_bert_passes_and_a_perturbed_layer_is_named(tmp_path, capsys, monkeypatch):
    good = _bert_dir(tmp_path / "good")
    report, facts = ember.verify.verify_model(good)
    assert report.ok, str(report)
    assert facts["family"] == "bert" and facts["input_shape"] == [2, 16]
    names = [p.ember_name for p in report.pairs]
    assert names.index("encoder.layer.0.attention.self") < names.index("encoder.layer.0")
    assert main(["verify", good]) == 0

    _perturb_ember(monkeypatch, "_bert", "encoder.layer.1.intermediate.dense")
    capsys.readouterr()
    assert main(["verify", good, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["first_divergent"] == "encoder.layer.1.intermediate"
    assert all(p["ok"] for p in out["pairs"][:out["pairs"].index(
        next(p for p in out["pairs"] if not p["ok"]))])


def _llama_configs():
    return {
        "llama": transformers.LlamaConfig(**LLAMA),
        "mistral": transformers.MistralConfig(**LLAMA, head_dim=16, sliding_window=6),
        "qwen2": transformers.Qwen2Config(**LLAMA),
        "gemma": transformers.GemmaConfig(**LLAMA, head_dim=16),
        "phi3": transformers.Phi3Config(**LLAMA, pad_token_id=0),
    }


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gemma", "phi3"])
def test_llama_families_pass_block_by_block(tmp_path, family):
    path = _llama_dir(tmp_path, _llama_configs()[family])
    report, facts = ember.verify.verify_model(path, tokens=12)
    assert report.ok, str(report)
    assert facts["family"] == "llama"
    assert "layers.1.mlp" in [p.ember_name for p in report.pairs]


def test_a_perturbed_llama_layer_is_the_first_to_diverge(tmp_path, capsys, monkeypatch):
    path = _llama_dir(tmp_path, _llama_configs()["llama"])
    _perturb_ember(monkeypatch, "_llama", "layers.1.self_attn.o_proj")
    assert main(["verify", path]) == 1
    out = capsys.readouterr().out
    assert "first divergent: layers.1.self_attn (torch model.layers.1.self_attn)" in out
    report, _ = ember.verify.verify_model(path)
    assert report.first_divergent.ember_name == "layers.1.self_attn"
    assert all(p.ok for p in report.pairs[:report.pairs.index(report.first_divergent)])


def test_gguf_files_pass_and_a_perturbed_one_diverges(tmp_path, capsys, monkeypatch):
    path = _llama_dir(tmp_path, _llama_configs()["llama"])
    gguf_path = str(tmp_path / "m.gguf")
    assert main(["convert", path, gguf_path, "--quiet"]) == 0
    capsys.readouterr()
    assert main(["verify", gguf_path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["family"] == "llama (gguf)" and len(out["pairs"]) == 14

    q8 = str(tmp_path / "q8.gguf")
    assert main(["quantize", gguf_path, q8, "--type", "Q8_0"]) == 0
    report, _ = ember.verify.verify_model(q8)   # both sides read the same Q8_0 blocks
    assert report.ok, str(report)

    _perturb_ember(monkeypatch, "_gguf", "layers.0.mlp.down_proj")
    report, _ = ember.verify.verify_model(gguf_path)
    assert report.first_divergent.ember_name == "layers.0.mlp"
    assert main(["verify", gguf_path]) == 1


def test_the_real_minilm_passes(minilm_dir):  # noqa: F811 (the fixture)
    report, _ = ember.verify.verify_model(
        minilm_dir, text="The quick brown fox jumps over the lazy dog.")
    assert report.ok, str(report)
    assert len(report.pairs) == 1 + 6 * 5 + 1
    assert max(p.max_abs for p in report.pairs) < 1e-4


def test_every_device_passes_bert_and_a_llama(tmp_path, device):
    for path in (_bert_dir(tmp_path), _llama_dir(tmp_path, _llama_configs()["mistral"])):
        report, facts = ember.verify.verify_model(path, device=device)   # default 1e-4
        assert report.ok, str(report)
        assert facts["device"] == str(device)


# --- bad input ------------------------------------------------------------------------------
def test_bad_input_is_exit_status_2(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["verify", str(tmp_path / "empty")]) == 2
    assert "config.json" in capsys.readouterr().err
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a model")
    assert main(["verify", str(junk)]) == 2
    assert "neither a GGUF file" in capsys.readouterr().err
    bert = _bert_dir(tmp_path)
    assert main(["verify", bert, "--atol", "-1"]) == 2
    assert main(["verify", bert, "--tokens", "0"]) == 2
    assert "tokens must be a positive integer" in capsys.readouterr().err


def test_a_missing_reference_library_names_the_install_command(tmp_path, monkeypatch, capsys):
    bert = _bert_dir(tmp_path)
    monkeypatch.setitem(sys.modules, "transformers", None)   # import transformers fails
    with pytest.raises(ember.verify.MissingReference, match="pip install torch transformers"):
        ember.verify.verify_model(bert)
    assert main(["verify", bert]) == 2
    assert "pip install torch transformers" in capsys.readouterr().err


def test_ember_imports_torch_only_when_verify_runs():
    code = ("import sys, ember, ember.verify, ember.nn, ember.models.llama, ember.models.bert\n"
            "from ember.cli import build_parser; build_parser()\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
