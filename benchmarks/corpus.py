"""Embedding a corpus from a file: `ember embed --input` in one process, the same job on a
local Ray with 2 actors, and sentence-transformers' `encode`, on the same generated rows.

    python benchmarks/corpus.py [--rows 100000] [--small-rows 10000] [--model DIR]
                                [--skip-ray] [--skip-st]

Each contender runs in a fresh subprocess on the same JSON-lines corpus (short sentences of
varied length, as in minilm.py):
  rows/s     rows / the job's own time (ember: reading, embedding, committing parts and
             assembling the .npy, from its --json summary, after the model loaded;
             sentence-transformers: model.encode(texts, batch_size=32) over the list)
  wall       process start -> exit
  peak RSS   ru_maxrss of the process (for Ray: the driver's; the actors are Ray's workers)
and ember once more on --small-rows rows, so that peak RSS can be compared across sizes.
Targets (issue 17): ember >= 1.0x sentence-transformers' rows/s; Ray at equal cores (2 actors
of 1 CPU against one process on 2 cores) within 20% of the single process; peak RSS at
--rows within 10% of that at --small-rows. Figures, not pass/fail.
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


def _measured(cmd):
    """(stdout, wall seconds, peak RSS in MB) of one subprocess (os.wait4 gives the
    child's own usage); raises on failure."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} failed: {err[-2000:]}")
    return out, wall, usage.ru_maxrss / 1024.0


def _ember(model, src, out, *extra):
    cmd = [
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
    stdout, wall, rss = _measured(cmd)
    summary = json.loads(stdout)
    return {"rows": summary["rows"], "seconds": summary["seconds"], "wall": wall, "rss": rss}


def _write_corpus(path, n):
    with open(path, "w") as fh:
        for i, text in enumerate(corpus(n, seed=7)):
            fh.write(json.dumps({"text": text, "n": i}) + "\n")


def _line(name, r):
    print(
        f"{name:<34} {r['rows']:>8,} rows  {r['rows'] / r['seconds']:>8.1f} rows/s  "
        f"wall {r['wall']:>7.1f} s  peak RSS {r['rss']:>7.1f} MB"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--small-rows", type=int, default=10_000)
    ap.add_argument("--model", default=None, help="default: all-MiniLM-L6-v2 in ember's cache")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--skip-st", action="store_true")
    args = ap.parse_args()
    from ember.hub import resolve

    model = os.path.abspath(resolve(args.model))
    results = {}
    with tempfile.TemporaryDirectory(prefix="ember-corpus-bench-") as tmp:
        big, small = os.path.join(tmp, "big.jsonl"), os.path.join(tmp, "small.jsonl")
        _write_corpus(big, args.rows)
        _write_corpus(small, args.small_rows)
        results["small"] = _ember(model, small, os.path.join(tmp, "small.npy"))
        _line(f"ember cpu, {args.small_rows:,} rows", results["small"])
        results["ember"] = _ember(model, big, os.path.join(tmp, "ember.npy"))
        _line("ember cpu, one process", results["ember"])
        if not args.skip_ray:
            try:
                results["ray"] = _ember(
                    model, big, os.path.join(tmp, "ray.npy"), "--ray", "local", "--ray-actors", "2"
                )
                _line("ember on local Ray, 2 actors", results["ray"])
            except RuntimeError as exc:
                print(f"ray: skipped ({str(exc).splitlines()[-1]})")
        if not args.skip_st:
            try:
                stdout, wall, rss = _measured(
                    [sys.executable, "-c", ST_SCRIPT, model, big, os.path.join(tmp, "st.npy")]
                )
                results["st"] = {**json.loads(stdout.splitlines()[-1]), "wall": wall, "rss": rss}
                _line("sentence-transformers encode", results["st"])
                ours = np.load(os.path.join(tmp, "ember.npy"))
                theirs = np.load(os.path.join(tmp, "st.npy"))
                cos = (ours * theirs).sum(1) / (
                    np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
                )
                print(f"ember vs sentence-transformers vectors: min cosine {cos.min():.6f}")
            except RuntimeError as exc:
                print(f"sentence-transformers: skipped ({str(exc).splitlines()[-1]})")
    rate = {k: r["rows"] / r["seconds"] for k, r in results.items()}
    print(
        f"peak RSS {args.rows:,} / {args.small_rows:,} rows: "
        f"{results['ember']['rss'] / results['small']['rss']:.3f}x  (target <= 1.10)"
    )
    if "st" in rate:
        print(
            f"ember / sentence-transformers rows/s: {rate['ember'] / rate['st']:.2f}x  "
            "(target >= 1.0)"
        )
    if "ray" in rate:
        print(
            f"Ray (2 actors) / one process rows/s: {rate['ray'] / rate['ember']:.2f}x  "
            f"(overhead {1 - rate['ray'] / rate['ember']:+.0%}, target <= 20%)"
        )


if __name__ == "__main__":
    main()
