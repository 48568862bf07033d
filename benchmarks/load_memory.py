"""How much memory loading a 1 GiB safetensors file on the CPU costs.

    .venv/bin/python benchmarks/load_memory.py [--gib 1.0]

Writes a file of 16 MiB f32 tensors to a temporary folder, then loads it in fresh
processes and reports resident memory (VmRSS) before and after: ember's tensors are
views of an mmap, so loading should grow RSS by far less than the file (target: < 50 MB);
touching one tensor brings in only that tensor's pages. The `safetensors` package's
numpy and torch loaders are measured the same way as peers. Prints figures; never fails.
"""

import argparse
import os
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import print_table, run_python

TENSOR_SHAPE = (1024, 4096)  # f32: 16 MiB each

# Each probe prints one JSON line: RSS (MiB) before, after loading, after touching one
# tensor, the peak, and seconds spent loading.
PROBE = textwrap.dedent("""
    import json, sys, time
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    path, how = sys.argv[1], sys.argv[2]
    import numpy
    if how == "ember":
        import ember
        ember.Device.cpu()
        load = ember.io.load_safetensors
        touch = lambda t: float(t.sum().item())
    elif how == "safetensors.numpy":
        from safetensors.numpy import load_file as load
        touch = lambda a: float(a.sum())
    else:
        import torch
        from safetensors.torch import load_file as load
        touch = lambda t: float(t.sum())
    before = status("VmRSS")
    start = time.perf_counter()
    tensors = load(path)
    seconds = time.perf_counter() - start
    after = status("VmRSS")
    touch(tensors[sorted(tensors)[0]])
    touched = status("VmRSS")
    print(json.dumps({"before": before, "after": after, "touched": touched,
                      "peak": status("VmHWM"), "seconds": seconds, "count": len(tensors)}))
""")


def write_file(path, gib):
    """A ~`gib` GiB file written by ember's own writer. Each tensor is a broadcast view
    of one row, so the writer materialises one 16 MiB tensor at a time, never the file."""
    import ember

    rows, cols = TENSOR_SHAPE
    count = max(1, round(gib * 1024**3 / (rows * cols * 4)))
    row = ember.randn(1, cols)
    tensors = {f"layers.{i:03d}.weight": row.expand(rows, cols) for i in range(count)}
    ember.io.save_safetensors(tensors, path, metadata={"written_by": "benchmarks/load_memory"})
    return count


def run(gib=1.0):
    print(f"loading a {gib:g} GiB safetensors file on the CPU (fresh process per loader)")
    with tempfile.TemporaryDirectory(prefix="ember-load-") as tmp:
        path = os.path.join(tmp, "model.safetensors")
        start = time.perf_counter()
        count = write_file(path, gib)
        size_mib = os.path.getsize(path) / 1024**2
        print(
            f"wrote {count} tensors of {TENSOR_SHAPE[0]}x{TENSOR_SHAPE[1]} f32, "
            f"{size_mib:.0f} MiB, in {time.perf_counter() - start:.1f} s"
        )
        rows = []
        for how in ("ember", "safetensors.numpy", "safetensors.torch"):
            r = run_python(PROBE, path, how)
            if "error" in r:
                rows.append([how, "-", "-", "-", "-", r["error"][:60]])
                continue
            rows.append(
                [
                    how,
                    f"{r['after'] - r['before']:+.1f} MiB",
                    f"{r['touched'] - r['before']:+.1f} MiB",
                    f"{r['peak']:.0f} MiB",
                    f"{r['seconds'] * 1e3:.1f} ms",
                    f"{r['count']} tensors",
                ]
            )
        print_table(
            [
                "loader",
                "RSS growth on load",
                "after touching 1 tensor",
                "peak RSS",
                "load time",
                "",
            ],
            rows,
        )
    print("target: ember's RSS growth on load < 50 MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    run(parser.parse_args().gib)
