"""Shared test helpers: CI-aware skips and comparison with numpy."""
import importlib
import os

import numpy as np
import pytest

ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(what, why):
    """Skip on a user's machine that lacks a part; fail under CI=true, where it must exist."""
    message = f"{what} is not available here: {why}"
    if ON_CI:
        pytest.fail(message + " (CI=true requires it)")
    pytest.skip(message)


def require(modname):
    """Import a reference library, or skip/fail (under CI) naming it."""
    try:
        return importlib.import_module(modname)
    except ImportError as exc:
        missing(f"the reference library {modname}", str(exc))


# Tolerances per dtype (rtol, atol) for values computed in that dtype.
TOL = {"f32": (1e-5, 1e-6), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1e-2), "f64": (1e-12, 1e-12)}


def assert_close(actual, expected, dtype_name="f32", rtol=None, atol=None):
    r, a = TOL.get(dtype_name, (0, 0))
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64) if dtype_name in TOL else actual,
                               np.asarray(expected, dtype=np.float64) if dtype_name in TOL else expected,
                               rtol=r if rtol is None else rtol, atol=a if atol is None else atol)


def record_attention_steps(monkeypatch, backend):
    """A list that fills, call by call, with the cache position of every
    Backend.attention_step that `backend`'s class runs from now on (the call still runs)."""
    positions = []
    cls = type(backend)
    real = cls.attention_step
    monkeypatch.setattr(cls, "attention_step",
                        lambda *a, **k: positions.append(a[7]) or real(*a, **k))
    return positions
