"""Output formats of a corpus job, the files each one writes, and what an existing file
holds (to say so when it is of another format than its name)."""

import os

from .errors import CorpusError

OUTPUT_FORMATS = (".parquet", ".npy", ".jsonl")
_MAGIC = ((b"PAR1", ".parquet"), (b"\x93NUMPY", ".npy"), (b"{", ".jsonl"))


def output_format(path):
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in OUTPUT_FORMATS:
        raise CorpusError(
            f"{path}: unknown output format {ext or '(no extension)'!r}; "
            f"ember writes {', '.join(OUTPUT_FORMATS)}",
            path=str(path),
        )
    return ext


def rows_sidecar(npy_path):
    """The ids and texts beside a `.npy` of vectors: `NAME.rows.jsonl`, one
    {"id", "text"} object per line, in the order of the vectors."""
    return os.path.splitext(os.fspath(npy_path))[0] + ".rows.jsonl"


def output_files(path):
    """Every file the output `path` consists of."""
    files = [os.fspath(path)]
    if output_format(path) == ".npy":
        files.append(rows_sidecar(path))
    return files


def sniff(path):
    """The format an existing file's first bytes show, or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None
    for magic, ext in _MAGIC:
        if head.startswith(magic):
            return ext
    return None
