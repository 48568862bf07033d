"""The numpy backend's optional numba modules (the `ember[jit]` extra): each imported once,
on first use, and None where numba is missing or EMBER_JIT=0 (then the numpy path
serves). EMBER_JIT is read at every call, so setting it to 0 turns the modules off at once."""

import importlib
import importlib.util
import os
import threading

_modules: dict[str, object] = {}
_lock = threading.Lock()


def jit_module(name):
    """ember.backends.<name>, or None without numba (or with EMBER_JIT=0)."""
    if os.environ.get("EMBER_JIT", "1") == "0":
        return None
    try:
        return _modules[name]
    except KeyError:
        pass
    with _lock:
        if name not in _modules:
            try:
                _modules[name] = importlib.import_module(f"{__package__}.{name}")
            except ImportError:  # numba missing
                _modules[name] = None
    return _modules[name]


def jit_installed():
    """Whether jit_module can load its modules (numba importable, EMBER_JIT not 0), found
    without importing numba (a fifth of a second)."""
    return os.environ.get("EMBER_JIT", "1") != "0" and importlib.util.find_spec("numba") is not None
