"""`ember convert`: .pth (zip and legacy) -> safetensors -> GGUF -> safetensors with equal
values (bf16 bit-exact), llama.cpp names that the `gguf` package reads back, a crafted
pickle refused before it runs anything, and bad outputs refused with nothing left behind."""
import collections
import json
import os

import numpy as np
import pytest
from ember.cli import main
from ember.io.safetensors import SafetensorsFile
from helpers import require

torch = require("torch")      # checkpoints are made with torch.save
gguf = require("gguf")        # its reader reads ember's GGUF back


def _bits(t):
    t = t.detach()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def _llama_dir(tmp_path):
    transformers = require("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32,
                                   tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    d = tmp_path / "hf"
    d.mkdir()
    cfg.save_pretrained(d)
    return d, {k: v for k, v in model.state_dict().items()}


def _safetensors_bits(path):
    with SafetensorsFile(path) as f:
        return {k: np.asarray(f.get(k, device="cpu").numpy()) if f.info(k).file_dtype != "BF16"
                else _raw(f, k) for k in f}


def _raw(f, k):
    info = f.info(k)
    begin, end = info.file_offsets
    with open(f.path, "rb") as fh:
        fh.seek(begin)
        return np.frombuffer(fh.read(end - begin), np.uint16).reshape(info.shape)


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_pth_to_safetensors_to_gguf_and_back_is_bit_exact(tmp_path, legacy, capsys):
    d, sd = _llama_dir(tmp_path)
    torch.save(sd, d / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy)
    st = d / "model.safetensors"
    assert main(["convert", str(d / "pytorch_model.bin"), str(st)]) == 0
    first = _safetensors_bits(st)
    assert set(first) == set(sd)
    for k, t in sd.items():
        assert np.array_equal(first[k], _bits(t)), k

    g = tmp_path / "model.gguf"
    assert main(["convert", str(d), str(g)]) == 0
    reader = gguf.GGUFReader(str(g))
    by_name = {t.name: t for t in reader.tensors}
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.attention.head_count_kv"].contents() == 2
    assert by_name["blk.1.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.BF16
    # norms are F32, as llama.cpp stores them (bf16 -> f32 is exact)
    assert by_name["blk.1.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    q = sd["model.layers.0.self_attn.q_proj.weight"]
    permuted = _bits(q).reshape(4, 2, 8, 64).swapaxes(1, 2).reshape(64, 64)
    assert np.array_equal(np.asarray(by_name["blk.0.attn_q.weight"].data).view(np.uint16)
                          .reshape(64, 64), permuted)
    assert np.array_equal(np.asarray(by_name["output.weight"].data).view(np.uint16)
                          .reshape(96, 64), _bits(sd["lm_head.weight"]))

    back = tmp_path / "back.safetensors"
    # --dtype bf16: the GGUF's F32 norms go back to the checkpoint's bf16, bit for bit
    assert main(["convert", str(g), str(back), "--dtype", "bf16"]) == 0
    again = _safetensors_bits(back)
    assert set(again) == set(sd)
    for k, t in sd.items():
        assert np.array_equal(again[k], _bits(t)), k
    capsys.readouterr()


def test_dtype_and_sharding(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"t{i}": rng.standard_normal((16, 32)).astype(np.float32) for i in range(5)}
    np.savez(tmp_path / "w.npz", **arrays)
    out = tmp_path / "out" / "model.safetensors"
    out.parent.mkdir()
    assert main(["convert", str(tmp_path / "w.npz"), str(out), "--dtype", "f16",
                 "--max-shard-size", "4KB", "--quiet"]) == 0
    names = sorted(os.listdir(out.parent))
    # 1 KiB tensors, 4000-byte shards: three tensors, then two
    assert names == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                     "model.safetensors.index.json"]
    from ember.io.weights import open_weights
    with open_weights(out.parent) as w:
        got = {e.name: e.read() for e in w.entries}
        assert {e.dtype for e in w.entries} == {"F16"}
    for k, a in arrays.items():
        assert np.array_equal(got[k], a.astype(np.float16)), k


class _RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_a_command_is_refused_and_never_runs(tmp_path, capsys):
    marker = tmp_path / "pwned"
    for legacy in (False, True):
        path = tmp_path / f"evil{legacy}.pth"
        torch.save(collections.OrderedDict(w=torch.zeros(2), x=_RunsACommand(marker)), path,
                   _use_new_zipfile_serialization=not legacy)
        out = tmp_path / "out.safetensors"
        assert main(["convert", str(path), str(out)]) == 1
        err = capsys.readouterr().err
        assert "refuses to import or call" in err and "system" in err
        assert not marker.exists()
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_bad_outputs_and_inputs_leave_nothing_behind(tmp_path, capsys):
    np.savez(tmp_path / "w.npz", a=np.ones((2, 32), np.float32))
    src = str(tmp_path / "w.npz")
    existing = tmp_path / "exists.safetensors"
    existing.write_bytes(b"someone's file")
    assert main(["convert", src, str(existing)]) == 1
    assert "already exists; pass --force" in capsys.readouterr().err
    assert existing.read_bytes() == b"someone's file"
    assert main(["convert", src, str(existing), "--force", "--quiet"]) == 0
    assert existing.read_bytes() != b"someone's file"

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        # root may write a 0500 directory; sysfs refuses new files to everyone
        unwritable = locked if not os.access(locked, os.W_OK) else "/sys"
        assert main(["convert", src, os.path.join(unwritable, "o.gguf")]) == 1
        assert "cannot be written" in capsys.readouterr().err
    finally:
        locked.chmod(0o700)

    truncated = tmp_path / "cut.gguf"
    assert main(["convert", src, str(truncated), "--quiet"]) == 0
    data = truncated.read_bytes()
    truncated.write_bytes(data[:len(data) - 40])
    assert main(["convert", str(truncated), str(tmp_path / "t.safetensors")]) == 1
    assert "lies outside the file" in capsys.readouterr().err
    pth = tmp_path / "cut.pth"
    torch.save({"w": torch.ones(64)}, pth, _use_new_zipfile_serialization=False)
    pth.write_bytes(pth.read_bytes()[:-100])
    assert main(["convert", str(pth), str(tmp_path / "t.safetensors")]) == 1
    assert "truncated" in capsys.readouterr().err
    (tmp_path / "junk.bin").write_bytes(b"\x01\x02\x03 not weights")
    assert main(["convert", str(tmp_path / "junk.bin"), str(tmp_path / "j.gguf")]) == 1
    assert "unknown weights format" in capsys.readouterr().err
    np.savez(tmp_path / "mask.npz", m=np.ones((4,), np.bool_))
    assert main(["convert", str(tmp_path / "mask.npz"), str(tmp_path / "mask.gguf")]) == 1
    assert "'m': GGUF has no BOOL type" in capsys.readouterr().err
    assert main(["quantize", src, str(tmp_path / "q.gguf"), "--type", "Q4_K"]) == 0
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    assert leftovers == []
    for name in ("t.safetensors", "j.gguf", "mask.gguf"):
        assert not (tmp_path / name).exists()


def test_a_hugging_face_llama_converted_to_gguf_runs_in_ember_like_transformers(tmp_path):
    transformers = require("transformers")
    from ember.models.gguf_llama import load_gguf_model
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32,
                                   tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(cfg).eval()
    d = tmp_path / "hf"
    model.save_pretrained(d)
    vocab = {f"t{i}": i for i in range(90)}
    (d / "tokenizer.json").write_text(json.dumps({
        "model": {"type": "BPE", "vocab": vocab, "merges": ["t 1", ["t", "2"]]},
        "added_tokens": [{"id": 1, "content": "<s>", "special": True}]}))
    out = tmp_path / "m.gguf"
    assert main(["convert", str(d), str(out), "--quiet"]) == 0
    ids = [1, 5, 9, 3, 7]
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits.numpy()
    got = load_gguf_model(out)([ids]).numpy()
    assert np.abs(got - ref).max() <= 1e-4

    fields = gguf.GGUFReader(str(out)).fields
    assert fields["tokenizer.ggml.model"].contents() == "gpt2"
    tokens = fields["tokenizer.ggml.tokens"].contents()
    assert tokens[1] == "<s>" and tokens[5] == "t5" and tokens[95] == "[PAD95]"
    types = fields["tokenizer.ggml.token_type"].contents()
    assert (types[1], types[5], types[95]) == (3, 1, 5)
    assert fields["tokenizer.ggml.token_type"].types[-1] == gguf.GGUFValueType.INT32
    assert fields["tokenizer.ggml.merges"].contents() == ["t 1", "t 2"]
    assert fields["tokenizer.ggml.bos_token_id"].contents() == 1


def test_peak_memory_grows_with_one_tensor_not_with_the_model(tmp_path):
    """Converting 40 tensors costs about the peak memory of converting 8 of the same size:
    inputs are mapped and their pages dropped, outputs streamed (a whole-model conversion
    would need 64 MiB more)."""
    import subprocess
    import sys
    rng = np.random.default_rng(0)
    peaks = []
    for n in (8, 40):
        src = tmp_path / f"w{n}.safetensors"
        from ember.io.outputs import StagedOutputs
        from ember.io.safetensors_writer import PlannedTensor, write_safetensors
        with StagedOutputs() as out:
            write_safetensors(out, src, [PlannedTensor(
                f"t{i}", "F32", (512, 1024),
                lambda: rng.standard_normal((512, 1024), dtype=np.float32)) for i in range(n)])
        # VmHWM: this process's own peak (ru_maxrss would include the forking parent's)
        code = ("from ember.cli import main; "
                f"assert main(['convert', {str(src)!r}, {str(tmp_path / f'o{n}.gguf')!r}, "
                "'--dtype', 'bf16', '--quiet']) == 0; "
                "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0])")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True)
        peaks.append(int(done.stdout.split()[-2]))   # KiB
    assert peaks[1] - peaks[0] < 16 * 1024, peaks     # 2 MiB per input tensor; 64 MiB more input


def test_a_self_containing_pickle_and_the_progress_bar(tmp_path, capsys):
    import pickle
    loop = []
    loop.append(loop)
    path = tmp_path / "loop.pth"
    with open(path, "wb") as fh:     # the legacy layout around a list holding itself
        for obj in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}, loop, []):
            pickle.dump(obj, fh, protocol=2)
    assert main(["inspect", str(path)]) == 1
    assert "nest too deeply" in capsys.readouterr().err

    from ember.cli.convert import Progress
    from ember.io.gguf_writer import PlannedTensor
    bar = Progress(2, enabled=True)
    bar(0, PlannedTensor("first", (1,), 0, None))
    bar(1, PlannedTensor("second", (1,), 0, None))
    bar.done()
    err = capsys.readouterr().err
    assert "] 1/2 first" in err and "] 2/2 second" in err and err.endswith("] 2/2" + " " * 41 + "\n")
