"""backends.addresses.address gives numpy's own address for every kind of array: the
fast way's (writable C-contiguous) and the fallback's (read-only, strided, empty)."""

import numpy as np
import pytest

from ember.backends.addresses import address

_BASE = np.arange(24, dtype=np.float32).reshape(4, 6)


@pytest.mark.parametrize(
    "array",
    [
        _BASE,
        _BASE[1:],  # a contiguous view at an offset
        _BASE[:, 2:],  # rows apart
        _BASE.T,
        _BASE[::2],
        np.empty(0, np.float32),
        np.frombuffer(b"abcdefgh", np.uint8),  # read-only
        np.zeros((3, 5), np.int64)[1],
    ],
)
def test_address_is_numpys(array):
    assert address(array) == array.ctypes.data
