"""numba's vectorized float32 exponentials (backends/array_exp_jit.py): exp_rows_sum against
float64's exp over f32's range, its IEEE-like ends (inf, 0, NaN), row sums, and results
that do not depend on which rows a call is given."""
import numpy as np
import pytest

from helpers import missing


@pytest.fixture
def kernels():
    """array_exp_jit: skipped where numba is not installed, a failure under CI=true."""
    from ember.backends import optional_jit

    try:
        import numba  # noqa: F401
    except ImportError as exc:
        missing("numba (the ember[jit] extra)", str(exc))
    module = optional_jit.jit_module("array_exp_jit")
    if module is None:
        missing("the numba exponentials", "EMBER_JIT=0 is set")
    return module


@pytest.mark.parametrize("scale", [0.5, 6.0, 30.0])
def test_exp_is_within_a_few_ulps_of_float64(kernels, scale):
    rng = np.random.default_rng(int(scale * 10))
    x = np.clip(rng.standard_normal((64, 1500)) * scale, -86.9, 87.9).astype(np.float32)
    got, total = x.copy(), np.empty(64, np.float32)
    kernels.exp_rows_sum(got, total)
    want = np.exp(x.astype(np.float64))
    assert (np.abs(got - want) / want).max() < 4e-7  # numpy's own f32 exp: ~2e-7
    sums = want.sum(axis=-1)
    fits = sums < np.finfo(np.float32).max  # the others overflow f32, to inf
    np.testing.assert_allclose(total[fits], sums[fits], rtol=2e-6)
    assert np.isposinf(total[~fits]).all()


def test_values_past_the_range_are_ieee_like(kernels):
    x = np.array([[np.nan, 88.5, 100.0, np.inf, -87.5, -200.0, -np.inf, 0.0]], np.float32)
    got, total = x.copy(), np.empty(1, np.float32)
    kernels.exp_rows_sum(got, total)
    assert np.isnan(got[0, 0])
    assert np.isposinf(got[0, 1:4]).all()
    assert (got[0, 4:7] == 0.0).all()
    assert got[0, 7] == 1.0
    assert np.isnan(total[0])  # a NaN in a row makes its sum NaN: the softmax redoes it


def test_a_row_gives_the_same_bits_in_any_batch_of_rows(kernels):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((7, 333)) * 4).astype(np.float32)
    whole, total = x.copy(), np.empty(7, np.float32)
    kernels.exp_rows_sum(whole, total)
    for i in range(7):
        one, t = x[i : i + 1].copy(), np.empty(1, np.float32)
        kernels.exp_rows_sum(one, t)
        np.testing.assert_array_equal(one[0], whole[i])
        np.testing.assert_array_equal(t[0], total[i])
