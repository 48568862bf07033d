"""Exact cosine top-k over a written index, read in chunks: memory holds one chunk of
vectors and the k best rows, whatever the index size.

An index is what a corpus job writes: `.npy` (+ NAME.rows.jsonl), `.jsonl` or `.parquet`.
"""

import itertools
import json
import os

import numpy as np

from .arrow import parquet
from .errors import CorpusError
from .formats import output_format, rows_sidecar

CHUNK_ROWS = 8192


def index_chunks(path, chunk_rows=CHUNK_ROWS):
    """(ids, texts, float32 vectors (n, dim)) chunks of the index at `path`, in order."""
    fmt = output_format(path)
    if not os.path.isfile(path):
        raise CorpusError(f"{path}: no such index", path=str(path))
    return {".npy": _npy_chunks, ".jsonl": _jsonl_chunks, ".parquet": _parquet_chunks}[fmt](
        path, chunk_rows
    )


def _npy_chunks(path, chunk_rows):
    try:
        vectors = np.load(path, mmap_mode="r")
    except ValueError as exc:
        raise CorpusError(f"{path}: not a .npy file ({exc})", path=str(path)) from None
    if vectors.ndim != 2:
        raise CorpusError(
            f"{path}: holds an array of shape {list(vectors.shape)}, not (rows, dim) vectors",
            path=str(path),
        )
    sidecar = rows_sidecar(path)
    if not os.path.isfile(sidecar):
        raise CorpusError(f"{path}: its ids and texts ({sidecar}) are missing", path=sidecar)
    with open(sidecar, encoding="utf-8") as fh:
        start = 0
        while True:
            lines = list(itertools.islice(fh, chunk_rows))
            if not lines:
                break
            rows = _json_rows(sidecar, start, lines)
            chunk = np.asarray(vectors[start : start + len(rows)], dtype=np.float32)
            if chunk.shape[0] != len(rows):
                raise CorpusError(
                    f"{sidecar} has more rows than {path} has vectors ({vectors.shape[0]})",
                    path=sidecar,
                )
            yield [r["id"] for r in rows], [r["text"] for r in rows], chunk
            start += len(rows)
    if start != vectors.shape[0]:
        raise CorpusError(
            f"{sidecar} has {start} rows, {path} {vectors.shape[0]} vectors", path=sidecar
        )


def _json_rows(path, start, lines):
    rows = []
    for offset, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise CorpusError(
                f"{path} line {start + offset + 1}: not JSON ({exc.msg})", path=str(path)
            ) from None
    return rows


def _jsonl_chunks(path, chunk_rows):
    with open(path, encoding="utf-8") as fh:
        start = 0
        while True:
            lines = list(itertools.islice(fh, chunk_rows))
            if not lines:
                return
            rows = _json_rows(path, start, lines)
            try:
                vectors = np.asarray([r["vector"] for r in rows], dtype=np.float32)
            except (KeyError, ValueError, TypeError):
                raise CorpusError(
                    f"{path} lines {start + 1}-{start + len(rows)}: not rows "
                    "of {id, text, vector} of one width",
                    path=str(path),
                ) from None
            yield [r.get("id") for r in rows], [r.get("text") for r in rows], vectors
            start += len(rows)


def _parquet_chunks(path, chunk_rows):
    file = parquet().ParquetFile(path)
    names = file.schema_arrow.names
    if "vector" not in names:
        raise CorpusError(
            f"{path}: no 'vector' column (columns: {', '.join(names)})", path=str(path)
        )
    columns = [c for c in ("id", "text", "vector") if c in names]
    for batch in file.iter_batches(batch_size=chunk_rows, columns=columns):
        table = dict(zip(columns, batch.columns, strict=True))
        vec = table["vector"]
        vectors = vec.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        vectors = vectors.reshape(len(batch), -1)
        n = len(batch)
        ids = table["id"].to_pylist() if "id" in table else [None] * n
        texts = table["text"].to_pylist() if "text" in table else [None] * n
        yield ids, texts, vectors


def top_k(query, chunks, k=10):
    """The k rows nearest to `query` by cosine: [(score, id, text)], best first (ties in
    index order)."""
    query = np.asarray(query, dtype=np.float32).reshape(-1)
    query = query / max(float(np.linalg.norm(query)), 1e-12)
    best_scores = np.zeros(0, np.float32)
    best_pos = np.zeros(0, np.int64)
    best_rows = []
    seen = 0
    for ids, texts, vectors in chunks:
        if vectors.shape[1] != query.shape[0]:
            raise CorpusError(
                f"the index holds {vectors.shape[1]}-wide vectors, the query's "
                f"model makes {query.shape[0]}-wide ones (use the index's model)"
            )
        norms = np.linalg.norm(vectors, axis=1)
        scores = (vectors @ query) / np.maximum(norms, 1e-12)
        take = np.argsort(-scores, kind="stable")[:k]
        scores = np.concatenate([best_scores, scores[take]])
        pos = np.concatenate([best_pos, take + seen])
        rows = best_rows + [(ids[i], texts[i]) for i in take]
        keep = np.lexsort((pos, -scores))[:k]
        best_scores, best_pos = scores[keep], pos[keep]
        best_rows = [rows[i] for i in keep]
        seen += vectors.shape[0]
    return [(float(s), r[0], r[1]) for s, r in zip(best_scores, best_rows, strict=True)]
