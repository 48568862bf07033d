"""Decode speed of two ember trees on one GGUF model, measured interleaved: A and B run as
separate processes in turns (A B B A, round after round), so a shared machine's load
weighs on both alike. Each run loads the model, warms up, then times a prompt and
`--decode` greedy steps; it also reports a hash of the generated ids and of every step's
logits, so the two trees are checked to compute the same bits.

    python benchmarks/llm_decode_ab.py --a /work/main/.venv/bin/python --b ./py
        [--gguf FILE] [--rounds 4] [--prompt 128] [--decode 32] [--threads 2] [--no-jit]

--a / --b are the Python commands importing each tree's ember (PYTHONPATH is cleared for
them: a worktree's ./py sets its own). --no-jit runs both with EMBER_JIT=0 (numpy alone),
where peak RSS is the figure to read. Figures, not pass/fail.
"""

import argparse
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import time


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def worker(path, n_prompt, n_decode):
    import ember
    import numpy as np
    from ember.models.gguf_llama import load_gguf_model
    from llm import prompt_ids  # this folder's: the ids every engine of llm.py gets

    t0 = time.perf_counter()
    model = load_gguf_model(path)
    load_s = time.perf_counter() - t0
    ids = np.array([prompt_ids(model.config.vocab_size, n_prompt)])

    def run(n_dec):
        cache = model.new_cache(1, n_prompt + n_dec + 1)
        digest = hashlib.sha256()
        t0 = time.perf_counter()
        logits = model(ids, cache=cache, last_only=True).numpy()
        t1 = time.perf_counter()
        digest.update(logits.tobytes())
        out = [int(logits[0, -1].argmax())]
        steps = []
        for _ in range(n_dec):
            s0 = time.perf_counter()
            logits = model([[out[-1]]], cache=cache, last_only=True).numpy()
            steps.append(time.perf_counter() - s0)
            digest.update(logits.tobytes())
            out.append(int(logits[0, -1].argmax()))
        return t1 - t0, steps, out, digest.hexdigest()

    run(4)
    prompt_s, steps, out, logits_hash = run(n_decode)
    try:
        from ember.backends.array_qmatmul import kernels_loaded

        kernels = "+".join(kernels_loaded()) or "numpy"
    except ImportError:  # an older tree: which of its kernels ran is not told
        kernels = "numba imported" if "numba" in sys.modules else "numpy or llvm"

    return {
        "ember": os.path.dirname(ember.__file__),
        "kernels": kernels,
        "load_s": load_s,
        "prompt_tok_s": n_prompt / prompt_s,
        "decode_tok_s": n_decode / sum(steps),
        "step_ms_median": statistics.median(steps) * 1e3,
        "ids_hash": hashlib.sha256(json.dumps(out).encode()).hexdigest()[:16],
        "logits_hash": logits_hash[:16],
        "peak_rss_mb": peak_rss_mb(),
    }


def spawn(command, args, env):
    cmd = shlex.split(command) + [os.path.abspath(__file__), "--worker", *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()
        raise SystemExit(f"{command}: {tail[-1] if tail else out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="python command importing tree A's ember")
    ap.add_argument("--b", required=True, help="python command importing tree B's ember")
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-jit", action="store_true", help="EMBER_JIT=0 for both")
    args = ap.parse_args()
    if args.gguf is None:
        from ember import packaged

        args.gguf = packaged.file("smollm2-135m-instruct")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if args.threads:
        n = str(args.threads)
        env.update(EMBER_CPU_THREADS=n, OPENBLAS_NUM_THREADS=n, OMP_NUM_THREADS=n)
    if args.no_jit:
        env["EMBER_JIT"] = "0"
    runs = {"A": [], "B": []}
    for r in range(args.rounds):
        for label in ("A", "B") if r % 2 == 0 else ("B", "A"):
            res = spawn(getattr(args, label.lower()), (args.gguf, args.prompt, args.decode), env)
            runs[label].append(res)
            print(
                f"round {r} {label}: decode {res['decode_tok_s']:6.1f} tok/s (median step "
                f"{res['step_ms_median']:.2f} ms), prompt {res['prompt_tok_s']:6.1f} tok/s, "
                f"peak RSS {res['peak_rss_mb']:.1f} MiB, ids {res['ids_hash']}, "
                f"logits {res['logits_hash']}  [{res['ember']}, {res['kernels']}]",
                flush=True,
            )
    size = os.path.getsize(args.gguf) / 2**20
    for label, rs in runs.items():
        dec = [r["decode_tok_s"] for r in rs]
        rss = [r["peak_rss_mb"] for r in rs]
        print(
            f"{label}: decode best {max(dec):.1f} median {statistics.median(dec):.1f} tok/s; "
            f"peak RSS min {min(rss):.1f} MiB ({min(rss) / size:.2f}x the {size:.1f} MiB file)"
        )
    best = max(r["decode_tok_s"] for r in runs["B"]) / max(r["decode_tok_s"] for r in runs["A"])
    med = statistics.median(r["decode_tok_s"] for r in runs["B"]) / statistics.median(
        r["decode_tok_s"] for r in runs["A"]
    )
    same = {(r["ids_hash"], r["logits_hash"]) for rs in runs.values() for r in rs}
    print(f"B/A decode: best {best:.3f}x, median {med:.3f}x")
    print(f"ids and logits identical across every run: {'yes' if len(same) == 1 else 'NO'}")


if __name__ == "__main__":
    main()
