"""WebGPU op throughput next to numpy's, measured in the same run on the same machine.

Prints, for the adapter in use: f32 matmul GFLOP/s at 512, 1024 and 2048 (x @ W, and
x @ W.T as a Linear layer computes it), GB/s of a large add and of softmax, each with
numpy's figure and the paired ratio wgpu/numpy (median over interleaved rounds of the
per-round speed ratio). Where torch sees a CUDA GPU, matmul is also compared with torch's
CUDA matmul. Targets: on lavapipe matmul at 1024 >= 0.1x numpy; on a real GPU >= 0.5x
torch CUDA.

    .venv/bin/python benchmarks/ops_wgpu.py [--device wgpu:0] [--sizes 512,1024,2048]
"""

import argparse
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


def measure(name, unit, work, fns, repeats, rows):
    """Time {'wgpu': f, 'numpy': g} in rotating rounds; `work` is flops or bytes per call."""
    t = compare_times(fns, repeats=repeats, warmup=1, min_time=0.05)
    ours, ref = work / t["wgpu"].median / 1e9, work / t["numpy"].median / 1e9
    speed_ratio = 1.0 / paired_ratio(t["wgpu"], t["numpy"])
    rows.append([name, f"{ours:.2f} {unit}", f"{ref:.2f} {unit}", f"{speed_ratio:.3f}x"])
    print(
        f"  {name}: wgpu {ours:.2f} {unit}, numpy {ref:.2f} {unit}, ratio {speed_ratio:.3f}",
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="wgpu:0")
    ap.add_argument("--sizes", default="512,1024,2048")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
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
    torch = torch_cuda()
    print("torch CUDA peer:", "yes" if torch is not None else "not available here")

    for n in [int(s) for s in args.sizes.split(",")]:
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

    print()
    print_table(["op", "wgpu", "peer (numpy or torch CUDA)", "wgpu/peer"], rows)
    print(
        f"\nbuffers created: {backend.memory_stats()['buffers_created']}, "
        f"pipelines: {backend.kernel_stats()['pipelines']}"
    )


if __name__ == "__main__":
    main()
