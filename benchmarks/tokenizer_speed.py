"""Tokenizer speed: ember's pure-Python tokenizer.json against the `tokenizers` package
(Rust) on the same file and text, in one process and interleaved rounds.

    .venv/bin/python benchmarks/tokenizer_speed.py [--model DIR]

Rows: a batch of 64 ordinary sentences (the MiniLM benchmark's kind of input), a 40 KB
single word ('the' * 13333: a BPE word whose merges once cost O(n^2)), and 8 KB of
prose. Figures and ratios, never a pass/fail.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from common import compare_times, machine_report, ms, paired_ratio, print_table

# The 64 sentences the tokenizer tests once timed (mixed scripts, emoji, numbers).
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Tokenizers turn text into numbers; models turn numbers into meaning.",
    "I can't believe it's not butter!",
    "café naïve Zürich résumé",
    "Mixed 中文 and English, 日本語 too! 123",
    "A short one.",
    "Another sentence about embeddings and search.",
    "What is the capital of France?",
] * 8
PROSE = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness, it was the epoch of belief. "
) * 60


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=None, help="a directory with tokenizer.json (default: the cached MiniLM)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    from ember.hub import default_model_dir
    from ember.tokenizers import Tokenizer

    path = os.path.join(args.model or default_model_dir(), "tokenizer.json")
    mine = Tokenizer.from_file(path)
    try:
        import tokenizers

        theirs = tokenizers.Tokenizer.from_file(path)
    except ImportError:
        theirs = None
    print("\n".join(machine_report()))
    cases = {"64 sentences": SENTENCES, "40 KB word": ["the" * 13333], "8 KB prose": [PROSE]}
    rows = []
    for name, texts in cases.items():
        # Both with warm word caches after the warm-up call: the steady state of a
        # server (a word of 256 characters or more is never cached by either).
        t = compare_times(
            {
                "ember": lambda texts=texts: mine.encode_batch(texts),
                "tokenizers": None
                if theirs is None
                else lambda texts=texts: theirs.encode_batch(texts),
            },
            repeats=args.rounds,
            warmup=1,
        )
        same = theirs is None or [e.ids for e in mine.encode_batch(texts)] == [
            e.ids for e in theirs.encode_batch(texts)
        ]
        ratio = paired_ratio(t.get("tokenizers"), t["ember"])
        rows.append(
            [
                name,
                ms(t["ember"].median),
                "-" if theirs is None else ms(t["tokenizers"].median),
                "-" if ratio is None else f"{ratio:.3f}x",
                "yes" if same else "NO",
            ]
        )
    print_table(["input", "ember", "tokenizers", "speed vs tokenizers", "same ids"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
