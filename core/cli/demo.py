"""`ember demo` (what `make demo` runs): semantic search with all-MiniLM-L6-v2 on the best
device, printing the device, the timings and the ranked sentences."""

import sys
import time

from .common import add_device_argument, load_embedder, open_device, rank

SENTENCES = [
    "The cat curled up on the warm windowsill and fell asleep.",
    "Regular vet check-ups keep pets healthy and happy.",
    "The stock market fell sharply after the interest rate decision.",
    "She baked a loaf of sourdough bread with a crispy crust.",
    "A new species of frog was discovered in the rainforest.",
    "The football team won the championship in extra time.",
    "GPUs run thousands of small programs in parallel.",
    "Dogs need daily walks and a balanced diet.",
    "The museum opened an exhibition of impressionist paintings.",
    "Heavy rain is expected across the region this weekend.",
    "Python is a popular language for machine learning.",
    "Feed your kitten small meals several times a day.",
]
QUERY = "How do I take care of my cat?"


def add_parser(subparsers):
    p = subparsers.add_parser(
        "demo",
        help="semantic-search demo on the default model",
        description=__doc__.split("\n\n")[0],
    )
    add_device_argument(p)
    p.add_argument("--model", default=None, help="model directory or hub id")
    p.add_argument("--query", default=QUERY, help=f"the search query (default: {QUERY!r})")
    p.set_defaults(func=run)
    return p


def semantic_search(query=QUERY, sentences=SENTENCES, device="best", model=None):
    """Rank `sentences` against `query`: returns (device, timings, [(score, sentence)])."""
    start = time.perf_counter()
    dev = open_device(device)
    opened = time.perf_counter() - start
    embedder = load_embedder(model, dev)
    vectors = embedder.encode([query] + list(sentences))
    timings = {
        "device": opened,
        "load": embedder.timings["load"],
        "tokenize": embedder.timings["tokenize"],
        "embed": embedder.timings["embed"],
    }
    scores = embedder.similarity(
        vectors.narrow(0, 0, 1), vectors.narrow(0, 1, len(sentences))
    ).tolist()[0]
    return dev, timings, [(s, sentences[i]) for i, s in rank(scores)]


def describe(dev):
    """' (adapter name)' for a GPU device, ' (numpy)' for the CPU."""
    return f" ({dev.backend.info['name']})"


def run(args, out=None):
    out = out or sys.stdout
    dev, timings, results = semantic_search(args.query, device=args.device, model=args.model)
    out.write(f"ember semantic search — device: {dev}{describe(dev)}\n")
    out.write(
        "timings: "
        + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in timings.items())
        + f" ({len(results) + 1} texts)\n"
    )
    out.write(f"query: {args.query}\n")
    for score, sentence in results:
        out.write(f"  {score:6.3f}  {sentence}\n")
    return 0
