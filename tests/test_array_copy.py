"""The numpy backend's contiguous copy (backends/array_copy.py): a short broadcast
innermost axis (a nearest upsampling's repeat) is written as separate copies; every view
copies to numpy's own result, values and layout."""

import numpy as np
import pytest

import ember
from ember.backends.array_copy import contiguous_copy


def _views():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    yield "upsampling", np.broadcast_to(x.reshape(2, 3, 4, 1, 5, 1), (2, 3, 4, 2, 5, 3))
    yield "last axis only", np.broadcast_to(x[..., None], x.shape + (2,))
    yield "long broadcast", np.broadcast_to(x[..., None], x.shape + (40,))
    yield "transposed", x.transpose(0, 3, 1, 2)
    yield "strided", x[:, ::2, 1:, ::-2]
    yield "1-d broadcast", np.broadcast_to(np.float32(3), (4,))
    yield "empty", np.broadcast_to(x[:, :, :0, :, None], (2, 3, 0, 5, 2))
    yield "ints", np.broadcast_to(np.arange(6).reshape(2, 3, 1), (2, 3, 4))


@pytest.mark.parametrize("name, view", list(_views()), ids=[n for n, _ in _views()])
def test_the_copy_equals_numpys(name, view):
    got = contiguous_copy(np, view)
    assert got.flags.c_contiguous and got.dtype == view.dtype and got.shape == view.shape
    np.testing.assert_array_equal(got, np.ascontiguousarray(view))
    assert not np.shares_memory(got, view)


def test_nearest_upsampling_through_the_backend_repeats_rows_and_columns():
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 5)).astype(np.float32)
    got = ember.functional.upsample_nearest2d(ember.tensor(x), scale_factor=2).numpy()
    np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(2, axis=3))
