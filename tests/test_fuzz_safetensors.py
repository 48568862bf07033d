"""Fuzzing safetensors end to end: the header parser, every tensor read back, and a Llama
loaded from the file and run once. Mutations: header fields (types swapped, shapes and
offsets set to huge, negative or NaN numbers, deep nesting, keys deleted), bytes of the
header alone and of the whole file (flips, truncation, inserted and removed bytes). The only
acceptable outcomes are success and ember's own errors.

EMBER_FUZZ_CASES=5000 runs 5000 cases per test instead of the default."""
import json
import struct

import numpy as np
import pytest

from fuzz_inputs import (case_count, case_seed, mutate_bytes, mutate_json, safetensors_bytes,
                         split_safetensors)
from fuzz_models import write_llama_dir
from fuzz_run import run_cases

from ember.errors import FormatError
from ember.io import SafetensorsFile, load_safetensors_bytes
from ember.models.llama import LlamaForCausalLM


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_llama_dir(tmp_path_factory.mktemp("fuzz-st") / "tiny-llama")


def load_and_run(path, model_dir):
    with np.errstate(all="ignore"):
        with SafetensorsFile(path) as f:
            for name in f.keys():
                f.get(name, device="cpu").numpy()
        model = LlamaForCausalLM.from_pretrained(model_dir, device="cpu")
        logits = model([[1, 2, 3]])
        assert tuple(logits.shape) == (1, 3, model.config.vocab_size)


def test_the_valid_model_loads_and_runs(model_dir):
    load_and_run(f"{model_dir}/model.safetensors", model_dir)


@pytest.mark.parametrize("kind", ["header_fields", "header_bytes", "file_bytes"])
def test_mutated_safetensors_gives_only_ember_errors(model_dir, kind):
    path = f"{model_dir}/model.safetensors"
    valid = open(path, "rb").read()
    header, data = split_safetensors(valid)
    head_end = len(valid) - len(data)

    def make(rng):
        if kind == "header_fields" and rng.randrange(2):
            return _plausible_header_change(header, data, rng)
        if kind == "header_fields":
            text, how = mutate_json(header, rng)
            raw = text + b" " * (-(8 + len(text)) % 8)
            return struct.pack("<Q", len(raw)) + raw + data, how
        if kind == "header_bytes":
            return mutate_bytes(valid, rng, 0, head_end)
        return mutate_bytes(valid, rng)

    def check(blob):
        with open(path, "wb") as f:
            f.write(blob)
        load_and_run(path, model_dir)

    try:
        tally = run_cases(make, check, case_count(200), seed=case_seed(3))
    finally:
        with open(path, "wb") as f:
            f.write(valid)
    print(f"safetensors {kind}: {tally.summary()}")
    tally.assert_clean("safetensors")
    assert sum(tally.counts.values()) > tally.counts["ok"]


_SAME_SIZE = [["F32", "I32", "U32"], ["F16", "BF16", "I16", "U16"], ["U8", "I8", "BOOL"],
              ["F64", "I64", "U64"]]


