"""all-MiniLM-L6-v2 sentence embeddings: ember (cpu, wgpu) next to PyTorch + transformers.

    python benchmarks/minilm.py [--sentences 512] [--repeats 3] [--skip-wgpu] [--no-browser]

Each engine runs in a fresh subprocess, so every figure includes what that engine costs
a real program:
  cold start   process start -> first embedding (imports, weights, tokenizer, one text)
  throughput   sentences/s encoding the corpus in batches of 64, after one warm-up pass;
               both sides sort texts by length first, as sentence-transformers does
  peak RSS     VmHWM from /proc/self/status at the end of the subprocess
The PyTorch side reproduces sentence-transformers' pipeline (tokenizer with padding to
the batch's longest text, mean pooling with the mask, L2 normalization).
The browser row (--no-browser leaves it out) opens the embedding demo (web/static/embed.html,
the bundle from `make web`) in a fresh Chromium with --enable-unsafe-webgpu:
  page open -> first embedding   navigation start -> the demo's first sentence embedded
                                 (Pyodide, ember's wheel, the WebGPU device, the weights
                                 downloaded from the local server and uploaded, one text)
  sentences/s                    the first 64 texts of the corpus in one batch of 64,
                                 read back, timed in the page (one pass by default:
                                 SwiftShader, the CPU's WebGPU, is slow)
and compares both with ember wgpu and ember cpu from the same run. No Chromium, no
playwright or no bundle: the row is skipped with the reason.
--engines picks the rows instead, as engine:device pairs: `--engines
ember:cuda,ember:wgpu,torch:cuda` on a GPU machine (torch then runs transformers on that
GPU, and every ember row is also given as a ratio to the torch row); --json ends with one
JSON line of the figures (benchmarks/gpu_check.py reads it).
Figures, not pass/fail: on a shared machine compare the ratios, measured in one run.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 64

_SUBJECTS = [
    "The cat",
    "A young engineer",
    "Our team",
    "The old bridge",
    "My neighbour's dog",
    "The government",
    "A small startup",
    "The orchestra",
    "This recipe",
    "The storm",
]
_VERBS = [
    "quietly crossed",
    "announced",
    "repaired",
    "was photographed near",
    "celebrated",
    "refused to discuss",
    "slowly improved",
    "is expected to reach",
    "painted",
    "ignored",
]
_OBJECTS = [
    "the river",
    "a new product line",
    "the results of the election",
    "the city centre",
    "an unexpected message from abroad",
    "the final chapter of the book",
    "the noisy machines in the basement",
    "a record number of visitors",
    "the long-awaited agreement on climate policy",
    "dinner",
]
_TAILS = [
    "",
    " yesterday",
    " after a long delay",
    " despite the heavy rain and strong winds",
    ", according to several people who were there at the time",
    " for the first time",
    " while everyone else was asleep",
    " on Tuesday morning",
]


def corpus(n, seed=0):
    rng = random.Random(seed)
    return [
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}{rng.choice(_TAILS)}."
        for _ in range(n)
    ]


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


# --- workers (run in their own process) ------------------------------------------------------------
def worker_ember(model_dir, device, texts, repeats):
    from ember.pipelines import SentenceEmbedder

    emb = SentenceEmbedder.from_pretrained(model_dir, device=device)
    emb.encode([texts[0]]).tolist()
    first = time.time()
    emb.encode(texts, batch_size=BATCH).tolist()  # warm-up (kernels, buffer pools)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        emb.encode(texts, batch_size=BATCH).tolist()
        best = min(best, time.perf_counter() - t)
    return first, best


def worker_torch(model_dir, device, texts, repeats):
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir).eval().to(device)

    def encode(batch_texts):
        order = sorted(range(len(batch_texts)), key=lambda i: -len(batch_texts[i]))
        out = [None] * len(batch_texts)
        with torch.inference_mode():
            for s in range(0, len(order), BATCH):
                idx = order[s : s + BATCH]
                enc = tok(
                    [batch_texts[i] for i in idx],
                    padding=True,
                    truncation=True,
                    max_length=256,
                    return_tensors="pt",
                ).to(device)
                h = model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
                v = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)
                for j, i in enumerate(idx):
                    out[i] = v[j]
        return torch.stack(out)

    encode([texts[0]]).tolist()
    first = time.time()
    encode(texts).tolist()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        encode(texts).tolist()
        best = min(best, time.perf_counter() - t)
    return first, best


def threads_used(engine):
    """How the engine ran on this machine's cores, in words (printed under the table)."""
    if engine == "torch":
        import torch

        return f"{torch.get_num_threads()} intra-op threads"
    from ember.backends import row_parallel

    return (
        f"{row_parallel.workers()} threads for the work around GEMMs, "
        f"OPENBLAS_THREAD_TIMEOUT={os.environ.get('OPENBLAS_THREAD_TIMEOUT', 'unset')}"
    )


