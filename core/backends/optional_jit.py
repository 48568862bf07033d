"""The numpy backend's optional numba modules (the `ember[jit]` extra): each imported once,
on first use, and None where numba is missing or EMBER_JIT=0 (then the numpy path
serves). EMBER_JIT is read at every call, so setting it to 0 turns the modules off at once."""

import importlib
import os
import threading

_modules: dict[str, object] = {}
_lock = threading.Lock()


# os.environ's own dict (bytes keys on POSIX): jit_disabled is asked at every kernel
# call (~300 a decode step), and os.environ.get encodes the key and decodes the value
# each time (~1 us); a lookup here is ~0.1 us and sees every change os.environ makes
_ENV = getattr(os.environ, "_data", None) if os.name == "posix" else None


def jit_disabled():
    """Whether EMBER_JIT=0 is set now (ember's compiled kernels then stay unused)."""
    if _ENV is not None:
        return _ENV.get(b"EMBER_JIT") == b"0"
    return os.environ.get("EMBER_JIT", "1") == "0"


def env_off(name):
    """Whether the environment sets `name` to "0" now (read at every call, as
    jit_disabled reads EMBER_JIT)."""
    if _ENV is not None:
        return _ENV.get(name.encode()) == b"0"
    return os.environ.get(name, "1") == "0"


def jit_module(name):
    """ember.backends.<name>, or None without numba (or with EMBER_JIT=0)."""
    if jit_disabled():
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
