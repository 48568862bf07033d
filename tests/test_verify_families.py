"""`ember verify` on Gemma 2/3 (Hugging Face directory and GGUF) and Whisper (Hugging Face
and CTranslate2 directories): tiny random models pass block by block, one layer's weight
perturbed on the ember side is named as the first to diverge (exit status 1), and a
directory of a family verify does not know is refused naming the ones it does."""
import json

import ember.verify
import pytest
from ember.cli import main
from helpers import require
from test_gemma_gguf import GEMMA2, GEMMA3, _write_gemma_gguf
from test_verify import _perturb_ember

torch = require("torch")
transformers = require("transformers")
transformers.logging.set_verbosity_error()

# every Gemma switch on within 12 tokens: a window of 6 beside a full layer, two rotary
# bases (linear scaling on the global one) for Gemma 3, small soft caps for Gemma 2
GEMMA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=96, max_position_embeddings=64,
             sliding_window=6, query_pre_attn_scalar=24,
             layer_types=["sliding_attention", "full_attention", "sliding_attention"])


def _gemma_config(kind):
    if kind == "gemma3":
        return transformers.Gemma3TextConfig(**GEMMA, rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})
    return transformers.Gemma2Config(**GEMMA, attn_logit_softcapping=2.0,
                                     final_logit_softcapping=3.0,
                                     rope_parameters={"rope_type": "default", "rope_theta": 500.0})


def _random_gemma(config):
    torch.manual_seed(4321)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():   # norm weights too: none is the identity
            p.copy_((0.3 if "norm" in name else 0.15) * torch.randn_like(p))
    return model


def _gemma_dir(tmp_path, kind):
    path = tmp_path / kind
    _random_gemma(_gemma_config(kind)).save_pretrained(str(path), safe_serialization=True)
    return str(path)


def _whisper_dir(tmp_path):
    torch.manual_seed(80)
    cfg = transformers.WhisperConfig(
        vocab_size=120, d_model=32, encoder_layers=2, encoder_attention_heads=4,
        decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_source_positions=15, max_target_positions=32, num_mel_bins=80,
        pad_token_id=0, bos_token_id=0, eos_token_id=0, decoder_start_token_id=1)
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    # empty lists, not none: CTranslate2's converter copies them into its config.json
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=1, suppress_tokens=[], begin_suppress_tokens=[])
    path = tmp_path / "whisper"
    model.save_pretrained(str(path))
    return str(path)


def _names(report):
    return [p.ember_name for p in report.pairs]


# --- Gemma ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gemma3", "gemma2"])
def test_gemma_directories_pass_block_by_block(tmp_path, kind):
    report, facts = ember.verify.verify_model(_gemma_dir(tmp_path, kind), tokens=12)
    assert report.ok, str(report)
    assert facts["family"] == "gemma" and facts["model_type"] == _gemma_config(kind).model_type
    names = _names(report)
    # Gemma's four norms per layer, each its own pair, in the order transformers runs them
    parts = ["input_layernorm", "self_attn", "post_attention_layernorm",
             "pre_feedforward_layernorm", "mlp", "post_feedforward_layernorm"]
    assert [n for n in names if n.startswith("layers.2.")] == [f"layers.2.{p}" for p in parts]
    assert names[-3:] == ["norm", "lm_head", ember.verify.OUTPUT]


