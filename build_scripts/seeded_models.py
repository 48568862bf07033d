"""What the bundle's seeded demo models (make_tiny_llama.py, make_tiny_sam.py) share: each is
made once under ember's model directory, made again when its recipe changes, swapped in
whole, and never written over a directory someone else made; and the same command line."""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from ember import owned

STAMP = ".recipe"


def ensure_made(root, script, name, files, recipe_hash, make, said_missing):
    """The model's directory `root/name`, made by make(dir) when missing or stamped with
    another recipe_hash(); None (with a note, once: `said_missing` remembers) when
    recipe_hash raises ImportError, i.e. torch/transformers are not installed."""
    try:
        digest = recipe_hash()
    except ImportError as exc:
        if not said_missing:  # build_web asks on every staleness check: say it once
            said_missing.append(exc)
            print(
                f"{script}: not making the {name} demo model ({exc}); "
                "pip install -e '.[test]' to include it",
                file=sys.stderr,
                flush=True,
            )
        return None
    dest = Path(root) / name
    stamp = dest / STAMP
    if stamp.is_file() and stamp.read_text() == digest and all((dest / f).is_file() for f in files):
        return dest
    Path(root).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        make(tmp)
        (tmp / STAMP).write_text(digest)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)  # safetensors writes 0600; the bundle links these files
        os.chmod(tmp, 0o755)
        # Whole or not at all (a concurrent reader never sees half), and only over a
        # directory this script made (it carries the stamp) or an empty one.
        owned.swap_in(tmp, dest, STAMP)
    except owned.NotOurs:
        raise
    except OSError:
        if not dest.is_dir():  # another process won the rename: its files are the same
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the staging directory made above, if left
    print(f"{script}: {name} at {dest}", flush=True)
    return dest


def main(argv, doc, files, make, ensure):
    """`--out DIR` writes the files there (a directory of ours or a new one); without it,
    ensure(ember's model directory). Exit status 0 on success."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", help="write the files into this directory")
    args = parser.parse_args(argv)
    if args.out:
        owned.check(args.out, STAMP)  # never write into someone else's directory
        make(args.out)
        print(json.dumps({f: (Path(args.out) / f).stat().st_size for f in files}))
        return 0
    from ember.hub import ember_models_dir

    return 0 if ensure(ember_models_dir()) else 1
