"""The array backend's fused row ops on an array module that is not numpy (cupy's path:
the whole range at once, no thread pool, no numpy error state), run here through a numpy
stand-in under another name: they must give the numpy path's results (numpy's without
llvm_math's and llvm_norm's kernels, EMBER_JIT=0: their compiled GELU and norms are
numpy's alone)."""
import types

import numpy as np
import pytest

from ember import dtype as dt
from ember.backends import array_rows
from ember.backends.array import ArrayBackend
from ember.layout import Layout


def _stand_in():
    mod = types.ModuleType("cupy_like")
    mod.__getattr__ = lambda name: getattr(np, name)   # PEP 562: everything else is numpy's
    mod.asnumpy = np.asarray
    return mod


XP = _stand_in()
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("activation", [None, "gelu", "gelu_tanh", "silu", "relu", "tanh"])
def test_linear_epilogue_matches_the_numpy_path(activation, monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")
    y = RNG.standard_normal((700, 300)).astype(np.float32)   # several blocks on numpy
    bias, res = RNG.standard_normal(300).astype(np.float32), RNG.standard_normal((700, 300)).astype(np.float32)
    want = array_rows.linear_epilogue(np, y.copy(), bias, activation, res)
    got = array_rows.linear_epilogue(XP, y.copy(), bias, activation, res)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rms", [False, True])
def test_norm_matches_the_numpy_path(rms, monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")  # numpy's own norm, not llvm_norm's
    x = RNG.standard_normal((900, 384)).astype(np.float32)
    w, b, r = (RNG.standard_normal(384).astype(np.float32), RNG.standard_normal(384).astype(np.float32),
               RNG.standard_normal((900, 384)).astype(np.float32))
    np.testing.assert_array_equal(array_rows.norm_last_dim(XP, x, w, b, 1e-5, rms, r),
                                  array_rows.norm_last_dim(np, x, w, b, 1e-5, rms, r))


@pytest.mark.parametrize("log", [False, True])
def test_softmax_matches_the_numpy_path(log):
    x = RNG.standard_normal((2000, 33)).astype(np.float32)
    x[::5] -= 200.0     # rows the block-wide shift would underflow: redone row by row
    np.testing.assert_allclose(array_rows.softmax_last_dim(XP, x, log),
                               array_rows.softmax_last_dim(np, x, log), rtol=2e-6, atol=1e-7)


def test_backend_linear_on_the_stand_in(monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")
    be, ref = ArrayBackend(XP, "cupy-like"), ArrayBackend(np, "cpu")
    x = RNG.standard_normal((40, 64)).astype(np.float32)
    w = RNG.standard_normal((64, 96)).astype(np.float32)
    b, r = RNG.standard_normal(96).astype(np.float32), RNG.standard_normal((40, 96)).astype(np.float32)
    args = (x.reshape(-1), Layout((40, 64)), w.reshape(-1), Layout((64, 96)), b, Layout((96,)),
            dt.f32, "gelu", r.reshape(-1), Layout((40, 96)))
    np.testing.assert_array_equal(be.linear(*args), ref.linear(*args))
