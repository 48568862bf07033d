"""pyarrow, imported only when a parquet file is read or written (the `ember[parquet]`
extra), with an error that says how to get it."""

import importlib

from .errors import CorpusError


def _need(module):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise CorpusError(
            f"parquet files need pyarrow, which is not installed here ({exc}); "
            "pip install pyarrow  (or pip install 'ember[parquet]')"
        ) from None


def pyarrow():
    return _need("pyarrow")


def parquet():
    return _need("pyarrow.parquet")
