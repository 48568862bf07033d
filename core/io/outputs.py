"""Output files that appear whole or not at all, and never replace someone's file.

`owned.atomic_file` covers one file; a conversion may write several (safetensors shards
and their index), so `StagedOutputs` stages each under a fresh temporary name beside its
target and renames them all only once every one is complete. An existing target is
refused unless `force` (then replaced only at the final rename); a directory that
cannot be written is reported before any work starts.
"""

import contextlib
import os
import tempfile

from ..errors import EmberError


class OutputError(EmberError, OSError):
    """An output path that exists (without --force) or cannot be written."""


def check_target(path, force=False):
    """Raise OutputError unless `path` may be written: its directory exists and is
    writable, and the path is absent (or a regular file, with `force`)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OutputError(f"{path}: the directory {directory} does not exist", path=path)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: the directory {directory} cannot be written", path=path)
    if os.path.lexists(path):
        if not force:
            raise OutputError(f"{path} already exists; pass --force to replace it", path=path)
        if os.path.isdir(path) or os.path.islink(path):
            raise OutputError(
                f"{path} exists and is not a regular file; ember replaces only a file", path=path
            )


class StagedOutputs:
    """with StagedOutputs(force) as out: fh = out.open(path) ... ; all renamed at exit."""

    def __init__(self, force=False):
        self.force = force
        self._staged = []  # (temporary path, target, file object)

    def open(self, path):
        path = os.fspath(path)
        check_target(path, self.force)
        if any(target == path for _, target, _ in self._staged):
            raise OutputError(f"{path}: written twice by one command", path=path)
        directory = os.path.dirname(os.path.abspath(path))
        try:
            fd, tmp = tempfile.mkstemp(
                prefix=f".{os.path.basename(path)}.", suffix=".partial", dir=directory
            )
        except OSError as exc:  # access() passed (root, say) but the file system refuses
            raise OutputError(
                f"{path}: the directory {directory} cannot be written ({exc.strerror or exc})",
                path=path,
            ) from None
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        fh = os.fdopen(fd, "wb")
        self._staged.append((tmp, path, fh))
        return fh

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        for _, _, fh in self._staged:
            fh.close()
        if kind is None:
            for _, path, _ in self._staged:
                check_target(path, self.force)  # again: something may have appeared since
            for tmp, path, _ in self._staged:
                os.replace(tmp, path)
            return False
        for tmp, _, _ in self._staged:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
        return False


__all__ = ["OutputError", "StagedOutputs", "check_target"]
