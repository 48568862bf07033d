"""The fuzzed inputs through the command line: `ember generate --gguf FILE` and
`ember embed --model DIR` on a handful of mutated files, a missing path, a directory and a
FIFO. Each must end with exit status 0 or 1 and, on failure, one `ember <verb>: ...` line:
never a traceback, never a hang."""
import json
import os
import random
import subprocess
import sys

from fuzz_inputs import gguf_bytes, mutate_gguf_fields, mutate_json, tiny_llama_gguf
from fuzz_models import BERT_CONFIG, write_bert_dir

VALID = tiny_llama_gguf()


def ember(*argv):
    # The timeout only keeps a hung child from stalling the suite; no test asserts a time.
    done = subprocess.run([sys.executable, "-m", "ember.cli", *argv], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), (done.returncode, done.stderr)
    if done.returncode:
        assert done.stderr.startswith(f"ember {argv[0]}: "), done.stderr
    return done


def test_generate_on_mutated_and_odd_gguf_paths(tmp_path):
    paths = [str(tmp_path / "absent.gguf"), str(tmp_path)]
    good = tmp_path / "good.gguf"
    good.write_bytes(gguf_bytes(*VALID))
    paths.append(str(good))
    for seed in range(2):
        kvs, tensors, _ = mutate_gguf_fields(*VALID, random.Random(seed))
        p = tmp_path / f"m{seed}.gguf"
        p.write_bytes(gguf_bytes(kvs, tensors))
        paths.append(str(p))
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.gguf")
        paths.append(str(tmp_path / "pipe.gguf"))
    codes = [ember("generate", "--gguf", p, "--max-new-tokens", "2", "abc").returncode
             for p in paths]
    assert codes[:3] == [1, 1, 0] and codes[-1] == 1, codes


def test_embed_on_mutated_configs_and_a_traversing_index(tmp_path):
    codes = []
    for seed in (0, 2):
        path = write_bert_dir(tmp_path / f"m{seed}")
        text, _ = mutate_json(BERT_CONFIG, random.Random(seed))
        with open(f"{path}/config.json", "wb") as f:
            f.write(text)
        codes.append(ember("embed", "--device", "cpu", "--model", path, "a cat").returncode)
    path = write_bert_dir(tmp_path / "sharded")
    with open(f"{path}/model.safetensors.index.json", "w") as f:
        json.dump({"weight_map": {"embeddings.word_embeddings.weight": "../../x.safetensors"}}, f)
    done = ember("embed", "--device", "cpu", "--model", path, "a cat")
    assert done.returncode == 1 and "outside the model directory" in done.stderr
    assert ember("embed", "--device", "cpu", "--model", "x/y/z/all-MiniLM-L6-v2",
                 "a").returncode == 1
    assert 1 in codes, codes
