"""Fuzzing config.json: a tiny Llama and a tiny BERT sentence embedder, each loaded from
its directory after its config.json was mutated (types swapped, values set to zero,
negative, huge, NaN or infinite numbers, keys deleted, deep nesting, byte damage) and
run once. The only acceptable outcomes are success and ember's own errors.

EMBER_FUZZ_CASES=5000 runs 5000 cases per test instead of the default."""
import json

import numpy as np
import pytest

from fuzz_inputs import case_count, case_seed, mutate_json
from fuzz_models import BERT_CONFIG, LLAMA_CONFIG, write_bert_dir, write_llama_dir
from fuzz_run import run_cases

from ember.errors import FormatError
from ember.io.files import MissingFile
from ember.models.bert import BertConfig
from ember.models.llama import LlamaForCausalLM
from ember.models.llama_config import LlamaConfig
from ember.pipelines import SentenceEmbedder


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz-config")
    return write_llama_dir(root / "llama"), write_bert_dir(root / "bert")


def run_llama(path):
    with np.errstate(all="ignore"):
        model = LlamaForCausalLM.from_pretrained(path, device="cpu")
        assert model([[1, 2]]).shape[-1] == model.config.vocab_size


def run_bert(path):
    with np.errstate(all="ignore"):
        emb = SentenceEmbedder.from_pretrained(path, device="cpu")
        assert tuple(emb.encode(["the cat is on the mat"]).shape) == (1, emb.dim)


def test_the_valid_models_load_and_run(dirs):
    run_llama(dirs[0])
    run_bert(dirs[1])


@pytest.mark.parametrize("which", ["llama", "bert"])
def test_mutated_config_gives_only_ember_errors(dirs, which):
    path, config, run = ((dirs[0], LLAMA_CONFIG, run_llama) if which == "llama"
                         else (dirs[1], BERT_CONFIG, run_bert))

    def check(text):
        with open(f"{path}/config.json", "wb") as f:
            f.write(text)
        run(path)

    try:
        tally = run_cases(lambda rng: mutate_json(config, rng), check, case_count(250),
                          seed=case_seed(5))
    finally:
        with open(f"{path}/config.json", "w") as f:
            json.dump(config, f)
    print(f"config.json {which}: {tally.summary()}")
    tally.assert_clean(f"{which} config.json")
    assert tally.counts["ok"] > 0 and sum(tally.counts.values()) > tally.counts["ok"]


# --- each field the Llama reads (issue 10.7) ----------------------------------------------------
@pytest.mark.parametrize("field,value,needle", [
    ("num_attention_heads", 0, "'num_attention_heads' must be an integer between 1"),
    ("hidden_size", "16", "'hidden_size' must be an integer"),
    ("hidden_size", 18, "not divisible by num_attention_heads"),
    ("num_hidden_layers", -1, "'num_hidden_layers' must be an integer between 1"),
    ("num_key_value_heads", 3, "not a multiple of num_key_value_heads 3"),
    ("rms_norm_eps", float("nan"), "'rms_norm_eps' must be a finite number"),
    ("rms_norm_eps", 0, "'rms_norm_eps' must be a number > 0"),
    ("rms_norm_eps", "1e-5", "'rms_norm_eps' must be a number"),
    ("rope_theta", float("inf"), "'rope_theta' must be a finite number"),
    ("rope_theta", -1.0, "'rope_theta' must be a number > 0"),
    ("max_position_embeddings", 2**40, "'max_position_embeddings' must be an integer between"),
    ("vocab_size", 16.0, "'vocab_size' must be an integer"),
    ("tie_word_embeddings", "yes", "'tie_word_embeddings' must be true or false"),
    ("rope_scaling", [1, 2], "'rope_scaling' must be a JSON object"),
    ("rope_scaling", {"rope_type": "linear"}, "'rope_scaling.factor' must be a number"),
    ("rope_scaling", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 1.0, "original_max_position_embeddings": 16},
     "different from low_freq_factor"),
    ("rope_scaling", {"rope_type": "dynamic", "factor": float("nan")}, "rope_scaling.factor"),
    ("partial_rotary_factor", 0.1, "rotary features"),
    ("partial_rotary_factor", 1.5, "'partial_rotary_factor' must be a number"),
    ("eos_token_id", [2, "x"], "'eos_token_id[1]' must be an integer"),
    ("bos_token_id", -3, "'bos_token_id' must be an integer"),
    ("sliding_window", 0, "'sliding_window' must be an integer between 1"),
    ("layer_types", ["full_attention", "full_attention"], "'layer_types' must be a list of 1"),
    ("layer_types", ["chunked"], "'layer_types[0]' must be one of"),
    ("hidden_act", 3, "'hidden_act' must be a string"),
    ("model_type", ["llama"], "model_type"),
])
def test_bad_llama_field_is_a_format_error_naming_file_and_field(tmp_path, field, value, needle):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(LLAMA_CONFIG, **{field: value})))
    with pytest.raises(FormatError) as info:
        LlamaConfig.from_file(str(path))
    assert needle in str(info.value) and str(path) in str(info.value), str(info.value)


