"""Where a browser bundle may be built: ember never deletes or replaces a directory it did
not create (the rule and its mechanism are in ember.owned).

A bundle is built only into a path that does not exist yet, an empty directory, or a
directory that carries ember's bundle marker (`.ember-bundle`, written by every build),
which is then replaced whole. Anything else (someone's site with its own index.html, a
home directory, /etc) is refused with a reason, before any work is done and again just
before the swap. Bundles made before the marker existed are recognised only at the default
location (web/bundle in a source checkout), by the manifest every ember build wrote there.
"""

import json
from pathlib import Path

from ember import owned
from ember.owned import NotOurs as BundlePlaceError  # what callers catch

MARKER = ".ember-bundle"
_LEGACY_MANIFEST_KEYS = {"wheel", "pyodide", "sources", "models"}


def _legacy_bundle_at(default):
    """accept() for owned.refusal: a pre-marker bundle, only at the default place."""
    if default is None:
        return None

    def accept(path):
        if path.resolve() != Path(default).resolve():
            return False
        try:
            manifest = json.loads((path / "manifest.json").read_text())
        except (OSError, ValueError):
            return False
        return isinstance(manifest, dict) and set(manifest) >= _LEGACY_MANIFEST_KEYS

    return accept


def refusal(path, default=None):
    """Why a bundle must not be built at `path`, or None when it may."""
    why = owned.refusal(path, MARKER, _legacy_bundle_at(default))
    if why is None:
        return None
    return why + (
        ". Pass an absent or empty directory, or serve an existing one as it is without --rebuild"
    )


def check(path, default=None):
    why = refusal(path, default)
    if why is not None:
        raise BundlePlaceError(why, path=str(path))


def write_marker(staged, **facts):
    owned.write_marker(staged, MARKER, **facts)


def swap_in(staged, bundle, default=None):
    """Put the built directory `staged` at `bundle` (see owned.swap_in)."""
    check(bundle, default)
    owned.swap_in(staged, bundle, MARKER, _legacy_bundle_at(default))


discard = owned.discard
