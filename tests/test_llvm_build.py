"""llvm_build.ObjectCache writes machine code only where no file is, through a part file
of its own, and removes only that part file: a file of the part's name that it did not
make, and a cache file that fails its checksum, stay as they were."""

import os

import pytest

pytest.importorskip("llvmlite", reason="llvm_build's cache needs llvmlite (the jit extra)")

from ember.backends import llvm_build  # noqa: E402


def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path))
    return llvm_build.ObjectCache("test", "key", "triple", "cpu", "+feature")


def test_the_code_is_kept_once_and_read_back(tmp_path, monkeypatch):
    first = _cache(tmp_path, monkeypatch)
    assert first.code is None
    first.store(None, b"machine code")
    assert sorted(os.listdir(tmp_path / "jit")) == [os.path.basename(first.path)]
    assert _cache(tmp_path, monkeypatch).code == b"machine code"


def test_a_part_file_it_did_not_make_is_left_alone(tmp_path, monkeypatch):
    cache = _cache(tmp_path, monkeypatch)
    part = f"{cache.path}.{os.getpid()}.part"
    os.makedirs(os.path.dirname(part))
    with open(part, "wb") as fh:
        fh.write(b"someone else's")
    cache.store(None, b"machine code")
    with open(part, "rb") as fh:
        assert fh.read() == b"someone else's"
    assert not os.path.exists(cache.path)  # not written under another name either


def test_a_file_failing_its_checksum_is_neither_trusted_nor_replaced(tmp_path, monkeypatch):
    cache = _cache(tmp_path, monkeypatch)
    os.makedirs(os.path.dirname(cache.path))
    with open(cache.path, "wb") as fh:
        fh.write(b"not an object file")
    again = _cache(tmp_path, monkeypatch)
    assert again.code is None
    again.store(None, b"machine code")
    with open(cache.path, "rb") as fh:
        assert fh.read() == b"not an object file"
    assert os.listdir(tmp_path / "jit") == [os.path.basename(cache.path)]


def test_ember_jit_0_is_seen_as_soon_as_it_is_set(monkeypatch):
    """EMBER_JIT is read at every ask (from os.environ's own dict on POSIX): set, changed
    or removed through os.environ, the kernels follow at once."""
    from ember.backends import llvm_build
    from ember.backends.optional_jit import jit_disabled

    monkeypatch.delenv("EMBER_JIT", raising=False)
    assert not jit_disabled()
    monkeypatch.setenv("EMBER_JIT", "0")
    assert jit_disabled() and llvm_build.kernels("llvm_norm") is None
    monkeypatch.setenv("EMBER_JIT", "1")
    assert not jit_disabled()
    monkeypatch.delenv("EMBER_JIT")
    assert not jit_disabled()
