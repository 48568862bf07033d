"""Embedding a corpus from a file: `ember embed --input` in one process, the same job on a
local Ray with 2 actors, and sentence-transformers' `encode`, on the same generated rows.

    python benchmarks/corpus.py [--rows 100000] [--small-rows 10000] [--model DIR]
                                [--st-python PY] [--skip-ray] [--skip-st]

Each contender runs in a fresh subprocess, one after the other, on the same JSON-lines
corpus (short sentences of varied length, as in minilm.py):
  rows/s     rows / the job's own time (ember: reading, embedding, committing parts and
             assembling the .npy, from its --json summary, after the model loaded (on Ray:
             after the actors loaded theirs); sentence-transformers:
             model.encode(texts, batch_size=32) over the list)
  wall       process start -> exit
  peak RSS   ru_maxrss of the process (for Ray: the driver's; the actors are Ray's workers)
  load       the 1-minute load average when the run ended (the machine is shared)
and ember once more on --small-rows rows, so that peak RSS can be compared across sizes.
sentence-transformers runs in --st-python (default: this Python; `pip install -e .[bench]`
provides it); where it cannot be imported the row is skipped, saying so.
Targets (issue 17): ember >= 1.0x sentence-transformers' rows/s; Ray at equal cores (2 actors
of 1 CPU, one BLAS thread each, against one process with OpenBLAS's 2 threads on 2 cores)
within 20% of the single process; peak RSS at --rows within 10% of that at --small-rows.
Figures, not pass/fail (corpus_acceptance.py checks them).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from minilm import corpus  # noqa: E402 (the benchmark's shared sentence generator)

ST_SCRIPT = r"""
import json, sys, time
import numpy as np
from sentence_transformers import SentenceTransformer
model_dir, src, out = sys.argv[1:4]
model = SentenceTransformer(model_dir, device="cpu")
texts = [json.loads(line)["text"] for line in open(src)]
t0 = time.perf_counter()
vectors = model.encode(texts, batch_size=32)
seconds = time.perf_counter() - t0
np.save(out, vectors.astype(np.float32))
print(json.dumps({"rows": len(texts), "seconds": seconds}))
"""


class Skipped(Exception):
    """A contender that cannot run here; the message says why."""


def load():
    return os.getloadavg()[0]


def measured(cmd):
    """(stdout, wall seconds, peak RSS in MB) of one subprocess (os.wait4 gives the
    child's own usage); raises on failure."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errors:  # a file: a chatty stderr cannot block
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        errors.seek(0)
        err = errors.read()
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} failed: {err[-2000:]}")
    return out, wall, usage.ru_maxrss / 1024.0


def ember_command(model, src, out, *extra):
    return [
        sys.executable,
        "-m",
        "ember.cli",
        "embed",
        "--json",
        "--device",
        "cpu",
        "--model",
        model,
        "--input",
        src,
        "--output",
        out,
        *extra,
    ]


def run_ember(model, src, out, *extra):
    stdout, wall, rss = measured(ember_command(model, src, out, *extra))
    summary = json.loads(stdout)
    return {
        "rows": summary["rows"],
        "seconds": summary["seconds"],
        "wall": wall,
        "rss": rss,
        "load": load(),
    }


def run_ray(model, src, out, actors=2):
    try:
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise Skipped(f"Ray is not installed here ({exc}); pip install -e '.[ray]'") from None
    return run_ember(model, src, out, "--ray", "local", "--ray-actors", str(actors))


def run_st(python, model, src, out):
    probe = subprocess.run(
        [python, "-c", "import sentence_transformers"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["cannot start"])[-1]
        raise Skipped(
            f"sentence-transformers is not importable in {python} ({why}); "
            "pip install -e '.[bench]' or pass --st-python"
        )
    stdout, wall, rss = measured([python, "-c", ST_SCRIPT, model, src, out])
    return {**json.loads(stdout.splitlines()[-1]), "wall": wall, "rss": rss, "load": load()}


def write_corpus(path, n):
    with open(path, "w") as fh:
        for i, text in enumerate(corpus(n, seed=7)):
            fh.write(json.dumps({"text": text, "n": i}) + "\n")


def rate(r):
    return r["rows"] / r["seconds"]


def line(name, r):
    print(
        f"{name:<34} {r['rows']:>8,} rows  {rate(r):>8.1f} rows/s  "
        f"wall {r['wall']:>7.1f} s  peak RSS {r['rss']:>7.1f} MB  load {r['load']:.2f}",
        flush=True,
    )


def min_cosine(a, b):
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.min())


def contenders(args, model, tmp):
    """Run every contender one after the other; {name: result} (skipped ones absent)."""
    big, small = os.path.join(tmp, "big.jsonl"), os.path.join(tmp, "small.jsonl")
    write_corpus(big, args.rows)
    write_corpus(small, args.small_rows)
    results = {"small": run_ember(model, small, os.path.join(tmp, "small.npy"))}
    line(f"ember cpu, {args.small_rows:,} rows", results["small"])
    results["ember"] = run_ember(model, big, os.path.join(tmp, "ember.npy"))
    line("ember cpu, one process", results["ember"])
    runs = []
    if not args.skip_ray:
        runs.append(("ray", "ember on local Ray, 2 actors", run_ray, (model, big)))
    if not args.skip_st:
        runs.append(("st", "sentence-transformers encode", run_st, (args.st_python, model, big)))
    for key, name, fn, fn_args in runs:
        try:
            results[key] = fn(*fn_args, os.path.join(tmp, f"{key}.npy"))
        except Skipped as exc:
            print(f"{name}: skipped ({exc})", flush=True)
            continue
        line(name, results[key])
        cos = min_cosine(
            np.load(os.path.join(tmp, "ember.npy")), np.load(os.path.join(tmp, f"{key}.npy"))
        )
        print(f"  vectors vs ember one process: min cosine {cos:.6f}", flush=True)
    return results


def ratios(results, rows, small_rows):
    """{name: (value, description)} of the issue's ratios among `results`."""
    out = {
        "rss": (
            results["ember"]["rss"] / results["small"]["rss"],
            f"peak RSS {rows:,} / {small_rows:,} rows",
        )
    }
    if "st" in results:
        out["st"] = (
            rate(results["ember"]) / rate(results["st"]),
            "ember / sentence-transformers rows/s",
        )
    if "ray" in results:
        out["ray"] = (
            rate(results["ray"]) / rate(results["ember"]),
            "Ray (2 actors) / one process rows/s",
        )
    return out


def add_arguments(ap):
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--small-rows", type=int, default=10_000)
    ap.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 in ember's cache")
    ap.add_argument(
        "--st-python",
        default=sys.executable,
        help="the Python that runs sentence-transformers (default: this one)",
    )
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--skip-st", action="store_true")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    args = ap.parse_args()
    from ember.hub import resolve

    model = os.path.abspath(resolve(args.model))
    with tempfile.TemporaryDirectory(prefix="ember-corpus-bench-") as tmp:
        results = contenders(args, model, tmp)
    targets = {"rss": "target <= 1.10", "st": "target >= 1.0", "ray": "target >= 0.80"}
    for key, (value, what) in ratios(results, args.rows, args.small_rows).items():
        print(f"{what}: {value:.3f}x  ({targets[key]})")


if __name__ == "__main__":
    main()