def run_worker(args):
    texts = corpus(args.sentences)
    fn = worker_torch if args.worker == "torch" else worker_ember
    first, seconds = fn(args.model, args.device, texts, args.repeats)
    print(
        json.dumps(
            {
                "first_embedding_at": first,
                "seconds": seconds,
                "n": len(texts),
                "peak_rss_mb": peak_rss_mb(),
                "threads": threads_used(args.worker),
            }
        )
    )


# --- the browser demo ------------------------------------------------------------------------------
MODEL_NAME = "all-MiniLM-L6-v2"


def measure_browser(n, passes):
    """The embedding demo page in Chromium: {"first_s", "per_s", ...}, or {"skipped": why}
    / {"error": what} (a benchmark reports, it does not fail)."""
    sys.path.insert(0, HERE)
    from browser_common import BrowserUnavailable, open_browser

    texts = json.dumps(json.dumps(corpus(n)))
    try:
        with open_browser() as session:
            if not session.has_model(MODEL_NAME):
                return {
                    "skipped": f"the web bundle has no {MODEL_NAME} (make models, then make web)"
                }
            page = session.page("embed.html")
            t0 = time.perf_counter()
            page.boot()
            loaded = page.evaluate("() => window.demoReady")
            wall = time.perf_counter() - t0
            runs = [
                json.loads(
                    page.run(
                        "from ember.web import demo_embed\n"
                        f"demo_embed.encode_timed({texts}, {BATCH})"
                    )
                )
                for _ in range(passes)
            ]
            return {
                "first_s": loaded["first_embedding_ms"] / 1000,
                "wall_s": wall,
                "boot": page.info["timings_ms"],
                "model": loaded["seconds"],
                "describe": session.describe(page.info),
                "runs": runs,
                "per_s": runs[-1]["n"] / runs[-1]["seconds"],
            }
    except BrowserUnavailable as exc:
        return {"skipped": str(exc)}
    except Exception as exc:  # a page that failed to load or run: say so, keep the figures
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"}


def report_browser(r, results, n):
    print(f"\nbrowser: the embedding demo page (embed.html) on WebGPU, {n} texts")
    if "skipped" in r or "error" in r:
        print(f"  skipped: {r.get('skipped') or r.get('error')}")
        return
    b, m = r["boot"], r["model"]
    print(f"  Chromium: {r['describe']}")
    print(
        f"  page open -> first embedding {r['first_s']:8.2f} s  (playwright's wall "
        f"{r['wall_s']:.2f} s)"
    )
    print(
        f"    worker {b['total'] / 1000:.2f} s: Pyodide {b['pyodide'] / 1000:.2f} s, ember wheel "
        f"+ import {b['ember_import'] / 1000:.2f} s, device {b['device'] / 1000:.2f} s; model "
        f"download {m['download']:.2f} s, load {m['load']:.2f} s, first sentence "
        f"{m['warm_up']:.2f} s"
    )
    passes = ", ".join(
        f"{x['seconds']:.2f} s ({x['pipelines_compiled']} kernels compiled)" for x in r["runs"]
    )
    print(
        f"  sentences/s at batch {BATCH}      {r['per_s']:8.2f}    (timed pass"
        f"{'es' if len(r['runs']) > 1 else ''}: {passes}; the last one counts)"
    )
    for label in [k for k in results if k.startswith("ember wgpu")] + ["ember cpu"]:
        e = results.get(label, {})
        if "cold_s" in e:
            print(
                f"  page / {label + ':':<24} first embedding {r['first_s'] / e['cold_s']:6.2f}x, "
                f"sentences/s {r['per_s'] / e['per_s']:6.3f}x"
            )


