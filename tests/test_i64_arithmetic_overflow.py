"""i64 arithmetic never wraps silently (issue 10.4): WebGPU holds i64 as i32, so a result
outside i32 is refused at the next readback, naming the op; the CPU gives numpy's exact
int64 value. i32 wraps on every device, as numpy's int32 does."""
import asyncio

import numpy as np
import pytest

import ember
from wgpu_device import wgpu  # noqa: F401  (fixture)

BIG = 2 ** 20
I64 = ember.i64


def _t(values, device, dtype=I64):
    return ember.tensor(values, dtype=dtype, device=device)


# (op named in the error, the computation, numpy's int64 answer)
CASES = [
    ("mul", lambda d: _t([BIG, 3], d) * BIG, np.array([BIG, 3], np.int64) * BIG),
    ("mul", lambda d: _t([BIG, 3], d) * _t([BIG, -BIG], d),
     np.array([BIG, 3], np.int64) * np.array([BIG, -BIG], np.int64)),
    ("add", lambda d: _t([2 ** 30, 1], d) + _t([2 ** 30, 1], d),
     np.array([2 ** 31, 2], np.int64)),
    ("sub", lambda d: _t([-2 ** 30 - 1, 0], d) - 2 ** 30, np.array([-2 ** 31 - 1, -2 ** 30])),
    ("neg", lambda d: -_t([-2 ** 31, 5], d), np.array([2 ** 31, -5], np.int64)),
    ("abs", lambda d: _t([-2 ** 31, -5], d).abs(), np.array([2 ** 31, 5], np.int64)),
    ("square", lambda d: _t([2 ** 16, 3], d).square(), np.array([2 ** 32, 9], np.int64)),
    ("affine", lambda d: _t([2 ** 30, 1], d).affine(2, 1), np.array([2 ** 31 + 1, 3])),
    ("affine", lambda d: 5 - _t([-2 ** 31 + 1, 1], d), np.array([2 ** 31 + 4, 4])),
    ("sum", lambda d: _t([2 ** 30] * 3, d).sum(), np.int64(3 * 2 ** 30)),
    # 70,000 elements: the two-pass reduction (chunk partials, then their sum).
    ("sum", lambda d: ember.full((70000,), 2 ** 16, dtype=I64, device=d).sum(),
     np.int64(70000 * 2 ** 16)),
    ("prod", lambda d: _t([2 ** 16, 2 ** 15, -2], d).prod(), np.int64(-2 ** 32)),
    ("cumsum", lambda d: _t([2 ** 30, 2 ** 30, -5], d).cumsum(0),
     np.array([2 ** 30, 2 ** 31, 2 ** 31 - 5], np.int64)),
    ("matmul", lambda d: _t([[BIG, 1]], d) @ _t([[BIG], [2]], d), np.array([[BIG * BIG + 2]])),
    ("matmul", lambda d: _t([[2 ** 30, 2 ** 30]], d) @ _t([[1], [1]], d),
     np.array([[2 ** 31]], np.int64)),
]


@pytest.mark.parametrize("op, compute, expected", CASES,
                         ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_i64_past_32_bits_is_exact_or_refused_naming_the_op(device, op, compute, expected):
    if device.kind == "cpu":
        assert compute(device).tolist() == expected.tolist()
        return
    result = compute(device)
    with pytest.raises(ember.UnsupportedDType,
                       match=rf"i64 values past 32 bits on WebGPU: .*\b{op}\b"):
        result.tolist()
    # The flag is cleared: the device goes on giving exact in-range results.
    assert (_t([3, -4], device) * 5).tolist() == [15, -20]


def test_i64_results_at_the_i32_limits_are_exact(device):
    # Exactly representable results are not flagged (the checks are not off by one).
    x = _t([2 ** 30 - 1, -2 ** 30], device)
    assert (x * 2 + 1).tolist() == [2 ** 31 - 1, -2 ** 31 + 1]
    assert (_t([-2 ** 16], device) * 2 ** 15).tolist() == [-2 ** 31]
    assert (_t([-2 ** 30], device) + (-2 ** 30)).tolist() == [-2 ** 31]
    assert (-_t([2 ** 31 - 1], device)).tolist() == [-2 ** 31 + 1]
    assert _t([2 ** 30, 2 ** 30 - 1], device).sum().item() == 2 ** 31 - 1
    assert _t([-2 ** 16, 2 ** 15], device).prod().item() == -2 ** 31
    assert _t([-2 ** 30, -2 ** 30], device).cumsum(0).tolist() == [-2 ** 30, -2 ** 31]
    assert (x - x).tolist() == [0, 0]
    assert (_t([[2 ** 15, 1]], device) @ _t([[2 ** 16 - 1], [2 ** 15 - 1]], device)).tolist() \
        == [[2 ** 31 - 1]]


def test_overflow_is_reported_by_every_readback(wgpu):
    device = wgpu
    with pytest.raises(ember.UnsupportedDType, match="mul"):
        (_t([BIG], device) * BIG).item()
    with pytest.raises(ember.UnsupportedDType, match="add"):
        (_t([2 ** 31 - 1], device) + 1).numpy()
    (_t([2 ** 31 - 1], device) + 1)
    with pytest.raises(ember.UnsupportedDType, match="add"):
        device.synchronize()
    # Async readback: the first read after the op raises, the next is clean.
    async def main():
        with pytest.raises(ember.UnsupportedDType, match="sum"):
            await _t([2 ** 30] * 2, device).sum().item_async()
        return await (_t([7], device) * 6).tolist_async()
    assert asyncio.run(main()) == [42]


def test_i32_wraps_like_numpy_on_every_device(device):
    i32 = ember.i32

    def wrap(v):
        return (v + 2 ** 31) % 2 ** 32 - 2 ** 31
    assert (_t([2 ** 30, 3], device, i32) * 4).tolist() == [wrap(2 ** 32), 12]
    assert (_t([2 ** 31 - 1], device, i32) + 1).tolist() == [wrap(2 ** 31)]
    assert _t([2 ** 30] * 3, device, i32).sum().item() == wrap(3 * 2 ** 30)
    assert _t([2 ** 30] * 2, device, i32).cumsum(0).tolist() == [2 ** 30, wrap(2 ** 31)]
    assert (-_t([-2 ** 31], device, i32)).tolist() == [-2 ** 31]
