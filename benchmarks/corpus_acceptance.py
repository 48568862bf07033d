"""Issue 17's acceptance on a generated corpus of 100,000 rows, for a maintainer to rerun
(minutes per 100,000-row run on 2 cores, so not part of `make test`):

    python benchmarks/corpus_acceptance.py [--rows 100000] [--small-rows 10000] [--model DIR]
                                           [--st-python PY] [--skip-ray] [--skip-st]

One heavy job at a time, on the rows of benchmarks/corpus.py (its generator: short
sentences of 7-31 tokens; 100,000 rows hold 8,000 distinct texts):
  1. corpus.py's contenders: `ember embed` on --small-rows and on --rows rows (.npy), the
     same job on a local Ray with 2 actors, sentence-transformers' `encode`
  2. `ember embed` on --rows rows killed with SIGKILL once half the rows are committed,
     then the same command again
  3. each text alone: every distinct text embedded in batches of texts of one token count
     (no padding, no mask: no row can depend on another), and every row of the
     uninterrupted output of 1 compared with its text's vector; then --alone-sample of
     those texts (the shortest and longest of each token count, then a seeded random
     choice) embedded truly alone, a batch of one, against both (a batch of one for all
     8,000 texts costs more than the rest of this script on a busy 2-core machine)
Prints each figure, then a PASS/FAIL (or SKIP, saying why) line per criterion; exits 1
when one fails.
"""

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import threadpoolctl

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus as bench  # noqa: E402 (benchmarks/corpus.py: the contenders and the rows)

MIN_COSINE = 0.99999
RSS_GROWTH = 1.10
ST_RATIO = 1.0
RAY_RATIO = 0.80


def committed_rows(out):
    from ember.corpus.parts import MANIFEST, parts_dir

    try:
        with open(os.path.join(parts_dir(out), MANIFEST)) as fh:
            return sum(p["rows"] for p in json.load(fh)["parts"])
    except (OSError, ValueError, KeyError):
        return 0


