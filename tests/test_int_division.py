"""Integer floor division on every device equals numpy's, at the edges too: the i32
minimum (whose abs() does not fit an i32: WebGPU once gave -2**31 // 2 = +2**30), mixed
signs, and unsigned values past 2**31; on WebGPU an i64 quotient past i32 (the minimum
// -1) raises at readback instead of wrapping."""

import numpy as np
import pytest

import ember
from ember.errors import UnsupportedDType

LO = -(2**31)


@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_signed_floor_division_matches_numpy(device, dtype):
    a = np.array([LO, LO, LO, LO + 1, -7, 7, -7, 0, 2**31 - 1, 2**31 - 1], np.int64)
    b = np.array([2, 3, 1, -1, 2, -2, -2, 3, -3, 2**31 - 1], np.int64)
    got = (
        ember.tensor(a, dtype=dtype, device=device)
        .div(ember.tensor(b, dtype=dtype, device=device))
        .tolist()
    )
    assert got == (a // b).tolist()


def test_unsigned_floor_division_matches_numpy(device):
    a = np.array([7, 2**32 - 1, 2**31, 10], np.uint32)
    b = np.array([2, 3, 7, 10], np.uint32)
    got = ember.tensor(a, device=device).div(ember.tensor(b, device=device)).tolist()
    assert got == (a // b).tolist()


def test_i64_quotient_past_i32_is_exact_or_refused(device):
    q = ember.tensor([LO], dtype="i64", device=device).div(
        ember.tensor([-1], dtype="i64", device=device)
    )
    if device.kind == "cpu":
        assert q.tolist() == [2**31]
    else:
        with pytest.raises(UnsupportedDType, match="div gave a result outside i32"):
            q.tolist()
        # the flag is cleared: the next readback is exact again
        assert ember.tensor([-9], dtype="i64", device=device).div(
            ember.tensor([2], dtype="i64", device=device)
        ).tolist() == [-5]