def _plausible_header_change(header, data, rng):
    """A header that still tiles the data: one tensor's dtype swapped for another of the
    same size, or its shape rearranged with the same element count."""
    header = json.loads(json.dumps(header))
    name = rng.choice(sorted(k for k in header if k != "__metadata__"))
    entry = header[name]
    if rng.randrange(2):
        group = next(g for g in _SAME_SIZE if entry["dtype"] in g)
        entry["dtype"] = rng.choice(group)
        how = f"{name} dtype -> {entry['dtype']}"
    else:
        n = 1
        for d in entry["shape"]:
            n *= d
        entry["shape"] = rng.choice([[n], [1, n], [n, 1], list(reversed(entry["shape"])),
                                     [2, n // 2] if n % 2 == 0 else [n]])
        how = f"{name} shape -> {entry['shape']}"
    return safetensors_bytes(header, data), how


# --- shapes, dtypes and nesting, one by one (issues 10.13, 10.14) -------------------------------
def _one(entry, data=b""):
    return safetensors_bytes({"t": entry}, data)


@pytest.mark.parametrize("entry,needle", [
    ({"dtype": "F32", "shape": [2**62, 0], "data_offsets": [0, 0]}, "too large to address"),
    ({"dtype": "U8", "shape": [2**31, 2**31, 2**31, 0], "data_offsets": [0, 0]}, "too large"),
    ({"dtype": "F32", "shape": [1] * 5001, "data_offsets": [0, 4]}, "5001 dimensions"),
    ({"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}, "65 dimensions"),
    ({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}, "needs 12 bytes"),
    ({"dtype": "I32", "shape": [2], "data_offsets": [0, 4]}, "needs 8 bytes"),
])
def test_bad_shapes_are_format_errors(entry, needle):
    nbytes = entry["data_offsets"][1]
    with pytest.raises(FormatError, match=needle):
        load_safetensors_bytes(_one(entry, bytes(nbytes)), device="cpu")


def test_zero_sized_tensors_within_limits_still_load():
    t = load_safetensors_bytes(_one({"dtype": "F32", "shape": [2**20, 0], "data_offsets": [0, 0]}),
                               device="cpu")["t"]
    assert tuple(t.shape) == (2**20, 0) and t.numel() == 0
    t = load_safetensors_bytes(_one({"dtype": "U8", "shape": [1] * 64, "data_offsets": [0, 1]},
                                    b"\x07"), device="cpu")["t"]
    assert t.ndim == 64 and int(t.numpy().reshape(-1)[0]) == 7


def test_deeply_nested_header_is_a_format_error(tmp_path):
    deep = b"[" * 100000 + b"]" * 100000
    text = b'{"t": {"dtype": "F32", "shape": ' + deep + b', "data_offsets": [0, 0]}}'
    blob = struct.pack("<Q", len(text)) + text
    with pytest.raises(FormatError, match="header"):
        load_safetensors_bytes(blob, device="cpu")
    path = tmp_path / "deep.safetensors"
    path.write_bytes(blob)
    with pytest.raises(FormatError, match="header"):
        SafetensorsFile(path)


def test_integer_tensor_is_not_taken_as_a_float_weight(tmp_path):
    """A float weight declared I32 (same byte count) used to load, cast to float."""
    path = write_llama_dir(tmp_path / "m")
    header, data = split_safetensors(open(f"{path}/model.safetensors", "rb").read())
    header["model.norm.weight"]["dtype"] = "I32"
    with open(f"{path}/model.safetensors", "wb") as f:
        f.write(safetensors_bytes(header, data))
    with pytest.raises(FormatError, match="'model.norm.weight' is i32, but the model reads it "
                                          "as a f32 weight"):
        LlamaForCausalLM.from_pretrained(path, device="cpu")


def test_missing_directory_and_fifo_paths_are_clean_errors(tmp_path):
    import os
    from ember.io.files import MissingFile
    with pytest.raises(MissingFile, match="does not exist"):
        SafetensorsFile(tmp_path / "absent.safetensors")
    with pytest.raises(FormatError, match="is a directory"):
        SafetensorsFile(tmp_path)
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.safetensors")
        with pytest.raises(FormatError, match="FIFO"):
            SafetensorsFile(tmp_path / "pipe.safetensors")


# --- paths named by a sharded index (issue 10.11) -----------------------------------------------
def _sharded(tmp_path, target):
    path = write_llama_dir(tmp_path / "m")
    import os
    os.rename(f"{path}/model.safetensors", f"{path}/shard-1.safetensors")
    from ember.io import load_safetensors_metadata
    _, infos = load_safetensors_metadata(f"{path}/shard-1.safetensors")
    weight_map = {name: "shard-1.safetensors" for name in infos}
    weight_map["lm_head.weight"] = target
    with open(f"{path}/model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return path


def test_sharded_index_with_local_shards_loads(tmp_path):
    path = _sharded(tmp_path, "shard-1.safetensors")
    assert LlamaForCausalLM.from_pretrained(path, device="cpu")([[1]]).shape[-1] == 16


@pytest.mark.parametrize("target", ["../outside.safetensors", "../../x.safetensors",
                                    "sub/../../outside.safetensors", "/etc/passwd",
                                    "link.safetensors", "a\0b.safetensors", ""])
def test_sharded_index_paths_stay_inside_the_model_directory(tmp_path, target):
    import os
    (tmp_path / "outside.safetensors").write_bytes(b"\0" * 8)
    path = _sharded(tmp_path, target)
    os.symlink(tmp_path / "outside.safetensors", f"{path}/link.safetensors")
    with pytest.raises(FormatError, match="weight_map") as info:
        LlamaForCausalLM.from_pretrained(path, device="cpu")
    assert "model.safetensors.index.json" in str(info.value)
