"""llvm_math's compiled exponentials and row sums (an unshifted softmax's, in numpy's
attention tiles) against float64: every element within float32 rounding, overflow to
+inf and underflow to 0 where float32's exp gives them, rows apart in memory, and the
attention taking them (GELU: tests/test_array_fast.py)."""

import numpy as np
import pytest

from ember.backends import array_attention, array_attention_rows, llvm_math


@pytest.mark.parametrize("cols", [1, 7, 8, 9, 64, 1500])
def test_exp_rows_is_exp_and_its_sums(math_kernels, cols):
    rng = np.random.default_rng(cols)
    s = (rng.standard_normal((5, cols)) * 8).astype(np.float32)
    want = np.exp(s.astype(np.float64))
    got, total = s.copy(), np.empty(5, np.float32)
    math_kernels.exp_rows(got, total)
    assert (np.abs(got - want) / want).max() < 2e-7
    assert (np.abs(total - want.sum(1)) / want.sum(1)).max() < 2e-6


def test_exp_rows_overflows_to_inf_and_underflows_to_zero(math_kernels):
    """Past 127 ln 2 (llvm_math.EXP_MAX, where float32's own exp is close to overflowing
    too) +inf, so the attention redoes the row shifted; under the smallest normal 0."""
    s = np.array([[0.0, 88.0, 88.03, 88.72, 1000.0, -87.3, -87.34, -1000.0, np.nan, -np.inf,
                   np.inf]], np.float32)
    got, total = s.copy(), np.empty(1, np.float32)
    math_kernels.exp_rows(got, total)
    within = (s >= llvm_math.EXP_MIN) & (s <= llvm_math.EXP_MAX)
    np.testing.assert_allclose(got[within], np.exp(s[within].astype(np.float64)), rtol=2e-7)
    assert got[0, 3] == got[0, 4] == got[0, 10] == np.inf
    assert got[0, 6] == got[0, 7] == got[0, 9] == 0.0
    assert np.isnan(got[0, 8]) and np.isnan(total[0])


def test_exp_rows_takes_rows_apart_and_leaves_the_gaps(math_kernels):
    rng = np.random.default_rng(2)
    wide = rng.standard_normal((4, 40)).astype(np.float32)
    before = wide.copy()
    total = np.empty(4, np.float32)
    math_kernels.exp_rows(wide[:, 3:30], total)
    np.testing.assert_allclose(wide[:, 3:30], np.exp(before[:, 3:30]), rtol=2e-7)
    assert np.array_equal(wide[:, :3], before[:, :3]) and np.array_equal(wide[:, 30:], before[:, 30:])
    with pytest.raises(ValueError, match="totals"):
        math_kernels.exp_rows(wide[:, 3:30], np.empty(3, np.float32))
    with pytest.raises(ValueError, match="float32 rows"):
        math_kernels.exp_rows(wide[:, ::2], total)


def test_attention_tiles_take_the_kernel_and_agree_with_numpys_exp(math_kernels, monkeypatch):
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 3, 50, 16)).astype(np.float32) for _ in range(3))
    q[0, 0, 0] *= 40  # a row over exp's range: redone shifted either way
    # the BLAS tiles' path (many unmasked queries otherwise take llvm_attention_rows)
    monkeypatch.setattr(array_attention_rows, "MIN_QUERIES", 1 << 30)
    calls = []
    real = math_kernels.exp_rows
    monkeypatch.setattr(math_kernels, "exp_rows", lambda s, t: calls.append(s.shape) or real(s, t))

    class Backend:
        xp = np

    compiled = array_attention.attention(Backend(), q, k, v, None, 0.25, None)
    assert calls
    monkeypatch.setenv("EMBER_JIT", "0")  # numpy's exp and sum
    numpy_exp = array_attention.attention(Backend(), q, k, v, None, 0.25, None)
    np.testing.assert_allclose(compiled, numpy_exp, rtol=2e-6, atol=1e-6)
    assert np.isfinite(compiled).all()
