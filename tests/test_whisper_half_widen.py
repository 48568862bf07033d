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


@pytest.fixture
def three_threads(monkeypatch):
    """ember's CPU threads at three, whatever this machine has: the blocks and bands of a
    widening then split over a pool, as on a multi-core machine."""
    from ember.backends import row_parallel

    monkeypatch.setitem(row_parallel._state, "workers", 3)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    yield
    if row_parallel._state["pool"] is not None:
        row_parallel._state["pool"].shutdown()


@pytest.mark.parametrize("block", [half_widen.BLOCK, 1000, 7])
def test_widening_split_over_threads_gives_the_same_bits(monkeypatch, three_threads, block):
    monkeypatch.setattr(half_widen, "BLOCK", block)
    big = np.tile(ALL, 5)  # several blocks for every thread, inf/NaN blocks among them
    np.testing.assert_array_equal(_bits(half_widen.widen_f16(big)), _bits(big.astype(np.float32)))


@pytest.mark.parametrize("block", [half_widen.BLOCK, 1000, 7])
@pytest.mark.parametrize("shape", [(256, 256), (4096, 16), (16, 4096), (1, 1 << 16), (1 << 16, 1)])
def test_transposed_widening_is_the_cast_transposed(monkeypatch, three_threads, block, shape):
    monkeypatch.setattr(half_widen, "BLOCK", block)
    a = ALL.reshape(shape)
    got = half_widen.widen_f16_transposed(a)
    assert got.dtype == np.float32 and got.shape == shape[::-1] and got.flags.c_contiguous
    np.testing.assert_array_equal(_bits(got), _bits(a.astype(np.float32).T))
    # a strided source (every other row) too
    np.testing.assert_array_equal(
        _bits(half_widen.widen_f16_transposed(a[::2])), _bits(a[::2].astype(np.float32).T)
    )
