"""Which single files ember wrote, extending core/owned.py (whose markers are for
directories) to the files a corpus job writes.

Beside each output `NAME` ember keeps `.NAME.ember.json` with the size and modification
time the file had when ember wrote it, and the job's fingerprint. A file is ember's while
it still has that size and time: one changed since, or one without a record, is someone
else's and is never overwritten (unless the caller forces it).
"""

import json
import os

from ..owned import atomic_file


def record_path(path):
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.ember.json")


def _stamp(st):
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def record(path):
    """The record of `path` if ember wrote it as it is now, else None."""
    try:
        with open(record_path(path)) as fh:
            facts = json.load(fh)
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not isinstance(facts, dict) or facts.get("made_by") != "ember":
        return None
    return facts if _stamp(st) in facts.get("states", []) else None


def refusal(path):
    """Why `path` must not be replaced, or None when it may (absent, or ember's)."""
    if os.path.islink(path):
        return f"{path} is a symbolic link; ember replaces only a file it wrote"
    if not os.path.lexists(path):
        return None
    if os.path.isdir(path):
        return f"{path} is a directory, not an output file"
    if record(path) is not None:
        return None
    return (
        f"{path} exists and was not written by ember (or was changed since); "
        "ember never overwrites a file it did not write (--force replaces it)"
    )


def mark(path, fh, **facts):
    """Inside `atomic_file(path)` after the last write to `fh`: record the file as ember's
    before it is renamed into place (a rename keeps size and time), so no moment exists
    when `path` holds ember's output without a record. The previous state is kept while it
    is still on disk, so a crash before the rename leaves the old output ember's too."""
    fh.flush()
    states = [_stamp(os.fstat(fh.fileno()))]
    previous = record(path)
    if previous is not None:
        states.append(_stamp(os.stat(path)))
    with atomic_file(record_path(path), "w") as out:
        json.dump({"made_by": "ember", "states": states, **facts}, out)
        out.write("\n")
