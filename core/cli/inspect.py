"""`ember inspect FILE`: the tensors of a weights file (names, shapes, dtypes, sizes) and
its metadata; `--stats` adds min/max/mean/std and NaN/inf counts, computed a chunk of
each tensor at a time; `--json` prints it all as JSON.

Formats: safetensors (a file or a sharded directory), GGUF, npz/npy, CTranslate2
model.bin, PyTorch checkpoints (read by a restricted unpickler: nothing in the file runs).
"""

import json
import sys

_CHUNK = 1 << 20  # elements per statistics step
_LONG_LIST = 16  # metadata arrays longer than this are summarised


def add_parser(subparsers):
    p = subparsers.add_parser(
        "inspect", help="list the tensors and metadata of a weights file", description=__doc__
    )
    p.add_argument("file", help="safetensors, GGUF, npz, CTranslate2 or PyTorch file")
    p.add_argument(
        "--stats", action="store_true", help="add min/max/mean/std and NaN/inf counts per tensor"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p


def tensor_stats(entry):
    """min, max, mean, std, nan, inf of one entry's values, read in bounded chunks."""
    import numpy as np

    from ..io.weights import to_f32

    raw = entry.read()
    n = entry.numel
    out = {"min": None, "max": None, "mean": None, "std": None, "nan": 0, "inf": 0}
    if n == 0:
        return out
    quantized = entry.dtype not in ("F64", "F32", "F16", "BF16") and entry.is_float
    if quantized:
        from ..io.quant import QTensor

        q = QTensor(raw, entry.dtype, (n // entry.shape[-1], entry.shape[-1]))
        rows = max(1, _CHUNK // entry.shape[-1])
        chunks = (q.dequantize_rows(i, i + rows) for i in range(0, q.shape[0], rows))
    else:
        flat = raw.reshape(-1)
        chunks = (flat[i : i + _CHUNK] for i in range(0, n, _CHUNK))
    lo, hi, total, total2, finite = np.inf, -np.inf, 0.0, 0.0, 0
    for chunk in chunks:
        x = to_f32(entry, chunk) if entry.is_float and not quantized else chunk
        x = x.astype(np.float64, copy=False).reshape(-1)
        nan = np.isnan(x)
        inf = np.isinf(x)
        out["nan"] += int(nan.sum())
        out["inf"] += int(inf.sum())
        good = x[~(nan | inf)]
        if good.size:
            lo, hi = min(lo, good.min()), max(hi, good.max())
            total += good.sum()
            total2 += (good * good).sum()
            finite += good.size
    if finite:
        mean = total / finite
        out.update(
            min=float(lo),
            max=float(hi),
            mean=float(mean),
            std=float(max(total2 / finite - mean * mean, 0.0) ** 0.5),
        )
    return out


def describe(path, stats=False):
    from ..io.weights import open_weights

    with open_weights(path) as w:
        tensors = []
        for e in w.entries:
            row = {
                "name": e.name,
                "shape": [int(d) for d in e.shape],
                "dtype": e.dtype,
                "nbytes": int(e.nbytes),
            }
            if stats:
                row["stats"] = tensor_stats(e)
            tensors.append(row)
        return {
            "file": str(path),
            "format": w.format,
            "metadata": _plain(w.metadata),
            "tensor_count": len(tensors),
            "total_bytes": sum(t["nbytes"] for t in tensors),
            "tensors": tensors,
        }


def _plain(meta):
    out = {}
    for k, v in meta.items():
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if isinstance(v, list):
            v = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
        out[str(k)] = v
    return out


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def run(args, out=None):
    out = out or sys.stdout
    info = describe(args.file, stats=args.stats)
    if args.json:
        json.dump(info, out, indent=2, allow_nan=False, default=str)
        out.write("\n")
        return 0
    n = info["tensor_count"]
    out.write(
        f"{info['file']}: {info['format']}, {n} tensor{'' if n == 1 else 's'}, "
        f"{_size(info['total_bytes'])}\n"
    )
    if info["metadata"]:
        out.write("metadata:\n")
        for k, v in info["metadata"].items():
            if isinstance(v, list) and len(v) > _LONG_LIST:
                v = f"[{len(v)} items: {', '.join(map(repr, v[:4]))}, ...]"
            text = str(v)
            out.write(f"  {k} = {text if len(text) <= 200 else text[:200] + '...'}\n")
    width = max([len(t["name"]) for t in info["tensors"]] + [4])
    for t in info["tensors"]:
        shape = "[" + ", ".join(map(str, t["shape"])) + "]"
        line = f"  {t['name']:<{width}}  {t['dtype']:<5} {shape:<18} {_size(t['nbytes']):>10}"
        s = t.get("stats")
        if s is not None:
            if s["min"] is None:
                line += "  (no finite values)"
            else:
                line += (
                    f"  min {s['min']:.4g} max {s['max']:.4g} mean {s['mean']:.4g} "
                    f"std {s['std']:.4g}"
                )
            if s["nan"] or s["inf"]:
                line += f"  NaN {s['nan']} inf {s['inf']}"
        out.write(line + "\n")
    return 0
