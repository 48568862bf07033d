"""The journal of a corpus job: numbered part files and a manifest, in a directory of
ember's beside the output (`.NAME.ember-parts/`, with owned.py's marker).

Each part is one window of rows: `part-NNNNNN.npy` (float32 vectors) and
`part-NNNNNN.rows.jsonl` (ids and texts), each written under a temporary name and renamed.
Only then is the part added to `manifest.json` (also replaced atomically), so a part that
was being written when the process died is not in the manifest and is written again on
resume. The manifest carries the job's fingerprint (inputs' hashes, options, model): a
resume of other inputs or options is refused rather than mixed in.
"""

import json
import os
import shutil

import numpy as np

from .. import owned
from .errors import CorpusError

MARKER = ".ember-corpus-parts"
MANIFEST = "manifest.json"


def parts_dir(output):
    directory, name = os.path.split(os.path.abspath(output))
    return os.path.join(directory, f".{name}.ember-parts")


def _differences(old, new):
    keys = sorted(set(old) | set(new))
    return [k for k in keys if old.get(k) != new.get(k)]


class Parts:
    def __init__(self, output):
        self.output = os.fspath(output)
        self.dir = parts_dir(output)
        self.entries = []

    def exists(self):
        return os.path.lexists(self.dir)

    def check_ours(self):
        """NotOurs when the place of the journal holds something ember did not make."""
        if self.exists() and not os.path.isfile(os.path.join(self.dir, MARKER)):
            raise owned.NotOurs(
                f"{self.dir} exists and was not made by ember (it has no "
                f"{MARKER} marker); ember keeps a job's parts there and "
                "will not write into it",
                path=self.dir,
            )

    def open(self, fingerprint, restart=False):
        """Start a journal, or take up the one of an interrupted run of the same job.
        `restart` discards a journal of another job instead of refusing it."""
        self.check_ours()
        if self.exists():
            manifest = self._read_manifest()
            if manifest.get("fingerprint") == fingerprint:
                self.entries = manifest["parts"]
                return self.entries
            if not restart and manifest.get("fingerprint") is not None:
                diff = _differences(manifest.get("fingerprint") or {}, fingerprint)
                raise CorpusError(
                    f"{self.dir} holds an interrupted run of {self.output} with other "
                    f"{', '.join(diff)}; rerun the same command to finish it, or add --force "
                    "to discard it and start again",
                    path=self.dir,
                    differs=diff,
                )
            self.remove()
        os.makedirs(self.dir)
        owned.write_marker(self.dir, MARKER, output=os.path.basename(self.output))
        self.fingerprint = fingerprint
        self._write_manifest(fingerprint)
        return self.entries

    def _read_manifest(self):
        path = os.path.join(self.dir, MANIFEST)
        try:
            with open(path) as fh:
                manifest = json.load(fh)
            if not isinstance(manifest.get("parts"), list):
                raise ValueError("no list of parts")
        except FileNotFoundError:
            return {"fingerprint": None, "parts": []}  # died before its first manifest
        except (OSError, ValueError, AttributeError):
            raise CorpusError(
                f"{path}: the journal of an interrupted run cannot be read; "
                "add --force to discard it and start again",
                path=path,
            ) from None
        self.fingerprint = manifest.get("fingerprint")
        return manifest

    def _write_manifest(self, fingerprint):
        with owned.atomic_file(os.path.join(self.dir, MANIFEST), "w") as fh:
            json.dump({"made_by": "ember", "fingerprint": fingerprint, "parts": self.entries}, fh)
            fh.write("\n")

    @property
    def rows_done(self):
        return sum(e["rows"] for e in self.entries)

    def part_paths(self, entry):
        base = os.path.join(self.dir, entry["name"])
        return base + ".npy", base + ".rows.jsonl"

    def commit(self, rows, vectors):
        """Write one window's part, then list it in the manifest."""
        entry = {"name": f"part-{len(self.entries):06d}", "rows": len(rows)}
        vec_path, rows_path = self.part_paths(entry)
        with owned.atomic_file(vec_path) as fh:
            np.save(fh, np.ascontiguousarray(vectors, dtype=np.float32))
        with owned.atomic_file(rows_path, "w") as fh:
            for row_id, text in rows:
                fh.write(json.dumps({"id": row_id, "text": text}, ensure_ascii=False) + "\n")
        self.entries.append(entry)
        self._write_manifest(self.fingerprint)

    def read(self, entry):
        """(vectors memory-mapped, list of (id, text)) of one committed part."""
        vec_path, rows_path = self.part_paths(entry)
        vectors = np.load(vec_path, mmap_mode="r")
        with open(rows_path, encoding="utf-8") as fh:
            rows = [(r["id"], r["text"]) for r in map(json.loads, fh)]
        if len(rows) != entry["rows"] or vectors.shape[0] != entry["rows"]:
            raise CorpusError(
                f"{vec_path}: a committed part does not hold its "
                f"{entry['rows']} rows; add --force to start again",
                path=vec_path,
            )
        return vectors, rows

    def remove(self):
        """Delete the journal (only ever a directory with ember's marker)."""
        self.check_ours()
        if self.exists():
            shutil.rmtree(self.dir)
