"""The numpy backend's rope (four in-place passes) gives the contract composite's bits in
f32, for both pair layouts, both table ranks and a strided input: one algorithm whichever
path runs it."""
import numpy as np
import pytest

import ember
from ember.backends import composites
from ember.layout import Layout

CASES = [((2, 3, 5, 8), (5, 4)), ((2, 3, 5, 8), (2, 5, 4)), ((1, 4, 1, 64), (1, 32)),
         ((3, 7, 16), (7, 8))]


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("shape, tshape", CASES)
def test_numpy_rope_equals_the_composite(cpu, shape, tshape, interleaved):
    be = cpu.backend
    rng = np.random.default_rng(len(shape) * 7 + len(tshape))
    x, c, s = (rng.standard_normal(sh).astype(np.float32) for sh in (shape, tshape, tshape))
    x_view = Layout(shape)
    if len(shape) == 4:   # a strided view, as llama's [b, heads, t, hd] transpose is
        x = np.ascontiguousarray(np.swapaxes(x, 1, 2))
        x_view = Layout(x.shape).transpose(1, 2)

    def st(a):
        return be.from_host(a, ember.f32, a.shape)

    args = (st(x), x_view, st(c), Layout(tshape), st(s), Layout(tshape), ember.f32, interleaved)
    fast = np.asarray(be.rope(*args))
    composed = np.asarray(composites.rope(be, *args))
    np.testing.assert_array_equal(fast, composed)
    assert fast.size == np.prod(shape)