def test_nan_eps_no_longer_reaches_the_logits(dirs, tmp_path):
    """Before: rms_norm_eps NaN loaded and every logit was NaN (greedy picked token 0)."""
    path = write_llama_dir(tmp_path / "m", dict(LLAMA_CONFIG, rms_norm_eps=float("nan")))
    with pytest.raises(FormatError, match="rms_norm_eps"):
        LlamaForCausalLM.from_pretrained(path, device="cpu")
    good = LlamaForCausalLM.from_pretrained(dirs[0], device="cpu")([[1, 2]]).numpy()
    assert np.isfinite(good).all()


def test_gemma_string_hidden_size_is_a_format_error():
    with pytest.raises(FormatError, match="'hidden_size' must be an integer"):
        LlamaConfig.from_dict({"model_type": "gemma", "hidden_size": "2048"}, path="g.json")


# --- BERT (the embedder's config) ---------------------------------------------------------------
@pytest.mark.parametrize("field,value,needle", [
    ("layer_norm_eps", "1e-12", "'layer_norm_eps' must be a number"),
    ("layer_norm_eps", float("nan"), "'layer_norm_eps' must be a finite number"),
    ("layer_norm_eps", -1e-12, "'layer_norm_eps' must be a number > 0"),
    ("num_attention_heads", 0, "'num_attention_heads'"),
    ("hidden_size", 7, "not divisible"),
    ("type_vocab_size", 0, "'type_vocab_size'"),
    ("pad_token_id", "0", "'pad_token_id' must be an integer"),
    ("hidden_act", None, "'hidden_act' must be a string"),
    ("max_position_embeddings", True, "'max_position_embeddings'"),
])
def test_bad_bert_field_is_a_format_error(tmp_path, field, value, needle):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(BERT_CONFIG, **{field: value})))
    with pytest.raises(FormatError) as info:
        BertConfig.from_json(str(path))
    assert needle in str(info.value), str(info.value)


def test_deeply_nested_and_non_regular_config_files_are_format_errors(tmp_path):
    import os
    deep = tmp_path / "deep.json"
    deep.write_text('{"hidden_size": ' + "[" * 100000 + "]" * 100000 + "}")
    for read in (LlamaConfig.from_file, BertConfig.from_json):
        with pytest.raises(FormatError, match="too deeply"):
            read(str(deep))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError, match="is a directory"):
        BertConfig.from_json(str(tmp_path / "empty"))
    with pytest.raises(MissingFile, match="config.json' does not exist"):
        LlamaConfig.from_file(str(tmp_path / "empty"))     # a directory: its config.json
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.json")
        with pytest.raises(FormatError, match="FIFO"):
            LlamaConfig.from_file(str(tmp_path / "fifo.json"))


def test_modules_json_path_stays_inside_the_model_directory(tmp_path):
    path = write_bert_dir(tmp_path / "m")
    outside = tmp_path / "evil"
    outside.mkdir()
    (outside / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with open(f"{path}/modules.json", "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "../evil",
                    "type": "sentence_transformers.models.Pooling"}], f)
    with pytest.raises(FormatError, match="outside the model directory"):
        SentenceEmbedder.from_pretrained(path, device="cpu")
