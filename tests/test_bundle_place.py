"""ember never deletes or replaces a directory it did not create: every `ember serve` and
`build_web.py` form run against scratch directories full of someone's files, which must
all survive byte for byte (a bundle build used to rename such a directory aside and
delete it)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from serve_process import start_ember_serve

from ember.web import bundle_place

ROOT = Path(__file__).resolve().parent.parent
BUILD_WEB = ROOT / "build_scripts" / "build_web.py"


def _snapshot(base):
    """Every file and directory under `base` (and `base` itself) with its contents."""
    found = {".": "dir" if base.is_dir() else base.read_bytes()}
    if base.is_dir():
        for p in sorted(base.rglob("*")):
            found[p.relative_to(base).as_posix()] = "dir" if p.is_dir() else p.read_bytes()
    return found


@pytest.fixture
def thesis(tmp_path):
    """A directory of someone's work, no index.html: the case that lost its files."""
    v = tmp_path / "v"
    (v / "important").mkdir(parents=True)
    (v / "important" / "thesis.txt").write_text("data")
    (v / "notes.md").write_text("# mine\n")
    return v


@pytest.fixture
def own_site(tmp_path):
    """Someone's own static site: it has an index.html but no ember marker."""
    site = tmp_path / "site"
    (site / "img").mkdir(parents=True)
    (site / "index.html").write_text("<!doctype html><title>my site</title>")
    (site / "img" / "logo.svg").write_text("<svg/>")
    return site


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True,
                          text=True, timeout=300)


def _build_web(*args):
    return subprocess.run([sys.executable, str(BUILD_WEB), *args], capture_output=True,
                          text=True, timeout=300)


def _no_staging_left(parent):
    """Names in `parent` that no fixture made (a staging or old-bundle directory)."""
    return [p.name for p in parent.iterdir() if p.name not in ("v", "site", "paper.txt",
                                                               "link")]


@pytest.mark.parametrize("extra", [[], ["--rebuild"]], ids=["serve", "serve-rebuild"])
def test_serve_refuses_to_build_into_a_directory_of_files(thesis, extra):
    before = _snapshot(thesis)
    done = _cli("serve", "--port", "0", "--bundle", str(thesis), *extra)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "will not build a bundle here" in done.stderr
    assert bundle_place.MARKER in done.stderr and "Traceback" not in done.stderr
    assert _snapshot(thesis) == before
    assert _no_staging_left(thesis.parent) == []


def test_serve_rebuild_refuses_someone_elses_site(own_site):
    before = _snapshot(own_site)
    done = _cli("serve", "--port", "0", "--bundle", str(own_site), "--rebuild")
    assert done.returncode == 1 and "will not build a bundle here" in done.stderr
    assert _snapshot(own_site) == before


def test_serve_serves_someone_elses_site_as_it_is(own_site):
    import http.client
    before = _snapshot(own_site)
    proc, match = start_ember_serve("--port", "0", "--bundle", str(own_site))
    try:
        conn = http.client.HTTPConnection(match.group(1), int(match.group(2)), timeout=30)
        conn.request("GET", "/")
        assert conn.getresponse().read() == (own_site / "index.html").read_bytes()
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert _snapshot(own_site) == before   # nothing written into it, no marker added


@pytest.mark.parametrize("extra", [[], ["--if-stale"]], ids=["build", "build-if-stale"])
@pytest.mark.parametrize("which", ["thesis", "own_site"])
def test_build_web_refuses_someone_elses_directory(request, which, extra):
    target = request.getfixturevalue(which)
    before = _snapshot(target)
    done = _build_web("--out", str(target), *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not made by ember" in done.stderr and "Traceback" not in done.stderr
    assert _snapshot(target) == before
    assert _no_staging_left(target.parent) == []


def test_serve_refuses_a_file_and_a_symlink(tmp_path, thesis):
    paper = tmp_path / "paper.txt"
    paper.write_text("keep me")
    link = tmp_path / "link"
    os.symlink(thesis, link)
    before = _snapshot(thesis)
    for target, why in ((paper, "not a directory"), (link, "symbolic link")):
        done = _cli("serve", "--port", "0", "--bundle", str(target), "--rebuild")
        assert done.returncode == 1 and why in done.stderr, done.stderr
    assert paper.read_text() == "keep me" and link.is_symlink()
    assert _snapshot(thesis) == before


def test_refusal_names_the_reason_for_system_and_home_directories():
    for place in ("/etc", os.path.expanduser("~")):
        why = bundle_place.refusal(place)
        assert why is not None and str(place) in why and bundle_place.MARKER in why


def test_places_that_may_be_built_into(tmp_path):
    assert bundle_place.refusal(tmp_path / "absent") is None
    (tmp_path / "empty").mkdir()
    assert bundle_place.refusal(tmp_path / "empty") is None
    marked = tmp_path / "marked"
    marked.mkdir()
    bundle_place.write_marker(marked)
    (marked / "index.html").write_text("old")
    assert bundle_place.refusal(marked) is None


def test_a_pre_marker_bundle_is_replaceable_only_at_the_default_place(tmp_path):
    legacy = tmp_path / "bundle"
    legacy.mkdir()
    (legacy / "manifest.json").write_text(json.dumps(
        {"wheel": "w", "pyodide": "1", "sources": "x", "models": {}}))
    assert bundle_place.refusal(legacy, default=legacy) is None
    assert bundle_place.refusal(legacy, default=tmp_path / "elsewhere") is not None


def _staged(parent, text):
    staged = parent / f".bundle-{text}"
    staged.mkdir()
    (staged / "index.html").write_text(text)
    bundle_place.write_marker(staged)
    return staged


def test_swap_in_replaces_only_what_ember_built(tmp_path):
    # absent: renamed into place
    target = tmp_path / "out"
    bundle_place.swap_in(_staged(tmp_path, "one"), target)
    assert (target / "index.html").read_text() == "one"
    # an ember bundle: replaced whole, the old one gone, nothing left beside it
    (target / "stale.js").write_text("old build output")
    bundle_place.swap_in(_staged(tmp_path, "two"), target)
    assert (target / "index.html").read_text() == "two" and not (target / "stale.js").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # an empty directory: filled in place, the directory itself kept
    empty = tmp_path / "empty"
    empty.mkdir()
    inode = empty.stat().st_ino
    bundle_place.swap_in(_staged(tmp_path, "three"), empty)
    assert empty.stat().st_ino == inode and (empty / "index.html").read_text() == "three"


def test_swap_in_rechecks_the_place_before_replacing(tmp_path, thesis):
    """A directory that filled with someone's files while the bundle was being built is
    still refused at the swap, and the staged build is the only thing to go."""
    before = _snapshot(thesis)
    staged = _staged(tmp_path, "late")
    with pytest.raises(bundle_place.BundlePlaceError, match="not made by ember"):
        bundle_place.swap_in(staged, thesis)
    assert _snapshot(thesis) == before
    bundle_place.discard(staged)
    assert not staged.exists()
