"""Rows (id, text) streamed from corpus files, one row in memory at a time.

Formats by extension: `.txt` (one text per line), `.jsonl` (one JSON object per line),
`.csv` (a header row, then records) and `.parquet` (through pyarrow, in record batches).
Without an id field a row's id is `FILE:N`, the path as given and the 1-based line number
(txt, jsonl, csv: the line the record starts on) or row number (parquet).

A row that cannot be embedded (not UTF-8, not JSON, no text field, an empty text, a
ragged CSV record) raises BadRow naming the file, line and field; with `on_bad` set it
is handed to `on_bad(BadRow)` instead and the reading goes on.
"""

import csv
import json
import os

from .arrow import parquet
from .errors import BadRow, CorpusError

INPUT_FORMATS = (".txt", ".jsonl", ".csv", ".parquet")
PARQUET_BATCH_ROWS = 1024


def input_format(path):
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in INPUT_FORMATS:
        raise CorpusError(
            f"{path}: unknown input format {ext or '(no extension)'!r}; "
            f"ember reads {', '.join(INPUT_FORMATS)}",
            path=str(path),
        )
    return ext


def check_inputs(paths, text_field="text", id_field=None):
    """Fail before any work on a path that is missing or of an unknown format, or on field
    names a `.txt` input cannot have."""
    if not paths:
        raise CorpusError("no input files given")
    for path in paths:
        ext = input_format(path)
        if not os.path.isfile(path):
            raise CorpusError(f"{path}: no such input file", path=str(path))
        if ext == ".txt" and id_field is not None:
            raise CorpusError(
                f"{path}: a .txt input has no fields (one text per line); "
                "--id-field applies to .jsonl, .csv and .parquet inputs",
                path=str(path),
            )


def read_rows(paths, text_field="text", id_field=None, on_bad=None):
    """(id, text) pairs from every path in order."""
    for path in paths:
        reader = _READERS[input_format(path)]
        for row in reader(path, text_field, id_field):
            if isinstance(row, BadRow):
                if on_bad is None:
                    raise row
                on_bad(row)
            else:
                yield row


def count_rows(paths):
    """Records in the inputs (bad ones included), for a progress bar's total."""
    total = 0
    for path in paths:
        ext = input_format(path)
        if ext == ".parquet":
            total += parquet().ParquetFile(path).metadata.num_rows
        else:
            with open(path, "rb") as fh:
                total += sum(1 for _ in fh) - (ext == ".csv")
    return total


def _checked_text(path, line, value, field, unit="line"):
    """The text, or the BadRow saying why the value cannot be embedded."""
    if value is None:
        return BadRow(path, line, "the text is null", field, unit)
    if not isinstance(value, str):
        return BadRow(
            path, line, f"the text is a {type(value).__name__}, not a string", field, unit
        )
    if not value.strip():
        return BadRow(path, line, "the text is empty", field, unit)
    return value


def _decoded_lines(path):
    """(line number, text or BadRow) for each line, decoded strictly as UTF-8."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                yield (
                    number,
                    BadRow(
                        path,
                        number,
                        f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                    ),
                )


def _read_txt(path, text_field, id_field):
    for number, line in _decoded_lines(path):
        if isinstance(line, BadRow):
            yield line
            continue
        text = _checked_text(path, number, line, None)
        yield text if isinstance(text, BadRow) else (f"{path}:{number}", text)


def _read_jsonl(path, text_field, id_field):
    for number, line in _decoded_lines(path):
        if isinstance(line, BadRow):
            yield line
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield BadRow(path, number, f"not JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(record, dict):
            yield BadRow(path, number, f"a JSON {type(record).__name__}, not an object")
            continue
        yield _record_row(path, number, record, text_field, id_field)


def _record_row(path, number, record, text_field, id_field, unit="line"):
    if text_field not in record:
        return BadRow(
            path,
            number,
            f"no field {text_field!r} (fields: {', '.join(map(str, record)) or 'none'})",
            text_field,
            unit,
        )
    text = _checked_text(path, number, record[text_field], text_field, unit)
    if isinstance(text, BadRow):
        return text
    if id_field is None:
        return f"{path}:{number}", text
    if record.get(id_field) is None:
        return BadRow(path, number, f"no id in field {id_field!r}", id_field, unit)
    return str(record[id_field]), text


def _read_csv(path, text_field, id_field):
    lines = _decoded_lines(path)
    bad = []  # lines that are not UTF-8, reported once the reader is past them

    def texts():
        for _, line in lines:
            if isinstance(line, BadRow):
                bad.append(line)
                continue
            yield line + "\n"

    reader = csv.reader(texts())
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise CorpusError(
            f"{path} line 1: the CSV header cannot be read ({exc})", path=str(path)
        ) from None
    yield from bad
    bad.clear()
    if header is None:
        return
    for field in (text_field, id_field):
        if field is not None and field not in header:
            raise CorpusError(
                f"{path}: the CSV header has no column {field!r} (columns: {', '.join(header)})",
                path=str(path),
                field=field,
            )
    start = reader.line_num + 1
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            yield from bad
            bad.clear()
            yield BadRow(path, reader.line_num, f"not a CSV record ({exc})")
            start = reader.line_num + 1
            continue
        yield from bad
        bad.clear()
        if len(record) != len(header):
            yield BadRow(path, start, f"has {len(record)} fields, the header has {len(header)}")
        elif record:
            yield _record_row(
                path, start, dict(zip(header, record, strict=True)), text_field, id_field
            )
        start = reader.line_num + 1
    yield from bad


def _read_parquet(path, text_field, id_field):
    pq = parquet()
    try:
        file = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow's own error classes: ArrowInvalid, OSError
        raise CorpusError(f"{path}: not a readable parquet file ({exc})", path=str(path)) from None
    names = file.schema_arrow.names
    for field in (text_field, id_field):
        if field is not None and field not in names:
            raise CorpusError(
                f"{path}: the parquet file has no column {field!r} (columns: {', '.join(names)})",
                path=str(path),
                field=field,
            )
    columns = [text_field] + ([id_field] if id_field is not None else [])
    number = 0
    for batch in file.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=columns):
        texts = batch.column(0).to_pylist()
        ids = batch.column(1).to_pylist() if id_field is not None else [None] * len(texts)
        for text, row_id in zip(texts, ids, strict=True):
            number += 1
            record = {text_field: text}
            if id_field is not None:
                record[id_field] = row_id
            yield _record_row(path, number, record, text_field, id_field, unit="row")


_READERS = {".txt": _read_txt, ".jsonl": _read_jsonl, ".csv": _read_csv, ".parquet": _read_parquet}
