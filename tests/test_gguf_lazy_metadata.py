"""GGUF metadata arrays long enough to matter (a tokenizer's tokens and merges) are checked
when the file opens but read into Python objects only when asked for (core/io/gguf.py
GGUFMetadata): the values are the same as an eager read's, a long array that runs past
the end of the file still fails at open, and closing the file leaves the metadata whole."""

import struct

import pytest

from ember.errors import FormatError
from ember.io import gguf
from ember.io.gguf import GGUFFile, GGUFValueType
from ember.io.gguf_writer import Typed, write_gguf

N = gguf.LAZY_ARRAY_MIN + 5
TOKENS = [f"tok{i}" for i in range(N)] + ["caf\u00e9"]
SCORES = [float(i) / 4 for i in range(N)]
METADATA = {
    "general.architecture": "test",
    "t.tokens": TOKENS,
    "t.scores": Typed(GGUFValueType.ARRAY, SCORES, GGUFValueType.FLOAT32),
    "t.short": ["a", "b"],
    "t.after": 7,  # a key after the long arrays: the reader stepped over them correctly
}


def write(path, metadata=METADATA):
    with open(path, "wb") as fh:
        write_gguf(fh, metadata, [])
    return path


def test_long_arrays_are_read_when_asked_and_equal_an_eager_read(tmp_path):
    path = write(tmp_path / "m.gguf")
    g = GGUFFile(path)
    md = g.metadata
    assert not md._read  # nothing long read yet
    assert md["t.after"] == 7 and md["t.short"] == ["a", "b"]
    assert not md._read
    assert md["t.tokens"] == TOKENS
    assert md["t.scores"] == SCORES
    assert md.get("t.tokens") is md["t.tokens"]  # kept once read
    md.release_arrays()
    assert not md._read
    assert md["t.tokens"] == TOKENS  # read again
    assert dict(md) == {**{k: v for k, v in METADATA.items() if k != "t.scores"}, "t.scores": SCORES}
    assert list(md) == list(METADATA) and len(md) == len(METADATA)
    g.close()


def test_closing_the_file_keeps_the_metadata_whole(tmp_path):
    path = write(tmp_path / "m.gguf")
    with GGUFFile(path) as g:
        pass
    assert g.closed
    assert g.metadata["t.tokens"] == TOKENS and g.metadata["t.scores"] == SCORES


def test_a_long_string_array_running_past_the_end_fails_at_open(tmp_path):
    path = write(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    # The last token's length, made larger than the file.
    last = _string_at(data, "caf\u00e9")
    struct.pack_into("<Q", data, last, 1 << 40)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=rf"t.tokens.*\[{N}\].*runs past the end"):
        GGUFFile(bad)


def _string_at(data, text):
    """The offset of the u64 length before the UTF-8 string `text` in `data`."""
    raw = text.encode("utf-8")
    at = bytes(data).index(struct.pack("<Q", len(raw)) + raw)
    return at
