"""`ember embed`: sentence embeddings, or ranking texts against a query.

    ember embed "a cat" "a dog"                  one vector per line
    ember embed --json "a cat"                   {"model", "device", "embeddings"}
    ember embed --query "pets" "a cat" "a car"   texts ranked by cosine similarity

Without TEXT arguments, texts are read from stdin, one per line.

    ember embed --input docs.jsonl --output docs.parquet     a corpus, resumable (docs/corpus.md)
    ember embed --input a.csv b.txt --output v.npy --ray auto   the same job on a Ray cluster
"""

import json
import sys

from .common import add_device_argument, load_embedder, open_device, rank


def add_parser(subparsers):
    p = subparsers.add_parser(
        "embed",
        help="embed texts (or rank them against --query)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts (default: stdin lines)")
    p.add_argument(
        "--model",
        default=None,
        help="model directory or hub id (default: all-MiniLM-L6-v2 from ember's cache)",
    )
    add_device_argument(p)
    p.add_argument("--query", default=None, help="rank the texts by similarity to this text")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="texts per batch, at most (default: SentenceEmbedder's, 256; long texts go "
        "in smaller batches)",
    )
    corpus = p.add_argument_group("a corpus from files (docs/corpus.md)")
    corpus.add_argument(
        "--input",
        nargs="+",
        metavar="FILE",
        help=".jsonl, .csv, .parquet or .txt (one text per line) files",
    )
    corpus.add_argument(
        "--output",
        metavar="FILE",
        help=".parquet, .npy (+ NAME.rows.jsonl) or .jsonl; a rerun resumes",
    )
    corpus.add_argument("--text-field", default="text", help="the text's field (default text)")
    corpus.add_argument(
        "--id-field",
        default=None,
        help="the id's field (default: FILE:LINE, or FILE:ROW for parquet)",
    )
    corpus.add_argument(
        "--window",
        type=int,
        default=1024,
        help="rows embedded together and committed as one part (default 1024)",
    )
    corpus.add_argument(
        "--skip-bad-rows", action="store_true", help="log rows that cannot be embedded and go on"
    )
    corpus.add_argument(
        "--force",
        action="store_true",
        help="replace an output ember did not write; discard a partial run "
        "of other inputs or options",
    )
    corpus.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help="run on Ray: local, auto, or a cluster address (needs ember[ray])",
    )
    corpus.add_argument(
        "--ray-actors", type=int, default=2, help="Ray actors, one model each (default 2)"
    )
    p.set_defaults(func=run)
    return p


def run(args, out=None):
    out = out or sys.stdout
    if args.batch_size is None:  # imported here: the parser stays light for --help
        from ..pipelines.sentence_embedder import BATCH_SIZE

        args.batch_size = BATCH_SIZE
    if args.input or args.output:
        from .embed_corpus import run_corpus

        return run_corpus(args, out)
    texts = list(args.texts)
    if not texts and not sys.stdin.isatty():
        texts = [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        print("ember embed: give at least one TEXT (or lines on stdin)", file=sys.stderr)
        return 2
    device = open_device(args.device)
    embedder = load_embedder(args.model, device)
    model_name = args.model or "all-MiniLM-L6-v2"
    if args.query is not None:
        vectors = embedder.encode([args.query] + texts, batch_size=args.batch_size)
        scores = embedder.similarity(vectors.narrow(0, 0, 1), vectors.narrow(0, 1, len(texts)))
        ranked = rank(scores.tolist()[0])
        if args.json:
            json.dump(
                {
                    "model": model_name,
                    "device": str(device),
                    "query": args.query,
                    "results": [{"text": texts[i], "score": s} for i, s in ranked],
                },
                out,
            )
            out.write("\n")
        else:
            for i, s in ranked:
                out.write(f"{s:.4f}  {texts[i]}\n")
        return 0
    vectors = embedder.encode(texts, batch_size=args.batch_size).tolist()
    if args.json:
        json.dump({"model": model_name, "device": str(device), "embeddings": vectors}, out)
        out.write("\n")
    else:
        for row in vectors:
            out.write(" ".join(f"{v:.6f}" for v in row) + "\n")
    return 0
