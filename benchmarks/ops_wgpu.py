"""WebGPU op throughput next to numpy's, measured in the same run on the same machine.

Prints, for the adapter in use: f32 matmul GFLOP/s at 512, 1024 and 2048, GB/s of a large
add and of softmax, each with numpy's figure and the ratio wgpu/numpy. Figures, not a
pass/fail: `python benchmarks/ops_wgpu.py [--device wgpu:0] [--sizes 512,1024,2048]`.
"""
import argparse
import os
import time

import numpy as np

import ember


def best_time(fn, repeats, min_time=0.5):
    """Best seconds per call over `repeats` rounds (each at least one call)."""
    fn()  # warm-up: compiles pipelines, fills the buffer pool, wakes BLAS threads
    best = float("inf")
    start = time.perf_counter()
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if i >= 1 and time.perf_counter() - start > min_time * repeats:
            break
    return best


def numpy_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    e /= e.sum(-1, keepdims=True)
    return e


def row(name, unit, ours, ref):
    print(f"{name:<28} {ours:>10.2f} {unit:<7} numpy {ref:>10.2f} {unit:<7} ratio {ours / ref:>6.3f}")


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
    print(f"adapter: {info.get('device')} ({info.get('backend_type')}, {info.get('adapter_type')}), "
          f"shader-f16: {backend.has_f16}")
    rng = np.random.default_rng(0)
    sync = backend.synchronize

    for n in [int(s) for s in args.sizes.split(",")]:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        flops = 2.0 * n ** 3
        t_np = best_time(lambda: a @ b, args.repeats)
        ta, tb = ember.tensor(a, device=dev), ember.tensor(b, device=dev)

        def run():
            ta.matmul(tb)
            sync()
        t_gpu = best_time(run, max(2, args.repeats // 2 if n >= 2048 else args.repeats))
        err = np.abs((ta @ tb).numpy() - a @ b).max()
        row(f"matmul f32 {n}x{n}x{n}", "GFLOP/s", flops / t_gpu / 1e9, flops / t_np / 1e9)
        if err > 1e-2 * np.sqrt(n):
            print(f"  warning: max abs error {err:.3g}")
        # x @ W.T as a Linear layer computes it (the `matmul_nt` kernel).
        tbt = ember.tensor(np.ascontiguousarray(b.T), device=dev).t()

        def run_t():
            ta.matmul(tbt)
            sync()
        t_gpu_t = best_time(run_t, max(2, args.repeats // 2 if n >= 2048 else args.repeats))
        row(f"matmul f32 {n} x @ W.T", "GFLOP/s", flops / t_gpu_t / 1e9, flops / t_np / 1e9)

    n = 1 << 24
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    moved = 3 * n * 4
    t_np = best_time(lambda: x + y, args.repeats)
    tx, ty = ember.tensor(x, device=dev), ember.tensor(y, device=dev)

    def add():
        tx + ty
        sync()
    t_gpu = best_time(add, args.repeats)
    row(f"add f32 {n} elements", "GB/s", moved / t_gpu / 1e9, moved / t_np / 1e9)

    s = rng.standard_normal((4096, 1024), dtype=np.float32)
    moved = 2 * s.size * 4
    t_np = best_time(lambda: numpy_softmax(s), args.repeats)
    ts = ember.tensor(s, device=dev)

    def softmax():
        ts.softmax(-1)
        sync()
    t_gpu = best_time(softmax, args.repeats)
    row("softmax f32 4096x1024", "GB/s", moved / t_gpu / 1e9, moved / t_np / 1e9)
    print(f"buffers created: {backend.memory_stats()['buffers_created']}, "
          f"pipelines: {backend.kernel_stats()['pipelines']}")


if __name__ == "__main__":
    main()