# --- the parent -----------------------------------------------------------------------------------
def measure(engine, device, model_dir, n, repeats):
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        engine,
        "--device",
        device,
        "--model",
        model_dir,
        "--sentences",
        str(n),
        "--repeats",
        str(repeats),
    ]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    r = json.loads(done.stdout.strip().splitlines()[-1])
    # "first_embedding_at" is taken after the one-text call, before the warm-up pass.
    return {
        "cold_s": r["first_embedding_at"] - start,
        "per_s": r["n"] / r["seconds"],
        "rss_mb": r["peak_rss_mb"],
        "threads": r["threads"],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3, help="timed passes per process")
    p.add_argument("--rounds", type=int, default=2, help="fresh processes per engine")
    p.add_argument("--model", default=None, help="model dir (default: ember's cached MiniLM)")
    p.add_argument(
        "--wgpu-sentences",
        type=int,
        default=128,
        help="corpus size for wgpu (software adapters like lavapipe are slow)",
    )
    p.add_argument("--skip-wgpu", action="store_true")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument(
        "--engines",
        default=None,
        help="rows as engine:device pairs, e.g. ember:cuda,ember:wgpu,torch:cuda "
        "(default: ember:cpu, torch:cpu, ember:wgpu, less the --skip-* ones)",
    )
    p.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    p.add_argument(
        "--browser",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the embedding demo page in Chromium on WebGPU (default: on)",
    )
    p.add_argument(
        "--browser-passes",
        type=int,
        default=1,
        help="timed batch-64 passes in the page; the last one counts",
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.model is None:
        from ember.hub import fetch_default_model

        args.model = fetch_default_model(log=lambda msg: None)
    if args.worker:
        return run_worker(args)

    sys.path.insert(0, HERE)
    from common import machine_report

    for line in machine_report():
        print(line)
    lengths = [len(t.split()) for t in corpus(args.sentences)]
    print(
        f"all-MiniLM-L6-v2, {args.sentences} sentences ({min(lengths)}-{max(lengths)} words), "
        f"batch {BATCH}; best of {args.rounds} alternating rounds, each engine in a fresh "
        f"process per round with {args.repeats} timed passes"
    )
    rows = [("ember cpu", "ember", "cpu")]
    if not args.skip_torch:
        rows.append(("torch cpu (transformers)", "torch", "cpu"))
    if not args.skip_wgpu:
        rows.append(
            (f"ember wgpu ({min(args.sentences, args.wgpu_sentences)} texts)", "ember", "wgpu")
        )
    if args.engines:
        rows = engine_rows(p, args)
    results = {}
    paired = []  # per round: (ember/torch cold start, throughput) from the same round
    # Rounds alternate the engines (and swap who goes first), and each figure is the best
    # over the rounds, so a burst of load from other processes does not land on one
    # engine only; the paired ratios compare the two engines round by round.
    for round_no in range(args.rounds):
        this_round = {}
        order = rows if round_no % 2 == 0 else rows[1::-1] + rows[2:]
        for label, engine, device in order:
            n, repeats = args.sentences, args.repeats
            if device == "wgpu":
                if round_no:
                    continue  # one round: a software adapter takes minutes
                n, repeats = min(n, args.wgpu_sentences), 1
            r = measure(engine, device, args.model, n, repeats)
            if args.json:  # each engine at once too, for a caller that may stop the run early
                print(json.dumps({"progress": {"label": label, "result": r}}), flush=True)
            this_round[label] = r
            best = results.get(label)
            if best is None or "error" in best:
                results[label] = r
            elif "error" not in r:
                results[label] = {
                    "cold_s": min(best["cold_s"], r["cold_s"]),
                    "per_s": max(best["per_s"], r["per_s"]),
                    "rss_mb": min(best["rss_mb"], r["rss_mb"]),
                    "threads": r["threads"],
                }
        e, t = this_round.get("ember cpu", {}), this_round.get("torch cpu (transformers)", {})
        if "cold_s" in e and "cold_s" in t:
            paired.append((e["cold_s"] / t["cold_s"], e["per_s"] / t["per_s"]))
    print(f"{'engine':<26}{'cold start':>12}{'sentences/s':>14}{'peak RSS':>12}")
    for label, _, _ in rows:
        r = results[label]
        if "error" in r:
            print(f"{label:<26}  unavailable: {r['error']}")
            continue
        print(f"{label:<26}{r['cold_s']:>10.2f} s{r['per_s']:>14.1f}{r['rss_mb']:>9.0f} MB")
    for label, _, device in rows:
        if device == "cpu" and "threads" in results[label]:
            print(f"  {label}: {results[label]['threads']}")
    if args.browser:
        n = min(args.sentences, BATCH)
        report_browser(measure_browser(n, max(1, args.browser_passes)), results, n)
    for line in machine_report()[:1]:
        print("after: " + line)
    if args.engines:
        report_against_torch(rows, results)
    if args.json:
        print(json.dumps({"sentences": args.sentences, "results": results}))
    e, t = results.get("ember cpu", {}), results.get("torch cpu (transformers)", {})
    if "cold_s" in e and "cold_s" in t:
        print(
            f"\nember cpu / torch cpu: cold start {e['cold_s'] / t['cold_s']:.3f}x (target <= 0.1), "
            f"peak RSS {e['rss_mb'] / t['rss_mb']:.3f}x (target <= 0.5), "
            f"throughput {e['per_s'] / t['per_s']:.2f}x (target >= 1.0)  [best of each]"
        )
    if paired:
        import statistics

        print(
            "paired per round: cold start "
            + ", ".join(f"{c:.3f}x" for c, _ in paired)
            + f" (median "
            f"{statistics.median(c for c, _ in paired):.3f}x); throughput "
            + ", ".join(f"{p:.2f}x" for _, p in paired)
            + f" (median {statistics.median(p for _, p in paired):.2f}x)"
        )


def engine_rows(parser, args):
    """The rows --engines names: [(label, engine, device)], labelled as the default rows."""
    rows = []
    for item in args.engines.split(","):
        engine, _, device = item.strip().partition(":")
        if engine not in ("ember", "torch") or not device:
            parser.error(f"--engines: expected ember:DEVICE or torch:DEVICE, got {item!r}")
        if engine == "torch":
            rows.append((f"torch {device} (transformers)", engine, device))
        elif device == "wgpu":
            rows.append(
                (f"ember wgpu ({min(args.sentences, args.wgpu_sentences)} texts)", engine, device)
            )
        else:
            rows.append((f"ember {device}", engine, device))
    return rows


def report_against_torch(rows, results):
    """Every ember row as a ratio to the (first) torch row of --engines."""
    peer = next((label for label, engine, _ in rows if engine == "torch"), None)
    t = results.get(peer, {})
    if "cold_s" not in t:
        return
    for label, engine, _ in rows:
        e = results.get(label, {})
        if engine == "ember" and "cold_s" in e:
            e["vs_torch"] = {
                "cold_start": e["cold_s"] / t["cold_s"],
                "throughput": e["per_s"] / t["per_s"],
                "peak_rss": e["rss_mb"] / t["rss_mb"],
            }
            print(
                f"{label} / {peer}: cold start {e['vs_torch']['cold_start']:.3f}x, "
                f"throughput {e['vs_torch']['throughput']:.2f}x, "
                f"peak RSS {e['vs_torch']['peak_rss']:.3f}x"
            )


if __name__ == "__main__":
    main()
