"""WebGPU op throughput next to numpy's, measured in the same run on the same machine.

Prints, for the adapter in use: f32 matmul GFLOP/s at 512, 1024 and 2048 (x @ W, and
x @ W.T as a Linear layer computes it), GB/s of a large add and of softmax, each with
numpy's figure and the paired ratio wgpu/numpy (median over interleaved rounds of the
per-round speed ratio). Where torch sees a CUDA GPU, matmul is also compared with torch's
CUDA matmul. Targets: on lavapipe matmul at 1024 >= 0.1x numpy; on a real GPU >= 0.5x
torch CUDA.

With --peer torch-cuda (or torch-cpu) torch on that device is the peer of every row instead
of numpy, and --dtypes f32,f16 adds f16 matmuls (where the adapter has shader-f16), each
checked against torch's product before it is timed; --json ends with one JSON line of the
figures (benchmarks/gpu_check.py reads it).

    .venv/bin/python benchmarks/ops_wgpu.py [--device wgpu:0] [--sizes 512,1024,2048]
    python3 benchmarks/ops_wgpu.py --peer torch-cuda --sizes 1024,2048,4096,8192 --dtypes f32,f16
"""

import argparse
import json
import os
import sys

# OpenBLAS's idle worker threads spin for about 2^28 cycles (~0.1 s) after every numpy call,
# on the same 2 cores the wgpu side (lavapipe's threads) needs next: in interleaved rounds
# that measured wgpu matmul at ~0.6x its speed. 2^4 cycles lets them sleep at once (numpy's
# own GEMM speed stays the same). Read when OpenBLAS loads, so before numpy is imported.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import ember
from common import compare_times, machine_report, paired_ratio, print_table


def numpy_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    e /= e.sum(-1, keepdims=True)
    return e


class Figures:
    """The rows measured, for --json's last line; with --json each is also printed as it is
    measured ({"progress": row}), so a caller that stops the run early keeps those."""

    def __init__(self):
        self.rows, self.print_each = [], False

    def add(self, row):
        self.rows.append(row)
        if self.print_each:
            print(json.dumps({"progress": row}), flush=True)


FIGURES = Figures()


def measure(name, unit, work, fns, repeats, rows):
    """Time {'wgpu': f, peer: g} in rotating rounds (the peer is numpy unless --peer says
    otherwise); `work` is flops or bytes per call."""
    peer = next(k for k in fns if k != "wgpu")
    t = compare_times(fns, repeats=repeats, warmup=1, min_time=0.05)
    ours, ref = work / t["wgpu"].median / 1e9, work / t[peer].median / 1e9
    speed_ratio = 1.0 / paired_ratio(t["wgpu"], t[peer])
    rows.append([name, f"{ours:.2f} {unit}", f"{ref:.2f} {unit}", f"{speed_ratio:.3f}x"])
    FIGURES.add({"op": name, "unit": unit, "wgpu": ours, peer: ref, "ratio": speed_ratio})
    print(
        f"  {name}: wgpu {ours:.2f} {unit}, {peer} {ref:.2f} {unit}, ratio {speed_ratio:.3f}",
        flush=True,
    )


def torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def measure_cuda(torch, dev_fn, n, repeats, rows):
    """ember matmul vs torch's CUDA matmul (both synchronised every call)."""
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")

    def ref():
        a @ b
        torch.cuda.synchronize()

    t = compare_times({"wgpu": dev_fn, "torch": ref}, repeats=repeats, warmup=1, min_time=0.05)
    flops = 2.0 * n**3
    ours, theirs = flops / t["wgpu"].median / 1e9, flops / t["torch"].median / 1e9
    speed = 1.0 / paired_ratio(t["wgpu"], t["torch"])
    rows.append(
        [
            f"matmul f32 {n}^3 vs torch CUDA",
            f"{ours:.2f} GFLOP/s",
            f"{theirs:.2f} GFLOP/s",
            f"{speed:.3f}x",
        ]
    )
    FIGURES.add(
        {
            "op": f"matmul f32 {n}^3 vs torch CUDA",
            "unit": "GFLOP/s",
            "wgpu": ours,
            "torch": theirs,
            "ratio": speed,
        }
    )


