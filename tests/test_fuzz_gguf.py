"""Fuzzing the GGUF path end to end: reader, LlamaConfig from metadata, model load, the
tokenizer from tokenizer.ggml.*, one forward pass. Mutations: metadata values with their
types swapped or set to huge, negative, zero or NaN numbers, keys deleted, tensor dims and
types changed, and byte-level damage (flips, truncation, inserted and removed bytes).
The only acceptable outcomes are success and ember's own errors.

EMBER_FUZZ_CASES=5000 runs 5000 cases per test instead of the default."""
import numpy as np
import pytest

from fuzz_inputs import (case_count, case_seed, gguf_bytes, mutate_bytes, mutate_gguf_fields,
                         tiny_llama_gguf)
from fuzz_run import run_cases

from ember.errors import EmberError, FormatError

VALID = tiny_llama_gguf()
VALID_BYTES = gguf_bytes(*VALID)


def load_and_run(path):
    """What `ember generate --gguf` does with a file, minus the sampling loop."""
    from ember.io.gguf import GGUFFile
    from ember.models.gguf_llama import load_gguf_model, tokenizer_from_gguf
    with np.errstate(all="ignore"), GGUFFile(path) as f:
        model = load_gguf_model(f, device="cpu")
        tok = tokenizer_from_gguf(f)
        ids = tok.encode("abc a").ids[:4] or [0]
        logits = model([ids])
        assert tuple(logits.shape) == (1, len(ids), model.config.vocab_size)


def test_the_valid_file_loads_and_runs(tmp_path):
    path = tmp_path / "tiny.gguf"
    path.write_bytes(VALID_BYTES)
    load_and_run(path)


def _field_case(rng):
    kvs, tensors, how = mutate_gguf_fields(*VALID, rng)
    return gguf_bytes(kvs, tensors), how


def _byte_case(rng):
    return mutate_bytes(VALID_BYTES, rng)


@pytest.mark.parametrize("make,default", [(_field_case, 300), (_byte_case, 300)],
                         ids=["fields", "bytes"])
def test_mutated_gguf_gives_only_ember_errors(tmp_path, make, default):
    path = tmp_path / "case.gguf"

    def check(blob):
        path.write_bytes(blob)
        load_and_run(path)

    tally = run_cases(make, check, case_count(default), seed=case_seed(7))
    print(f"GGUF {make.__name__}: {tally.summary()}")
    tally.assert_clean("GGUF")
    assert tally.counts["ok"] > 0 and sum(tally.counts.values()) > tally.counts["ok"]


# --- the field checks, one by one (issue 10.7) ------------------------------------------------
def _with(key, vtype, value):
    kvs, tensors = VALID
    kvs = [(k, vtype, value) if k == key else (k, t, v) for k, t, v in kvs]
    return gguf_bytes(kvs, tensors)


@pytest.mark.parametrize("key,vtype,value,needle", [
    ("llama.attention.head_count", 4, 0, "an integer between 1"),          # ZeroDivisionError
    ("llama.embedding_length", 8, "32", "an integer"),                      # TypeError
    ("llama.block_count", 5, -1, "an integer between 1"),                   # built 0 layers
    ("llama.attention.layer_norm_rms_epsilon", 6, float("nan"), "finite"),  # NaN logits
    ("llama.rope.freq_base", 6, float("inf"), "finite"),
    ("llama.rope.freq_base", 6, 0.0, "> 0"),
    ("llama.attention.head_count_kv", 4, 3, "not a multiple"),
    ("llama.attention.head_count_kv", 9, (4, []), "non-empty list"),
    ("llama.rope.dimension_count", 4, 9, "at most the head size"),
    ("llama.context_length", 10, 2**40, "an integer between 1"),
    ("tokenizer.ggml.tokens", 9, (9, [(4, [1])] * 12), "array of strings"),  # unhashable
    ("tokenizer.ggml.eos_token_id", 8, "2", "an integer"),
    ("general.architecture", 9, (8, ["llama"]), "general.architecture"),
])
def test_bad_metadata_field_is_a_format_error_naming_it(tmp_path, key, vtype, value, needle):
    path = tmp_path / "bad.gguf"
    path.write_bytes(_with(key, vtype, value))
    with pytest.raises(FormatError) as info:
        load_and_run(path)
    message = str(info.value)
    assert str(path) in message and needle in message, message
    assert key.split(".")[-1] in message


def test_hidden_size_must_divide_by_heads_when_no_key_length_is_given(tmp_path):
    kvs, tensors = VALID
    kvs = [(k, t, 30 if k == "llama.embedding_length" else v) for k, t, v in kvs
           if k != "llama.attention.key_length"]
    path = tmp_path / "bad.gguf"
    path.write_bytes(gguf_bytes(kvs, tensors))
    with pytest.raises(FormatError, match="embedding_length 30 is not divisible"):
        load_and_run(path)


def test_tensor_name_with_one_dot_after_blk_is_a_format_error(tmp_path):
    """Found by the fuzzer: 'blk.0' (no third part) made GGUFSource fail to unpack."""
    kvs, tensors = VALID
    tensors = [("blk.0" if n == "blk.0.attn_k.weight" else n, ne, t, d) for n, ne, t, d in tensors]
    path = tmp_path / "bad.gguf"
    path.write_bytes(gguf_bytes(kvs, tensors))
    with pytest.raises(FormatError, match="'model.layers.0.self_attn.k_proj.weight' not found"):
        load_and_run(path)


# --- the file itself (issue 10.13) --------------------------------------------------------------
def test_missing_directory_and_fifo_paths_are_clean_errors(tmp_path):
    import os
    from ember.io.files import MissingFile
    from ember.io.gguf import GGUFFile
    with pytest.raises(MissingFile, match="does not exist"):
        GGUFFile(tmp_path / "absent.gguf")
    with pytest.raises(FileNotFoundError):             # still what callers may catch
        GGUFFile(tmp_path / "absent.gguf")
    with pytest.raises(FormatError, match="is a directory"):
        GGUFFile(tmp_path)
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "pipe.gguf"
        os.mkfifo(fifo)
        # Opening a FIFO for reading blocks until a writer comes; the reader must not.
        with pytest.raises(FormatError, match="FIFO"):
            GGUFFile(fifo)


def test_errors_are_ember_errors():
    from ember.io.files import MissingFile
    assert issubclass(MissingFile, EmberError) and issubclass(MissingFile, FormatError)
