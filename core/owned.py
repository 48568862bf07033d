"""Writing to the file system without losing anything that ember did not make.

The rule: ember never deletes, replaces or overwrites what it did not create. A directory
ember builds (a browser bundle, a model in its cache) carries a marker file; such a
directory may be replaced whole, and so may an absent path or an empty directory;
anything else is refused with `NotOurs` saying why. Files are written under a fresh
temporary name beside their target and renamed into place, so a failure never leaves a
half-written file under the final name and never touches another file.

Pure standard library: build scripts and the CLI use it before any model code loads.
"""

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .errors import EmberError


class NotOurs(EmberError, PermissionError):
    """A path ember refuses to write into or replace because it did not create it."""


def refusal(path, marker, accept=None):
    """Why the directory `path` must not be replaced by one ember builds, or None when
    it may: absent, an empty directory, or one holding `marker`. `accept(path)` may
    recognise more of ember's own directories (made before markers existed)."""
    path = Path(path)
    if path.is_symlink():
        return f"{path} is a symbolic link; ember replaces only a real directory it made"
    if not path.exists():
        return None
    if not path.is_dir():
        return f"{path} exists and is not a directory"
    if (path / marker).is_file():
        return None
    try:
        empty = next(path.iterdir(), None) is None
    except OSError as exc:
        return f"{path} cannot be listed ({exc.strerror or exc})"
    if empty or (accept is not None and accept(path)):
        return None
    return (
        f"{path} is not empty and was not made by ember (it has no {marker} marker); "
        "ember never writes into or replaces a directory it did not create"
    )


def check(path, marker, accept=None):
    why = refusal(path, marker, accept)
    if why is not None:
        raise NotOurs(why, path=str(path))


def write_marker(directory, marker, **facts):
    (Path(directory) / marker).write_text(json.dumps({"made_by": "ember", **facts}) + "\n")


def staging_dir(dest):
    """A fresh private directory beside `dest` to build its replacement in."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{dest.name}-staging-", dir=dest.parent))


def swap_in(staged, dest, marker, accept=None):
    """Put the fully built directory `staged` (made by ember beside `dest`) at `dest`.

    An absent path is renamed onto in one step; an empty directory is filled (it keeps
    its inode and permissions); one of ember's directories is moved under a fresh
    directory of ember's (a rename onto a name that cannot exist), the new one renamed
    into place, then only what was moved is deleted. The place is checked again first."""
    staged, dest = Path(staged), Path(dest)
    check(dest, marker, accept)
    if not dest.exists():
        staged.rename(dest)
        return
    if next(dest.iterdir(), None) is None:
        for entry in staged.iterdir():
            entry.rename(dest / entry.name)
        staged.rmdir()
        return
    graveyard = Path(tempfile.mkdtemp(prefix=f".{dest.name}-old-", dir=dest.parent))
    dest.rename(graveyard / dest.name)
    staged.rename(dest)
    shutil.rmtree(graveyard, ignore_errors=True)


def discard(staged):
    """Remove a staging directory that ember made (after a failed build)."""
    if staged is not None and os.path.isdir(staged) and not os.path.islink(staged):
        shutil.rmtree(staged, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(path, mode="wb"):
    """Open a fresh temporary file beside `path` for writing; on success it is renamed
    onto `path`, on any failure it is removed. No other file is ever touched (the
    temporary name is created exclusively, never a guessed `path + '.partial'`)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.", suffix=".partial", dir=directory
    )
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a saved file is not secret
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def write_new(path, data):
    """Write the bytes `data` to a file at `path`, which must not exist: whole or not at
    all (written to a private temporary beside it, then hard-linked onto the name), and
    never over a file that appeared meanwhile (the link fails: `NotOurs`, nothing
    replaced). The temporary is always removed."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.",
        suffix=".partial",
        dir=os.path.dirname(os.path.abspath(path)),
    )
    try:
        with os.fdopen(fd, "wb") as fh:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a saved file is not secret
            fh.write(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise NotOurs(
                f"{path} appeared while ember was writing it; ember does not overwrite it",
                path=path,
            ) from None
    finally:
        os.unlink(tmp)


def _umask():
    mask = os.umask(0o022)  # read it (os has no getter) and put it back
    os.umask(mask)
    return mask
