"""Corpus readers: every input format gives (id, text) rows in order with the ids promised,
and every kind of bad row is named by file, line and field (or logged with on_bad)."""
import json

import pytest

from ember.corpus import BadRow, CorpusError
from ember.corpus.readers import check_inputs, count_rows, read_rows
from helpers import missing


def _rows(paths, **kw):
    return list(read_rows([str(p) for p in paths], **kw))


def test_txt_rows_are_lines_with_file_and_line_ids(tmp_path):
    p = tmp_path / "a.txt"
    p.write_bytes(b"first text\r\nsecond text\nthird\n")
    assert _rows([p]) == [(f"{p}:1", "first text"), (f"{p}:2", "second text"), (f"{p}:3", "third")]


def test_jsonl_text_and_id_fields(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"body": "x y", "key": 7}\n{"body": "z", "key": "k2"}\n')
    assert _rows([p], text_field="body", id_field="key") == [("7", "x y"), ("k2", "z")]
    assert _rows([p], text_field="body") == [(f"{p}:1", "x y"), (f"{p}:2", "z")]


def test_csv_quoted_multiline_record_keeps_its_starting_line(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text('id,text\n1,plain\n2,"two\nlines, with comma"\n3,last\n')
    assert _rows([p]) == [(f"{p}:2", "plain"), (f"{p}:3", "two\nlines, with comma"),
                          (f"{p}:5", "last")]
    assert [r[0] for r in _rows([p], id_field="id")] == ["1", "2", "3"]


def test_several_inputs_in_order(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.jsonl"
    a.write_text("one\ntwo\n")
    b.write_text('{"text": "three"}\n')
    assert [t for _, t in _rows([a, b])] == ["one", "two", "three"]
    assert count_rows([str(a), str(b)]) == 3


def test_parquet_rows_with_row_ids(tmp_path):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        missing("pyarrow (ember[parquet])", str(exc))
    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"text": [f"t{i}" for i in range(2500)], "doc": list(range(2500))}), p)
    rows = _rows([p])
    assert len(rows) == 2500 and rows[0] == (f"{p}:1", "t0") and rows[-1] == (f"{p}:2500", "t2499")
    assert _rows([p], id_field="doc")[1234] == ("1234", "t1234")
    assert count_rows([str(p)]) == 2500
    with pytest.raises(CorpusError, match=r"a.parquet: the parquet file has no column 'body' "
                                          r"\(columns: text, doc\)"):
        _rows([p], text_field="body")


BAD = [
    ("a.jsonl", b'{"text": "ok"}\n{"title": "no text"}\n{"text": "ok"}\n',
     r"a.jsonl line 2, field 'text': no field 'text' \(fields: title\)"),
    ("a.jsonl", b'{"text": "ok"}\n{"text": "   "}\n',
     r"a.jsonl line 2, field 'text': the text is empty"),
    ("a.jsonl", b'{"text": "ok"}\n{"text": 3}\n', r"line 2, field 'text': the text is a int"),
    ("a.jsonl", b'{"text": "ok"}\n{"text": "x"\n', r"a.jsonl line 2: not JSON"),
    ("a.jsonl", b'[1, 2]\n', r"a.jsonl line 1: a JSON list, not an object"),
    ("a.txt", b"good\ncaf\xe9 latin-1\ngood\n",
     r"a.txt line 2: not UTF-8 \(byte 0xe9 at column 4\)"),
    ("a.txt", b"good\n\ngood\n", r"a.txt line 2: the text is empty"),
    ("a.csv", b"id,text\n1,ok\n2,ragged,row\n3,ok\n",
     r"a.csv line 3: has 3 fields, the header has 2"),
    ("a.csv", b"id,text\n1,ok\n2,\xff\xfe\n3,ok\n", r"a.csv line 3: not UTF-8"),
    ("a.csv", b"id,text\n1,ok\n2,\n", r"a.csv line 3, field 'text': the text is empty"),
]


@pytest.mark.parametrize("name,data,pattern", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_rows_name_file_line_and_field(tmp_path, name, data, pattern):
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(BadRow, match=pattern):
        _rows([p])
    logged = []
    good = _rows([p], on_bad=logged.append)
    assert len(logged) == 1 and str(logged[0]).startswith(str(p))
    assert all(t.strip() for _, t in good)
    assert len(good) == len(data.splitlines()) - 1 - name.endswith(".csv")


def test_missing_csv_column_names_the_header(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("id,body\n1,x\n")
    with pytest.raises(CorpusError, match=r"a.csv: the CSV header has no column 'text' "
                                          r"\(columns: id, body\)"):
        _rows([p])


def test_inputs_are_checked_before_reading(tmp_path):
    with pytest.raises(CorpusError, match=r"unknown input format '.xml'"):
        check_inputs([str(tmp_path / "a.xml")])
    with pytest.raises(CorpusError, match=r"no such input file"):
        check_inputs([str(tmp_path / "absent.txt")])
    (tmp_path / "a.txt").write_text("x\n")
    with pytest.raises(CorpusError, match=r"a .txt input has no fields"):
        check_inputs([str(tmp_path / "a.txt")], id_field="id")


def test_jsonl_ids_may_be_missing_only_without_id_field(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(BadRow, match=r"line 1, field 'doc': no id in field 'doc'"):
        _rows([p], id_field="doc")


def test_progress_bar_on_a_terminal_only():
    import io

    from ember.corpus.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        bar = Progress(stream, total=4000, done=1000)
        bar.shown = -1e9   # draw on the first update whatever the clock says
        bar.update(1000)
        bar.close()
    assert pipe.getvalue() == ""
    last = tty.getvalue().split("\r")[-1]
    assert "2,000/4,000 rows" in last and "rows/s" in last and "ETA " in last
    assert last.endswith("\n")
