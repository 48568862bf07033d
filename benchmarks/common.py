"""Helpers every benchmark shares: timing, memory, machine facts, and a results table.

Benchmarks print figures; they never fail. Compare ratios against a peer measured in
the same process and run, not absolute times: the machine is shared and noisy.
"""

import json
import os
import statistics
import subprocess
import sys
import time


def median_time(fn, repeats=7, warmup=2, min_time=0.0):
    """Median wall-clock seconds of `fn()` over `repeats` runs, after `warmup` runs.

    With `min_time`, each timed run calls `fn` in a loop until that many seconds have
    passed (for calls too short to time one by one) and reports the time per call."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        samples.append(elapsed / calls)
    return statistics.median(samples)


class Timing:
    """Seconds per call, one sample per round of `compare_times` (in round order)."""

    def __init__(self, samples):
        self.samples = list(samples)
        self.median = statistics.median(self.samples)
        self.best = min(self.samples)


def paired_ratio(a, b):
    """Median over rounds of a's time / b's time in the same round (Timings from one
    `compare_times` call). Pairing cancels the drift of a shared machine's load, which
    a ratio of two medians keeps."""
    if a is None or b is None:
        return None
    return statistics.median(x / y for x, y in zip(a.samples, b.samples, strict=True))


def compare_times(fns, repeats=7, warmup=2, min_time=0.0):
    """A Timing for each of `fns` (a dict name -> callable, or None to skip it).

    The runs are interleaved so that load from other processes hits every contender
    alike, and the order rotates each round (a b c, b c a, c a b, ...): a library whose
    worker threads keep spinning after a call (OpenMP in torch, OpenBLAS) would otherwise
    always slow down the same neighbour."""
    live = {name: fn for name, fn in fns.items() if fn is not None}
    for fn in live.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in live}
    names = list(live)
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            samples[name].append(median_time(live[name], repeats=1, warmup=0, min_time=min_time))
    return {name: Timing(samples[name]) if name in samples else None for name in fns}


def rss_mib():
    """This process's resident set size in MiB (Linux procfs; None elsewhere)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_python(code, *args, timeout=600):
    """Run `code` in a fresh interpreter (this one) and return the JSON it prints last."""
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        return {
            "error": out.stderr.strip().splitlines()[-1]
            if out.stderr.strip()
            else f"exit status {out.returncode}"
        }
    return json.loads(out.stdout.strip().splitlines()[-1])


def machine_report():
    """Lines describing what the figures depend on: load, cores, BLAS and its kernel."""
    lines = []
    try:
        load = os.getloadavg()
        lines.append(
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores"
        )
    except OSError:
        pass
    env = {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS", "OMP_", "MKL_"))}
    if env:
        lines.append("environment: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    try:
        import numpy  # noqa: F401 (loads BLAS so threadpoolctl can see it)
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            if pool.get("user_api") == "blas":
                lines.append(
                    f"numpy BLAS: {pool.get('internal_api')} {pool.get('version')}, "
                    f"kernel {pool.get('architecture')}, {pool.get('num_threads')} "
                    "threads"
                )
    except ImportError:
        lines.append("numpy BLAS: unknown (pip install threadpoolctl to see the kernel)")
    lines.append(jit_report())
    return lines


def jit_report():
    """Whether this environment has ember's `jit` extra: without numba and llvmlite ember's
    CPU runs its numpy-only paths (no Winograd or fused conv epilogue, no quantized or
    f16 kernels), slower by up to ~1.6x (yolov8n at 640: 150 against 93 ms a forward in
    one benchmark environment that lacked numba), and its figures are not those of
    `pip install 'ember[jit]'`."""
    import importlib.util

    missing = [m for m in ("numba", "llvmlite") if importlib.util.find_spec(m) is None]
    if os.environ.get("EMBER_JIT", "1") == "0":
        return "ember's jit kernels: off (EMBER_JIT=0): ember's figures are its numpy-only path"
    if missing:
        return (
            f"ember's jit kernels: MISSING ({', '.join(missing)} not installed here): ember's "
            "figures are its numpy-only path, not `pip install 'ember[jit]'`'s"
        )
    return "ember's jit kernels: numba and llvmlite installed (the `jit` extra)"


def print_table(headers, rows):
    """A plain text table, columns sized to fit."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if n == 0:
            print("  ".join("-" * w for w in widths))


def ms(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def times(value):
    return "-" if value is None else f"{value:.2f}x"
