"""half_widen (the f16 -> f32 widening of a CTranslate2 Whisper's weights) against numpy's
own cast, bit for bit: every one of the 65,536 float16 patterns (zeros, subnormals,
normals, inf, NaN with their payloads), in blocks with and without inf/NaN, any shape."""

import numpy as np
import pytest

from ember.io import half_widen

ALL = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _bits(a):
    return a.view(np.uint32)


@pytest.mark.parametrize("block", [half_widen.BLOCK, 1000, 7])
def test_every_f16_pattern_widens_as_numpy_casts(monkeypatch, block):
    monkeypatch.setattr(half_widen, "BLOCK", block)
    finite = ALL[np.isfinite(ALL)]  # blocks without inf/NaN take the bit path throughout
    for a in (ALL, ALL[::-1], finite, finite[::-3], ALL.reshape(256, 256), ALL[:0]):
        got = half_widen.widen_f16(a)
        assert got.dtype == np.float32 and got.shape == a.shape
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(_bits(got), _bits(a.astype(np.float32)))


def test_widen_all_leaves_other_dtypes_alone():
    ints = np.arange(4, dtype=np.int32)
    f32 = np.ones(3, np.float32)
    out = half_widen.widen_all_f16({"h": ALL[:5], "i": ints, "f": f32})
    assert out["i"] is ints and out["f"] is f32 and out["h"].dtype == np.float32
