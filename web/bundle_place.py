"""Where a browser bundle may be built, and how it is swapped in without losing anything.

ember never deletes or replaces a directory it did not create. A bundle is built only into

- a path that does not exist yet,
- an empty directory, or
- a directory that carries ember's bundle marker (`.ember-bundle`, written by every build),
  which is then replaced whole.

Anything else (someone's site with its own index.html, a home directory, /etc) is refused
with `BundlePlaceError` saying why, before any work is done and again just before the swap.
Bundles made before the marker existed are recognised only at the default location
(web/bundle in a source checkout), by the manifest every ember build wrote there.
"""
import json
import os
import shutil
import tempfile
from pathlib import Path

MARKER = ".ember-bundle"
_LEGACY_MANIFEST_KEYS = {"wheel", "pyodide", "sources", "models"}


class BundlePlaceError(Exception):
    """A directory ember will not build a bundle into; the message says why."""


def _is_legacy_bundle(path):
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and _LEGACY_MANIFEST_KEYS <= set(manifest)


def refusal(path, default=None):
    """Why a bundle must not be built at `path`, or None when it may. `default` is the
    default bundle location, where a pre-marker ember bundle may also be replaced."""
    path = Path(path)
    if path.is_symlink():
        return f"{path} is a symbolic link; ember builds a bundle only into a real directory"
    if not path.exists():
        return None
    if not path.is_dir():
        return f"{path} exists and is not a directory"
    if (path / MARKER).is_file():
        return None
    try:
        empty = next(path.iterdir(), None) is None
    except OSError as exc:
        return f"{path} cannot be listed ({exc.strerror or exc})"
    if empty:
        return None
    if default is not None and path.resolve() == Path(default).resolve() \
            and _is_legacy_bundle(path):
        return None
    return (f"{path} is not empty and is not a bundle ember built (it has no {MARKER} "
            "marker); ember never builds into or replaces a directory it did not create. "
            "Pass an absent or empty directory, or serve this one as it is without --rebuild")


def check(path, default=None):
    """Raise BundlePlaceError when a bundle must not be built at `path`."""
    why = refusal(path, default)
    if why is not None:
        raise BundlePlaceError(why)


def write_marker(staged, **facts):
    """Mark a staged bundle directory as ember's own."""
    (Path(staged) / MARKER).write_text(json.dumps({"ember_bundle": 1, **facts}) + "\n")


def swap_in(staged, bundle, default=None):
    """Put the fully built directory `staged` (a sibling of `bundle`, made by ember) at
    `bundle`. An absent path is renamed onto in one step; an empty directory is filled
    (its own inode and permissions stay); an ember bundle is moved into a private
    directory of ember's, the new one renamed into place, then the old one deleted.
    Re-checks the place first: nothing else is ever replaced."""
    staged, bundle = Path(staged), Path(bundle)
    check(bundle, default)
    if not bundle.exists():
        staged.rename(bundle)
        return
    if next(bundle.iterdir(), None) is None:
        for entry in staged.iterdir():
            entry.rename(bundle / entry.name)
        staged.rmdir()
        return
    # An ember bundle: move it under a fresh directory of ember's (a rename onto a name
    # that cannot exist), so the only thing ever deleted is what ember moved there.
    graveyard = Path(tempfile.mkdtemp(prefix=f".old-{bundle.name}-", dir=bundle.parent))
    bundle.rename(graveyard / "bundle")
    staged.rename(bundle)
    shutil.rmtree(graveyard, ignore_errors=True)


def discard(staged):
    """Remove a staging directory ember made (after a failed build)."""
    if staged is not None and os.path.isdir(staged):
        shutil.rmtree(staged, ignore_errors=True)
