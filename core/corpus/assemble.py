"""The final output, streamed part by part from a finished journal into its format, each
file under a temporary name renamed into place (memory: one part at a time).

    .npy      (rows, dim) float32, and NAME.rows.jsonl with {"id", "text"} per row
    .jsonl    {"id", "text", "vector"} per row
    .parquet  columns id (string), text (string), vector (fixed-size list of float32);
              one row group per part
"""

import json

import numpy as np

from ..owned import atomic_file
from . import owned_files
from .arrow import parquet, pyarrow
from .formats import rows_sidecar


def assemble(parts, fmt, dim, facts):
    """Write `parts.output` (and its sidecar) from every committed part, each file marked
    as ember's with `facts` before it is renamed into place."""
    {".npy": _npy, ".jsonl": _jsonl, ".parquet": _parquet}[fmt](parts, dim, facts)


def _npy(parts, dim, facts):
    rows = parts.rows_done
    with atomic_file(parts.output) as fh:
        np.lib.format.write_array_header_2_0(
            fh, {"descr": np.dtype(np.float32).str, "fortran_order": False, "shape": (rows, dim)}
        )
        for entry in parts.entries:
            vectors, _ = parts.read(entry)
            fh.write(np.ascontiguousarray(vectors).tobytes())
        owned_files.mark(parts.output, fh, **facts)
    sidecar = rows_sidecar(parts.output)
    with atomic_file(sidecar) as fh:
        for entry in parts.entries:
            with open(parts.part_paths(entry)[1], "rb") as part:
                fh.write(part.read())
        owned_files.mark(sidecar, fh, **facts)


def _jsonl(parts, dim, facts):
    with atomic_file(parts.output, "w") as fh:
        for entry in parts.entries:
            vectors, rows = parts.read(entry)
            for (row_id, text), vector in zip(rows, vectors.tolist(), strict=True):
                fh.write(
                    json.dumps({"id": row_id, "text": text, "vector": vector}, ensure_ascii=False)
                    + "\n"
                )
        owned_files.mark(parts.output, fh, **facts)


def parquet_schema(dim):
    pa = pyarrow()
    return pa.schema(
        [("id", pa.string()), ("text", pa.string()), ("vector", pa.list_(pa.float32(), dim))]
    )


def _parquet(parts, dim, facts):
    pa, pq = pyarrow(), parquet()
    schema = parquet_schema(dim)
    with atomic_file(parts.output) as fh:
        with pq.ParquetWriter(fh, schema) as writer:
            for entry in parts.entries:
                vectors, rows = parts.read(entry)
                flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
                writer.write_table(
                    pa.table(
                        [
                            pa.array([r[0] for r in rows], pa.string()),
                            pa.array([r[1] for r in rows], pa.string()),
                            pa.FixedSizeListArray.from_arrays(flat, dim),
                        ],
                        schema=schema,
                    )
                )
        owned_files.mark(parts.output, fh, **facts)