class TorchPeer:
    """torch on one device as the peer of every row (--peer torch-cuda / torch-cpu)."""

    def __init__(self, spec):
        import torch

        self.torch, self.device = torch, spec.split("-", 1)[1]
        if self.device == "cuda" and not torch.cuda.is_available():
            raise SystemExit("--peer torch-cuda: torch sees no CUDA GPU here")
        self.name = f"torch {self.device}"

    def describe(self):
        t = self.torch
        line = f"peer: torch {t.__version__} on {self.device}"
        if self.device == "cuda":
            line += (
                f" ({t.cuda.get_device_name()}, TF32 matmul "
                f"{'on' if t.backends.cuda.matmul.allow_tf32 else 'off'})"
            )
        return line

    def tensor(self, array):
        return self.torch.from_numpy(array).to(self.device)

    def timed(self, fn):
        """A callable running fn() and waiting for the device, as the wgpu side does."""
        if self.device != "cuda":
            return fn
        sync = self.torch.cuda.synchronize

        def run():
            fn()
            sync()

        return run


def matmul_vs_torch(peer, dev, sync, n, dtype, reps, rng, rows):
    """x @ W and x @ W.T in `dtype` on ember wgpu against torch's x @ W in that dtype."""
    np_dtype = {"f32": np.float32, "f16": np.float16}[dtype]
    a = rng.standard_normal((n, n), dtype=np.float32).astype(np_dtype)
    b = rng.standard_normal((n, n), dtype=np.float32).astype(np_dtype)
    ta, tb = ember.tensor(a, device=dev), ember.tensor(b, device=dev)
    tbt = ember.tensor(np.ascontiguousarray(b.T), device=dev).t()  # W [N, K] used as W.T
    pa, pb = peer.tensor(a), peer.tensor(b)
    ref = (pa @ pb).float().cpu().numpy()
    scale = float(np.abs(ref).max()) or 1.0
    for w in (tb, tbt):
        err = float(np.abs((ta @ w).numpy().astype(np.float32) - ref).max()) / scale
        if err > {"f32": 1e-4, "f16": 1e-2}[dtype]:
            print(f"  warning: matmul {dtype} {n} max error {err:.3g} of the largest value")

    def run(w=tb):
        ta.matmul(w)
        sync()

    theirs = peer.timed(lambda: pa @ pb)
    for label, fn in (("x @ W", run), ("x @ W.T", lambda: run(tbt))):
        measure(
            f"matmul {dtype} {n}^3 {label}",
            "GFLOP/s",
            2.0 * n**3,
            {"wgpu": fn, peer.name: theirs},
            reps,
            rows,
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="wgpu:0")
    ap.add_argument("--sizes", default="512,1024,2048")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--peer",
        default="numpy",
        choices=["numpy", "torch-cuda", "torch-cpu"],
        help="what every row is compared with (default numpy; torch-cuda on a GPU machine)",
    )
    ap.add_argument(
        "--dtypes",
        default="f32",
        help="matmul dtypes: f32 and/or f16 (f16 needs a torch peer and shader-f16)",
    )
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    args = ap.parse_args()
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    FIGURES.print_each = args.json
    if set(dtypes) - {"f32", "f16"}:
        ap.error(f"--dtypes: expected f32 and/or f16, got {args.dtypes!r}")
    if "f16" in dtypes and args.peer == "numpy":
        ap.error("--dtypes f16 needs --peer torch-cuda or torch-cpu (numpy has no fast f16 GEMM)")
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/ember-xdg-{os.getuid()}")
    dev = ember.Device.parse(args.device)
    backend = dev.backend
    info = backend.adapter_info
    for line in machine_report():
        print(line)
    print(
        f"adapter: {info.get('device')} ({info.get('backend_type')}, "
        f"{info.get('adapter_type')}), shader-f16: {backend.has_f16}"
    )
    rng = np.random.default_rng(0)
    sync = backend.synchronize
    rows = []
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.peer != "numpy":
        return against_torch(args, TorchPeer(args.peer), dev, sizes, dtypes, rng, rows)
    torch = torch_cuda()
    print("torch CUDA peer:", "yes" if torch is not None else "not available here")

    for n in sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        ta, tb = ember.tensor(a, device=dev), ember.tensor(b, device=dev)
        tbt = ember.tensor(np.ascontiguousarray(b.T), device=dev).t()  # W [N, K] used as W.T
        err = max(np.abs((ta @ tb).numpy() - a @ b).max(), np.abs((ta @ tbt).numpy() - a @ b).max())
        if err > 1e-3 * np.sqrt(n):
            print(f"  warning: matmul {n} max abs error {err:.3g}")
        reps = max(2, args.repeats - 2) if n >= 2048 else args.repeats

        # Each size's operands are bound as defaults: the closures never see the next size's.
        def run(w=tb, ta=ta):
            ta.matmul(w)
            sync()

        measure(
            f"matmul f32 {n}^3 x @ W",
            "GFLOP/s",
            2.0 * n**3,
            {"wgpu": run, "numpy": lambda a=a, b=b: a @ b},
            reps,
            rows,
        )
        measure(
            f"matmul f32 {n}^3 x @ W.T",
            "GFLOP/s",
            2.0 * n**3,
            {"wgpu": lambda w=tbt, run=run: run(w), "numpy": lambda a=a, b=b: a @ b},
            reps,
            rows,
        )
        if torch is not None:
            measure_cuda(torch, run, n, reps, rows)

    n = 1 << 24
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    tx, ty = ember.tensor(x, device=dev), ember.tensor(y, device=dev)

    def add():
        tx + ty
        sync()

    measure(
        f"add f32 {n} elements",
        "GB/s",
        3 * n * 4,
        {"wgpu": add, "numpy": lambda: x + y},
        args.repeats,
        rows,
    )

    s = rng.standard_normal((4096, 1024), dtype=np.float32)
    ts = ember.tensor(s, device=dev)

    def softmax():
        ts.softmax(-1)
        sync()

    measure(
        "softmax f32 4096x1024",
        "GB/s",
        2 * s.size * 4,
        {"wgpu": softmax, "numpy": lambda: numpy_softmax(s)},
        args.repeats,
        rows,
    )

    finish(args, backend, "peer (numpy or torch CUDA)", rows)


