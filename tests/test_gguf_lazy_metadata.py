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


def _mapped_kib(path):
    """Kilobytes of this process's memory holding pages of `path`'s mappings (smaps Rss)."""
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
                ours = len(head) >= 6 and head[5] == str(path)
            elif ours and head and head[0] == "Rss:":
                total += int(head[1])
    return total


def test_header_pages_released_leave_memory_and_read_back_the_same_metadata(tmp_path):
    import os

    import numpy as np

    from ember.io.gguf_writer import PlannedTensor
    from ember.io.quant import GGMLType

    if not os.path.exists("/proc/self/smaps"):
        pytest.skip("no /proc/self/smaps here to see which pages are in memory")
    tokens = [f"token-{i:08d}" * 8 for i in range(20000)]  # ~2 MiB of header
    w = np.arange(4096, dtype=np.float32)
    planned = [PlannedTensor("w", w.shape, GGMLType.F32, w.tobytes)]
    path = tmp_path / "m.gguf"
    with open(path, "wb") as fh:
        write_gguf(fh, dict(METADATA, **{"t.tokens": tokens}), planned)
    g = GGUFFile(path)
    assert g.metadata["t.tokens"] == tokens  # the header's pages are read in
    read = _mapped_kib(path)
    g.metadata.release_arrays()
    g.release_header_pages()
    assert _mapped_kib(path) <= read - g.data_offset // 2048  # at least half of it left
    assert g.metadata["t.tokens"] == tokens and g.metadata["t.scores"] == SCORES
    np.testing.assert_array_equal(g.dequantize("w"), w)
    g.close()
    g.release_header_pages()  # a closed file: nothing to release, no error
