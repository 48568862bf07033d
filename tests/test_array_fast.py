"""The array backend's in-place activation forms agree bit for bit with their ops.py rows
(the reference forms), never write their input, and serve every float dtype and shape."""
import numpy as np
import pytest

import ember
from ember.backends.array_fast import UNARY_INPLACE
from ember.ops import UNARY

SPECIAL = [0.0, -0.0, 1e-40, -1e-40, 1e-310, np.inf, -np.inf, np.nan, 30.0, -30.0, 1e30, -1e30]


@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", sorted(UNARY_INPLACE))
def test_inplace_form_is_bit_identical_to_the_ops_row(op, np_dtype):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(50_000) * 4, SPECIAL]).astype(np_dtype)
    x.flags.writeable = False  # the form must not write its input (it may be an mmap)
    with np.errstate(all="ignore"):
        got = UNARY_INPLACE[op](np, x)
        want = UNARY[op].array(np, x)
    assert got.dtype == np_dtype
    bits = np.uint32 if np_dtype == np.float32 else np.uint64
    same = (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("op", sorted(UNARY_INPLACE))
def test_tensor_ops_use_it_on_strided_and_0d_inputs(op, dtype):
    base = np.random.default_rng(1).standard_normal((6, 10)).astype(np.float32)
    dt = ember.as_dtype(dtype)
    x = ember.tensor(base).to(dt)
    for view in (x, x.t(), x[::2, 1::3], x[0, 0]):
        got = getattr(view, op)()
        ref = view.to(ember.f32).numpy() if dt is not ember.f64 else view.numpy()
        with np.errstate(all="ignore"):
            want = ember.tensor(np.asarray(UNARY[op].array(np, np.asarray(ref))), dtype=dt)
        assert got.shape == view.shape and got.dtype is dt
        np.testing.assert_array_equal(got.to(ember.f64).numpy(), want.to(ember.f64).numpy())
    assert np.array_equal(x.to(ember.f32).numpy(), ember.tensor(base).to(dt).to(ember.f32).numpy())