def against_torch(args, peer, dev, sizes, dtypes, rng, rows):
    """Every row against torch on one device (--peer): add and softmax (quick), then the
    matmuls."""
    backend, sync = dev.backend, dev.backend.synchronize
    torch = peer.torch
    print(peer.describe())
    n = 1 << 24
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    tx, ty = ember.tensor(x, device=dev), ember.tensor(y, device=dev)
    px, py = peer.tensor(x), peer.tensor(y)

    def add():
        tx + ty
        sync()

    measure(
        f"add f32 {n} elements",
        "GB/s",
        3 * n * 4,
        {"wgpu": add, peer.name: peer.timed(lambda: px + py)},
        args.repeats,
        rows,
    )

    s = rng.standard_normal((4096, 1024), dtype=np.float32)
    ts, ps = ember.tensor(s, device=dev), peer.tensor(s)

    def softmax():
        ts.softmax(-1)
        sync()

    measure(
        "softmax f32 4096x1024",
        "GB/s",
        2 * s.size * 4,
        {"wgpu": softmax, peer.name: peer.timed(lambda: torch.softmax(ps, -1))},
        args.repeats,
        rows,
    )

    # Both dtypes at each size before the next size: a slow large size, cut short by a
    # caller's timeout, leaves every smaller one measured.
    if "f16" in dtypes and not backend.has_f16:
        print("  matmul f16: skipped, the adapter has no shader-f16")
        dtypes = [d for d in dtypes if d != "f16"]
    for n in sizes:
        reps = max(2, args.repeats - 2) if n >= 2048 else args.repeats
        for dtype in dtypes:
            matmul_vs_torch(peer, dev, sync, n, dtype, reps, rng, rows)
    finish(args, backend, peer.name, rows)


def finish(args, backend, peer_label, rows):
    print()
    print_table(["op", "wgpu", peer_label, "wgpu/peer"], rows)
    print(
        f"\nbuffers created: {backend.memory_stats()['buffers_created']}, "
        f"pipelines: {backend.kernel_stats()['pipelines']}"
    )
    if args.json:
        info = backend.adapter_info
        print(
            json.dumps(
                {
                    "adapter": info.get("device"),
                    "adapter_type": info.get("adapter_type"),
                    "shader_f16": backend.has_f16,
                    "peer": peer_label,
                    "rows": FIGURES.rows,
                }
            )
        )


if __name__ == "__main__":
    main()
