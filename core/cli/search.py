"""`ember search INDEX "query"`: the rows of an index written by `ember embed --input` nearest
to a query, by exact cosine similarity (read in chunks: memory bounded by the chunk).

    ember search docs.parquet "how do I reset my password" -k 5
    ember search docs.npy "pricing" --json
"""

import json
import sys

from .common import add_device_argument, load_embedder, open_device


def add_parser(subparsers):
    p = subparsers.add_parser(
        "search",
        help="nearest rows of an embedded corpus to a query",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("index", metavar="INDEX", help=".parquet, .npy or .jsonl from ember embed")
    p.add_argument("query", metavar="QUERY")
    p.add_argument("-k", type=int, default=10, help="how many rows (default 10)")
    p.add_argument(
        "--model",
        default=None,
        help="the model the index was embedded with (default all-MiniLM-L6-v2)",
    )
    add_device_argument(p, default="cpu")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p


def run(args, out=None):
    out = out or sys.stdout
    if args.k < 1:
        print(f"ember search: -k must be >= 1, got {args.k}", file=sys.stderr)
        return 2
    from ..corpus.search import index_chunks, top_k

    chunks = index_chunks(args.index)  # a missing or unknown index fails before the model loads
    embedder = load_embedder(args.model, open_device(args.device))
    query = embedder.encode([args.query]).numpy()[0]
    try:
        results = top_k(query, chunks, args.k)
    except OSError as exc:
        print(f"ember search: {exc.filename or args.index}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(
            {
                "index": args.index,
                "query": args.query,
                "results": [{"id": i, "text": t, "score": s} for s, i, t in results],
            },
            out,
        )
        out.write("\n")
    else:
        for score, row_id, text in results:
            out.write(f"{score:.4f}  {row_id}  {text}\n")
    return 0