def test_a_perturbed_gemma_layer_is_the_first_to_diverge(tmp_path, capsys, monkeypatch):
    path = _gemma_dir(tmp_path, "gemma3")
    _perturb_ember(monkeypatch, "_llama", "layers.1.mlp.down_proj")
    assert main(["verify", path, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["first_divergent"] == "layers.1.mlp"
    first = [p["ember_name"] for p in out["pairs"]].index("layers.1.mlp")
    assert all(p["ok"] for p in out["pairs"][:first])


def test_a_gemma3_image_text_directory_passes_on_its_text_model(tmp_path):
    """Gemma3ForConditionalGeneration (model_type gemma3): verify compares the language
    model, which transformers keeps under model.language_model, on text ids alone."""
    text = dict(GEMMA, num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"])
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14)
    # the image tokens below the random ids' range (they start at 5): no pixels needed
    cfg = transformers.Gemma3Config(text_config=text, vision_config=vision,
                                    mm_tokens_per_image=1, boi_token_index=2,
                                    image_token_index=3, eoi_token_index=4)
    torch.manual_seed(7)
    model = transformers.Gemma3ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_((0.3 if "norm" in name else 0.15) * torch.randn_like(p))
    model.save_pretrained(str(tmp_path / "gemma3"))
    report, facts = ember.verify.verify_model(str(tmp_path / "gemma3"), tokens=10)
    assert report.ok, str(report)
    assert facts["model_type"] == "gemma3" and facts["family"] == "gemma"
    assert {"layers.1.post_feedforward_layernorm", "norm"} <= set(_names(report))
    assert report.pairs[0].torch_name == "model.language_model.layers.0.input_layernorm"


@pytest.mark.parametrize("arch", ["gemma3", "gemma2"])
def test_gemma_gguf_files_pass_and_a_perturbed_one_diverges(tmp_path, monkeypatch, arch):
    """llama.cpp's Gemma GGUF layout (norms stored +1, Gemma 3's implicit layer pattern and
    local rope base), as test_gemma_gguf writes it; transformers' reading is the reference."""
    gguf = require("gguf")
    tiny = GEMMA3 if arch == "gemma3" else GEMMA2
    config = (transformers.Gemma3TextConfig if arch == "gemma3" else transformers.Gemma2Config)
    path = str(tmp_path / f"{arch}.gguf")
    _write_gemma_gguf(path, _random_gemma(config(**tiny)), arch, gguf)
    report, facts = ember.verify.verify_model(path, tokens=12)
    assert report.ok, str(report)
    assert facts["family"] == "gemma (gguf)"
    assert f"layers.{tiny['num_hidden_layers'] - 1}.post_feedforward_layernorm" in _names(report)

    _perturb_ember(monkeypatch, "_gguf", "layers.1.self_attn.o_proj")
    report, _ = ember.verify.verify_model(path, tokens=12)
    assert report.first_divergent.ember_name == "layers.1.self_attn"


# --- Whisper ----------------------------------------------------------------------------------
def test_whisper_passes_encoder_and_decoder_block_by_block(tmp_path, capsys):
    path = _whisper_dir(tmp_path)
    report, facts = ember.verify.verify_model(path, tokens=10)
    assert report.ok, str(report)
    assert facts["family"] == "whisper"
    assert facts["input_shape"] == [1, 10] and facts["features_shape"] == [1, 80, 30]
    names = _names(report)
    for name in ("encoder.conv1", "encoder.layers.1", "encoder.layer_norm", "decoder.embed_tokens",
                 "decoder.layers.0.encoder_attn.k_proj", "decoder.layers.1", "decoder.layer_norm"):
        assert name in names
    # reported in the order transformers ran them: the encoder first
    assert names.index("encoder.layer_norm") < names.index("decoder.embed_tokens")
    assert all(p.calls == 1 for p in report.pairs)
    assert main(["verify", path]) == 0
    assert "whisper on cpu" in capsys.readouterr().out


@pytest.mark.parametrize("module, diverges", [
    ("encoder.layers.0.fc1", "encoder.layers.0"),
    ("decoder.layers.1.fc2", "decoder.layers.1"),
])
def test_a_perturbed_whisper_layer_is_the_first_to_diverge(tmp_path, capsys, monkeypatch,
                                                            module, diverges):
    path = _whisper_dir(tmp_path)
    _perturb_ember(monkeypatch, "_whisper", module)
    assert main(["verify", path, "--tokens", "10"]) == 1
    assert f"first divergent: {diverges} (torch model.{diverges})" in capsys.readouterr().out
    report, _ = ember.verify.verify_model(path, tokens=10)
    assert report.first_divergent.ember_name == diverges
    assert all(p.ok for p in report.pairs[:report.pairs.index(report.first_divergent)])


def test_a_ctranslate2_whisper_directory_passes(tmp_path):
    ctranslate2 = require("ctranslate2")
    out = tmp_path / "ct2"
    ctranslate2.converters.TransformersConverter(_whisper_dir(tmp_path)).convert(str(out))
    report, facts = ember.verify.verify_model(str(out), tokens=10)
    assert report.ok, str(report)
    assert facts["family"] == "whisper (ctranslate2)"
    assert "decoder.layers.1.encoder_attn.v_proj" in _names(report)


def test_too_many_decoder_tokens_is_exit_status_2(tmp_path, capsys):
    assert main(["verify", _whisper_dir(tmp_path), "--tokens", "33"]) == 2
    assert "max_target_positions 32" in capsys.readouterr().err


# --- a family verify does not know ----------------------------------------------------------
def test_an_unknown_family_is_refused_naming_the_supported_ones(tmp_path, capsys):
    (tmp_path / "t5").mkdir()
    (tmp_path / "t5" / "config.json").write_text(json.dumps({"model_type": "t5"}))
    assert main(["verify", str(tmp_path / "t5")]) == 2
    err = capsys.readouterr().err
    assert "model_type 't5'" in err
    for family in ("bert", "llama", "gemma2", "gemma3_text", "whisper"):
        assert f"{family}" in err.split("supported:")[1]


def test_every_device_passes_gemma_and_whisper(tmp_path, device):
    for path in (_gemma_dir(tmp_path, "gemma3"), _whisper_dir(tmp_path)):
        report, facts = ember.verify.verify_model(path, device=device, tokens=10)  # 1e-4
        assert report.ok, str(report)
        assert facts["device"] == str(device)
