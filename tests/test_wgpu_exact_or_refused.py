"""Results a device cannot give exactly are refused, never silently wrong (issue 10.4),
on every device: reductions past 2^32 elements, i64 values outside the 32 bits WebGPU
holds them in, and NaN through maximum / minimum / clamp (numpy's answers)."""
import math

import numpy as np
import pytest

import ember


def test_reduction_over_more_than_2_pow_32_elements_is_right_or_refused(device):
    x = ember.ones(1, device=device).expand(2 ** 32 + 5)
    try:
        total = x.sum().item()
    except ember.UnsupportedOp as exc:
        assert "2^32" in str(exc) and "reduce" in str(exc)
        return
    # f32 holds 2^32 + 5 as 2^32: the sum numpy's float32 gives, never a wrapped count.
    assert total == float(np.float32(2 ** 32 + 5))


@pytest.mark.parametrize("make", [
    lambda d: ember.full((2,), 2 ** 62, dtype=ember.i64, device=d),
    lambda d: ember.tensor([2 ** 40, 1], dtype=ember.i64, device=d),
    lambda d: ember.tensor([3, 1], dtype=ember.i64, device=d) * 2 ** 40,
    lambda d: ember.tensor([3, 1], dtype=ember.i64, device=d) + (-2 ** 33),
], ids=["full", "upload", "mul_scalar", "add_scalar"])
def test_i64_values_are_exact_or_refused(device, make):
    expected = {"full": [2 ** 62] * 2, "upload": [2 ** 40, 1],
                "mul_scalar": [3 * 2 ** 40, 2 ** 40], "add_scalar": [3 - 2 ** 33, 1 - 2 ** 33]}
    try:
        got = make(device).tolist()
    except ember.UnsupportedDType as exc:
        assert device.kind == "wgpu"        # the CPU holds i64 as it is
        assert "i64" in str(exc) and "32 bits" in str(exc)
        return
    assert got in expected.values()


def test_clamp_bounds_past_i32_are_exact_on_i64(device):
    """clamp with one bound given uses the dtype's whole range for the other: a bound
    outside what the device holds clamps nothing more, so it is exact, not refused."""
    x = ember.tensor([-5, 0, 7], dtype=ember.i64, device=device)
    assert x.clamp(min=0).tolist() == [0, 0, 7]
    assert x.clamp(max=2 ** 40).tolist() == [-5, 0, 7]


def test_maximum_minimum_clamp_keep_nan_like_numpy(device):
    a = np.array([1.0, np.nan, 3.0, -1.0, np.nan], dtype=np.float32)
    b = np.array([np.nan, 2.0, 1.0, 0.0, np.nan], dtype=np.float32)
    ta, tb = ember.tensor(a, device=device), ember.tensor(b, device=device)
    np.testing.assert_array_equal(ta.maximum(tb).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(ta.minimum(tb).numpy(), np.minimum(a, b))
    np.testing.assert_array_equal(ta.clamp(0.0, 2.0).numpy(), np.clip(a, 0.0, 2.0))
    got = ta.clamp(min=math.nan).numpy()
    assert np.isnan(got).all()
    # Integers have no NaN: the same expressions stay plain max/min/clamp.
    i = ember.tensor([1, 5, -3], dtype=ember.i32, device=device)
    assert i.maximum(ember.tensor([2, 2, 2], dtype=ember.i32, device=device)).tolist() == [2, 5, 2]
    assert i.clamp(0, 2).tolist() == [1, 2, 0]
