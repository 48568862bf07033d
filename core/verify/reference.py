"""The PyTorch side: torch and transformers are imported here, lazily, and by nothing
else in ember; a missing one is an error that says how to install it."""

import importlib

from ..errors import EmberError

INSTALL = "pip install torch transformers"


class MissingReference(EmberError, ImportError):
    """The reference library verify compares against is not installed."""


def _import(name):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise MissingReference(
            f"verify: the reference library {name!r} is not installed ({exc}); "
            f"`{INSTALL}` (torch on the CPU is enough)",
            op="verify",
            library=name,
        ) from None


def import_torch():
    return _import("torch")


def import_transformers():
    import_torch()
    return _import("transformers")
