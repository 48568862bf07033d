"""ember's CPU ops next to the plain numpy expression and torch CPU, in one process.

    .venv/bin/python benchmarks/ops_cpu.py            # ops, then the 1 GB load-memory check
    .venv/bin/python benchmarks/ops_cpu.py --no-load  # ops only

Every figure comes from interleaved samples after warm-up. ember and numpy share
this process, hence the same BLAS and the same OPENBLAS_* settings (which may slow
numpy on this machine, see NOTES.md); the ratio ember/numpy is what to read (target:
within 1.1x). Prints figures; never fails.
"""

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember
from common import compare_times, machine_report, ms, paired_ratio, print_table, ratio, times

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
EPS = 1e-5


# --- the plain numpy expressions someone would write -------------------------------------------
def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdims=True)
    return xc / np.sqrt(var + EPS) * w + b


def np_gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def np_gelu_erf(x):
    # numpy has no erf: Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7), the usual
    # hand-written form.
    z = x * INV_SQRT_2
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = np.sign(z) * (1.0 - poly * np.exp(-a * a))
    return 0.5 * x * (1.0 + erf)


def cases(rows, cols):
    """(name, ember fn, numpy fn, torch fn or None) over shared inputs."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((rows, cols), dtype=np.float32)
    w_np = rng.standard_normal(cols, dtype=np.float32)
    b_np = rng.standard_normal(cols, dtype=np.float32)
    x, w, b = (ember.from_numpy(a) for a in (x_np, w_np, b_np))
    try:
        import torch
        import torch.nn.functional as F

        xt, wt, bt = (torch.from_numpy(a) for a in (x_np, w_np, b_np))
    except ImportError:
        torch = None

    out = []
    for n in (1024, 2048):
        a_np = rng.standard_normal((n, n), dtype=np.float32)
        c_np = rng.standard_normal((n, n), dtype=np.float32)
        a, c = ember.from_numpy(a_np), ember.from_numpy(c_np)
        at, ct = (torch.from_numpy(a_np), torch.from_numpy(c_np)) if torch else (None, None)
        out.append(
            (
                f"matmul {n}x{n} @ {n}x{n}",
                lambda a=a, c=c: a @ c,
                lambda a=a_np, c=c_np: a @ c,
                (lambda a=at, c=ct: a @ c) if torch else None,
            )
        )
    elems = f"{rows}x{cols}"
    out += [
        (
            f"softmax(-1) {elems}",
            lambda: x.softmax(-1),
            lambda: np_softmax(x_np),
            (lambda: torch.softmax(xt, -1)) if torch else None,
        ),
        (
            f"layer_norm {elems}",
            lambda: x.layer_norm(w, b, EPS),
            lambda: np_layer_norm(x_np, w_np, b_np),
            (lambda: F.layer_norm(xt, (cols,), wt, bt, EPS)) if torch else None,
        ),
        (
            f"gelu tanh {elems}",
            lambda: x.gelu_tanh(),
            lambda: np_gelu_tanh(x_np),
            (lambda: F.gelu(xt, approximate="tanh")) if torch else None,
        ),
        (
            f"gelu erf {elems}",
            lambda: x.gelu(),
            lambda: np_gelu_erf(x_np),
            (lambda: F.gelu(xt)) if torch else None,
        ),
    ]
    return out


def check_agreement(ember_fn, numpy_fn):
    """Largest absolute difference, so a fast but wrong result would show."""
    return float(np.max(np.abs(ember_fn().numpy() - numpy_fn())))


def run_ops(rows, cols, repeats):
    print(f"ember {ember.__version__}, numpy {np.__version__}", end="")
    try:
        import torch

        print(f", torch {torch.__version__} ({torch.get_num_threads()} threads)")
    except ImportError:
        print(", torch not installed (pip install ember[bench])")
    for line in machine_report():
        print(line)
    print(
        f"{repeats} samples per contender (each >= 20 ms of calls) after 2 warm-up calls; "
        "inputs f32\n"
    )
    rows_out = []
    for name, ember_fn, numpy_fn, torch_fn in cases(rows, cols):
        # ember and numpy share rounds (their ratio is the target); torch gets its own,
        # because its OpenMP threads spin on after each call and slow the next one.
        pair = compare_times({"ember": ember_fn, "numpy": numpy_fn}, repeats, min_time=0.02)
        t_torch = compare_times({"torch": torch_fn}, repeats, min_time=0.02)["torch"]
        t_ember, t_numpy = pair["ember"], pair["numpy"]
        diff = check_agreement(ember_fn, numpy_fn)
        rows_out.append(
            [
                name,
                ms(t_ember.median),
                ms(t_numpy.median),
                ms(t_torch.median if t_torch else None),
                times(paired_ratio(t_ember, t_numpy)),
                ratio(t_ember.median, t_torch.median if t_torch else None),
                f"{diff:.1e}",
            ]
        )
    print_table(
        ["op", "ember", "numpy", "torch", "ember/numpy", "ember/torch", "max|diff|"], rows_out
    )
    print(
        "\ntimes are medians; ember/numpy is the median of per-round ratios (ember and numpy "
        "alternate),\nember/torch a ratio of medians (torch runs on its own)\n"
        "target: ember/numpy <= 1.10x on each op"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--no-load", action="store_true", help="skip the 1 GB load-memory check")
    parser.add_argument("--load-gib", type=float, default=1.0)
    args = parser.parse_args(argv)
    run_ops(args.rows, args.cols, args.repeats)
    if not args.no_load:
        print()
        from load_memory import run as run_load

        run_load(args.load_gib)


if __name__ == "__main__":
    main()
