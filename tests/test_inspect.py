"""`ember inspect`: tensors, metadata and chunked statistics of every format ember reads."""
import json
import struct

import numpy as np
import pytest
from ember.cli import main


def _inspect(capsys, *args):
    assert main(["inspect", *map(str, args)]) == 0
    return capsys.readouterr().out


def test_npz_stats_match_numpy_with_nan_and_inf(tmp_path, capsys, monkeypatch):
    import ember.cli.inspect as inspect_cli
    monkeypatch.setattr(inspect_cli, "_CHUNK", 7)     # many chunks, one uneven at the end
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 9)).astype(np.float32)
    a[1, 2], a[3, 3], a[4, 0] = np.nan, np.inf, -np.inf
    b = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.savez(tmp_path / "w.npz", a=a, b=b)
    info = json.loads(_inspect(capsys, tmp_path / "w.npz", "--stats", "--json"))
    assert info["format"] == "npz" and info["tensor_count"] == 2
    rows = {t["name"]: t for t in info["tensors"]}
    assert rows["a"]["shape"] == [5, 9] and rows["a"]["dtype"] == "F32"
    assert rows["a"]["nbytes"] == a.nbytes
    finite = a[np.isfinite(a)].astype(np.float64)
    s = rows["a"]["stats"]
    assert (s["nan"], s["inf"]) == (1, 2)
    assert s["min"] == finite.min() and s["max"] == finite.max()
    assert s["mean"] == pytest.approx(finite.mean(), rel=1e-12)
    assert s["std"] == pytest.approx(finite.std(), rel=1e-9)
    assert rows["b"]["stats"]["max"] == 11 and rows["b"]["dtype"] == "I64"
    text = _inspect(capsys, tmp_path / "w.npz", "--stats")
    assert "NaN 1 inf 2" in text


def test_quantized_gguf_stats_are_of_the_dequantized_values(tmp_path, capsys):
    from ember.io.gguf_writer import PlannedTensor, write_gguf
    from ember.io.quant import GGMLType, dequantize
    from ember.io.quantize import quantize
    x = np.random.default_rng(1).standard_normal((6, 256)).astype(np.float32)
    raw = quantize(x, "Q4_K")
    with open(tmp_path / "q.gguf", "wb") as fh:
        write_gguf(fh, {"general.architecture": "test", "general.tokens": list("abcdefghijklmnopq")},
                   [PlannedTensor("w", x.shape, GGMLType.Q4_K, lambda: raw)])
    info = json.loads(_inspect(capsys, tmp_path / "q.gguf", "--stats", "--json"))
    assert info["metadata"]["general.architecture"] == "test"
    t = info["tensors"][0]
    assert (t["dtype"], t["shape"], t["nbytes"]) == ("Q4_K", [6, 256], raw.size)
    values = dequantize(raw, "Q4_K", x.shape).astype(np.float64)
    assert t["stats"]["max"] == values.max()
    assert t["stats"]["mean"] == pytest.approx(values.mean(), rel=1e-9)
    assert "[17 items: 'a', 'b', 'c', 'd', ...]" in _inspect(capsys, tmp_path / "q.gguf")


def _ct2_string(s):
    b = s.encode() + b"\0"
    return struct.pack("<H", len(b)) + b


def _write_ct2(path, variables, aliases):
    """A CTranslate2 model.bin as its documented layout describes it (binary version 6)."""
    codes = {np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("int16"): 2,
             np.dtype("float16"): 4}
    out = [struct.pack("<I", 6), _ct2_string("TestSpec"), struct.pack("<II", 1, len(variables))]
    for name, a in variables.items():
        out += [_ct2_string(name), struct.pack("<B", a.ndim),
                struct.pack(f"<{a.ndim}I", *a.shape), struct.pack("<BI", codes[a.dtype], a.nbytes),
                a.tobytes()]
    out.append(struct.pack("<I", len(aliases)))
    for alias, target in aliases.items():
        out += [_ct2_string(alias), _ct2_string(target)]
    path.write_bytes(b"".join(out))


def test_ctranslate2_variables_and_aliases(tmp_path, capsys):
    w = np.arange(12, dtype=np.float16).reshape(3, 4)
    path = tmp_path / "model.bin"
    _write_ct2(path, {"encoder/w": w, "decoder/flag": np.array(3, np.int8)},
               {"decoder/proj": "encoder/w"})
    info = json.loads(_inspect(capsys, path, "--stats", "--json"))
    assert info["format"] == "ctranslate2"
    assert info["metadata"]["ctranslate2.spec"] == "TestSpec"
    assert info["metadata"]["ctranslate2.alias.decoder/proj"] == "encoder/w"
    rows = {t["name"]: t for t in info["tensors"]}
    assert rows["encoder/w"]["dtype"] == "F16" and rows["encoder/w"]["shape"] == [3, 4]
    assert rows["encoder/w"]["stats"]["max"] == 11 and rows["decoder/flag"]["stats"]["min"] == 3
    from ember.io.ctranslate2 import CTranslate2File
    with CTranslate2File(path) as f:
        assert np.array_equal(f.array("decoder/proj"), w)

    path.write_bytes(path.read_bytes()[:60])
    assert main(["inspect", str(path)]) == 1
    assert "truncated" in capsys.readouterr().err


def test_unknown_and_empty_files_are_named(tmp_path, capsys):
    (tmp_path / "x.bin").write_bytes(b"hello, not a model")
    (tmp_path / "e.bin").write_bytes(b"")
    assert main(["inspect", str(tmp_path / "x.bin")]) == 1
    assert "unknown weights format" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "e.bin")]) == 1
    assert "empty" in capsys.readouterr().err


def test_pytorch_checkpoint_lists_strided_and_bf16_tensors(tmp_path, capsys):
    from helpers import require
    torch = require("torch")      # checkpoints are made with torch.save
    torch.manual_seed(0)
    t = torch.randn(4, 6)
    torch.save({"model": {"w": t.t(), "h": t.to(torch.bfloat16)}, "epoch": 3}, tmp_path / "c.pt")
    info = json.loads(_inspect(capsys, tmp_path / "c.pt", "--stats", "--json"))
    assert info["format"] == "pytorch (zip)"
    rows = {r["name"]: r for r in info["tensors"]}
    assert set(rows) == {"model.w", "model.h"}
    assert rows["model.w"]["shape"] == [6, 4]
    assert rows["model.h"]["dtype"] == "BF16"
    assert rows["model.w"]["stats"]["max"] == float(t.max())
    assert rows["model.h"]["stats"]["max"] == float(t.to(torch.bfloat16).float().max())


def test_safetensors_with_metadata(tmp_path, capsys):
    import ember
    from ember.io import save_safetensors
    save_safetensors({"w": ember.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))},
                     tmp_path / "m.safetensors", metadata={"format": "pt", "note": "hi"})
    text = _inspect(capsys, tmp_path / "m.safetensors", "--stats")
    assert "safetensors, 1 tensor, 24 B" in text and "note = hi" in text
    row = next(line for line in text.splitlines() if line.startswith("  w "))
    assert row.split()[:4] == ["w", "F32", "[2,", "3]"] and "min 0 max 5 mean 2.5" in row
