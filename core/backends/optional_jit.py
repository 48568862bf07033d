"""The numpy backend's optional numba modules (the `ember[jit]` extra), each imported once,
on first use: None where numba is missing or EMBER_JIT=0, and the numpy path serves."""

import importlib
import os
import threading

_modules = {}
_lock = threading.Lock()


def jit_module(name):
    """ember.backends.<name>, or None without numba (or with EMBER_JIT=0)."""
    try:
        return _modules[name]
    except KeyError:
        pass
    with _lock:
        if name not in _modules:
            module = None
            if os.environ.get("EMBER_JIT", "1") != "0":
                try:
                    module = importlib.import_module(f"{__package__}.{name}")
                except ImportError:  # numba missing
                    module = None
            _modules[name] = module
    return _modules[name]
