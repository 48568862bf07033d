"""ember.owned.write_new, what `ember detect --save` and `ember segment --save` write
with: a new file whole, readable like any saved file; a path that exists (a file, a
dangling link) is refused and left as it was; no temporary is left either way."""

import os

import pytest

from ember import owned


def _left(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


def test_a_new_file_is_written_whole(tmp_path):
    target = tmp_path / "out.png"
    old = os.umask(0o022)
    try:
        owned.write_new(target, b"pixels")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"pixels"
    assert target.stat().st_mode & 0o777 == 0o644  # not mkstemp's private 0600
    assert _left(tmp_path) == ["out.png"]


def test_an_existing_file_or_link_is_refused_and_kept(tmp_path):
    taken = tmp_path / "taken.png"
    taken.write_bytes(b"someone's file")
    with pytest.raises(owned.NotOurs, match="does not overwrite"):
        owned.write_new(taken, b"ours")
    assert taken.read_bytes() == b"someone's file"
    dangling = tmp_path / "link.png"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(owned.NotOurs):
        owned.write_new(dangling, b"ours")
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    assert _left(tmp_path) == ["link.png", "taken.png"]
