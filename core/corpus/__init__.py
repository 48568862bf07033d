"""Embedding a corpus from files: streaming readers, resumable part files, the final
index (parquet, npy with a rows sidecar, or JSON lines) and exact top-k search over it.

    from ember.corpus import embed_corpus
    embed_corpus(["docs.jsonl"], "docs.npy", embedder)

See docs/corpus.md for the command line (`ember embed --input`, `ember search`).
"""

from .errors import BadRow, CorpusError
from .job import CorpusJob, embed_corpus

__all__ = ["BadRow", "CorpusError", "CorpusJob", "embed_corpus"]