def killed_and_rerun(model, src, out, rows):
    """SIGKILL `ember embed` once half the rows are committed, rerun it: a dict of facts."""
    proc = subprocess.Popen(
        bench.ember_command(model, src, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    while committed_rows(out) < rows // 2 and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    facts = {"killed": proc.returncode == -signal.SIGKILL, "committed": committed_rows(out)}
    facts["left_no_output"] = not os.path.exists(out)
    rerun = subprocess.run(bench.ember_command(model, src, out), capture_output=True, text=True)
    if rerun.returncode != 0:
        raise RuntimeError(f"the rerun failed: {rerun.stderr[-2000:]}")
    facts["resumed"] = f"resuming {out}: " in rerun.stderr
    facts["embedded_by_rerun"] = json.loads(rerun.stdout)["embedded"]
    return facts


def same_files(a, b):
    from ember.corpus.formats import rows_sidecar

    with open(a, "rb") as fa, open(b, "rb") as fb:
        vectors = fa.read() == fb.read()
    with open(rows_sidecar(a), "rb") as fa, open(rows_sidecar(b), "rb") as fb:
        rows = fa.read() == fb.read()
    return rows, vectors


def cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def unpadded_references(embedder, texts):
    """{text: vector} from batches of texts of one token count: no padding and no mask,
    and nothing in the model mixes the rows of a batch, so each row is computed as it is
    alone (up to the GEMM's rounding; `alone_sample` checks that with batches of one)."""
    by_length = collections.defaultdict(list)
    for text, ids in zip(texts, embedder.tokenize(texts), strict=True):
        by_length[len(ids)].append(text)
    out = {}
    for group in by_length.values():
        out.update(zip(group, embedder.encode(group, batch_size=32).numpy(), strict=True))
    return out, sorted(by_length)


def alone_sample(embedder, texts, size, seed=17):
    """{text: vector embedded alone} for `size` distinct texts: the shortest and the
    longest of each token count, then a seeded random choice."""
    by_length = collections.defaultdict(list)
    for text, ids in zip(texts, embedder.tokenize(texts), strict=True):
        by_length[len(ids)].append(text)
    chosen = dict.fromkeys(t for group in by_length.values() for t in (group[0], group[-1]))
    rest = [t for t in texts if t not in chosen]
    chosen.update(
        dict.fromkeys(random.Random(seed).sample(rest, max(0, min(size - len(chosen), len(rest)))))
    )
    return {t: embedder.encode([t]).numpy()[0] for t in chosen}


def each_text_alone(model, out, sample_size):
    """Compare every row of the index `out` with its text's vector from unpadded batches,
    and those with batches of one on a sample: a dict of figures."""
    from ember.corpus.search import index_chunks
    from ember.pipelines import SentenceEmbedder

    embedder = SentenceEmbedder.from_pretrained(model, device="cpu")
    chunks = list(index_chunks(out))
    texts = list(dict.fromkeys(t for _, chunk_texts, _ in chunks for t in chunk_texts))
    with threadpoolctl.threadpool_limits(1):  # small GEMMs: one thread wastes no spinning
        refs, lengths = unpadded_references(embedder, texts)
        alone = alone_sample(embedder, texts, sample_size)
    rows = np.concatenate(
        [cosines(v, np.stack([refs[t] for t in chunk_texts])) for _, chunk_texts, v in chunks]
    )
    sampled = list(alone)
    ref_vs_alone = cosines(np.stack([refs[t] for t in sampled]), np.stack(list(alone.values())))
    direct = np.concatenate(
        [
            cosines(v[keep], np.stack([alone[chunk_texts[i]] for i in keep]))
            for _, chunk_texts, v in chunks
            for keep in [[i for i, t in enumerate(chunk_texts) if t in alone]]
            if keep
        ]
    )
    exact = sum(np.array_equal(refs[t], alone[t]) for t in sampled)
    return {
        "rows": rows.size,
        "distinct": len(texts),
        "lengths": (lengths[0], lengths[-1], len(lengths)),
        "rows_vs_refs": float(rows.min()),
        "sample": len(sampled),
        "refs_vs_alone": float(ref_vs_alone.min()),
        "refs_equal_alone_bits": int(exact),
        "sample_rows": direct.size,
        "rows_vs_alone": float(direct.min()),
    }


def verdict(name, ok, figure):
    word = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
    print(f"{word}  {name}: {figure}", flush=True)
    return ok is not False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bench.add_arguments(ap)
    ap.add_argument(
        "--alone-sample",
        type=int,
        default=512,
        help="distinct texts also embedded one at a time (default 512)",
    )
    args = ap.parse_args()
    from ember.hub import resolve

    model = os.path.abspath(resolve(args.model))
    with tempfile.TemporaryDirectory(prefix="ember-corpus-acceptance-") as tmp:
        results = bench.contenders(args, model, tmp)
        whole, big = os.path.join(tmp, "ember.npy"), os.path.join(tmp, "big.jsonl")
        killed = os.path.join(tmp, "killed.npy")
        t0 = time.perf_counter()
        kill = killed_and_rerun(model, big, killed, args.rows)
        kill["same_rows"], kill["same_vectors"] = same_files(killed, whole)
        print(
            f"killed at {kill['committed']:,} committed rows (SIGKILL: {kill['killed']}, "
            f"no output left: {kill['left_no_output']}); the rerun resumed: {kill['resumed']}, "
            f"embedded {kill['embedded_by_rerun']:,} rows; rows file identical: "
            f"{kill['same_rows']}, vectors file identical: {kill['same_vectors']}  "
            f"({time.perf_counter() - t0:.0f} s, load {bench.load():.2f})",
            flush=True,
        )
        t0 = time.perf_counter()
        alone = each_text_alone(model, whole, args.alone_sample)
        low, high, count = alone["lengths"]
        print(
            f"each text alone: the {alone['distinct']:,} distinct texts ({count} token counts, "
            f"{low}-{high}) embedded in unpadded batches of one token count; all "
            f"{alone['rows']:,} output rows against them: min cosine "
            f"{alone['rows_vs_refs']:.8f}\n  {alone['sample']} of those texts embedded alone "
            f"(batch of one): against the unpadded batches min cosine "
            f"{alone['refs_vs_alone']:.8f} ({alone['refs_equal_alone_bits']} bit-identical); "
            f"the {alone['sample_rows']:,} output rows of those texts against them: min cosine "
            f"{alone['rows_vs_alone']:.8f}  ({time.perf_counter() - t0:.0f} s, "
            f"load {bench.load():.2f})",
            flush=True,
        )
    ratios = bench.ratios(results, args.rows, args.small_rows)
    ok = [
        verdict(
            f"{args.rows:,} rows equal each text embedded alone (cosine >= {MIN_COSINE})",
            alone["rows"] == args.rows
            and min(alone["rows_vs_refs"], alone["refs_vs_alone"], alone["rows_vs_alone"])
            >= MIN_COSINE,
            f"min cosine {alone['rows_vs_refs']:.8f} over all {alone['rows']:,} rows (against "
            f"unpadded batches), {alone['rows_vs_alone']:.8f} over the {alone['sample_rows']:,} "
            f"rows of {alone['sample']} texts embedded alone",
        ),
        verdict(
            f"peak RSS at {args.rows:,} rows within 10% of that at {args.small_rows:,}",
            bool(ratios["rss"][0] <= RSS_GROWTH),
            f"{results['ember']['rss']:.1f} / {results['small']['rss']:.1f} MB "
            f"= {ratios['rss'][0]:.3f}x",
        ),
        verdict(
            "killed with SIGKILL mid-way and rerun: the same rows and vectors",
            all(kill[k] for k in ("killed", "resumed", "same_rows", "same_vectors")),
            f"killed at {kill['committed']:,} of {args.rows:,} committed rows, rerun resumed: "
            f"{kill['resumed']}, rows file identical: {kill['same_rows']}, vectors file "
            f"identical: {kill['same_vectors']}",
        ),
    ]
    for key, target, name in (
        ("st", ST_RATIO, "ember one process >= 1.0x sentence-transformers' rows/s"),
        ("ray", RAY_RATIO, "Ray, 2 actors, within 20% of the one process's rows/s"),
    ):
        if key in ratios:
            ok.append(verdict(name, bool(ratios[key][0] >= target), f"{ratios[key][0]:.3f}x"))
        else:
            ok.append(verdict(name, None, "not run (see above)"))
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
