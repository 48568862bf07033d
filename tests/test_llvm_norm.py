"""llvm_norm's compiled layer and RMS norms (array_rows.norm_last_dim on numpy float32):
float64's values for every option (residual, weight, bias) and width (vector lanes and
their tails), one row or many threads' blocks alike, and numpy's own form where the
kernel cannot take the arrays."""

import numpy as np
import pytest

from ember.backends import array_rows

RNG = np.random.default_rng(11)


def _reference(x, weight, bias, eps, rms, residual):
    y = x.astype(np.float64) + (0 if residual is None else residual)
    if not rms:
        y = y - y.mean(-1, keepdims=True)
    y = y / np.sqrt((y * y).mean(-1, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
@pytest.mark.parametrize("cols", [1, 7, 64, 640, 1027])
@pytest.mark.parametrize("parts", ["plain", "weight", "weight+bias", "residual+weight+bias"])
def test_compiled_norms_give_float64s_values(rms, cols, parts, norm_kernels, monkeypatch):
    x = (RNG.standard_normal((5, cols)) * 3 + 1).astype(np.float32)
    weight = RNG.standard_normal(cols).astype(np.float32) if "weight" in parts else None
    bias = RNG.standard_normal(cols).astype(np.float32) if "bias" in parts else None
    residual = RNG.standard_normal((5, cols)).astype(np.float32) if "residual" in parts else None
    calls = []
    real = norm_kernels.norm
    monkeypatch.setattr(norm_kernels, "norm", lambda *a: calls.append(1) or real(*a))
    got = array_rows.norm_last_dim(np, x, weight, bias, 1e-5, rms, residual)
    assert calls == [1] and got.dtype == np.float32 and got.shape == x.shape
    want = _reference(x, weight, bias, 1e-5, rms, residual)
    # one column: a layer norm's deviation is exactly 0, the result its bias (or 0)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_many_rows_go_in_blocks_over_the_threads_with_one_rows_bits(norm_kernels, monkeypatch):
    x = RNG.standard_normal((3000, 384)).astype(np.float32)
    w, b = (RNG.standard_normal(384).astype(np.float32) for _ in range(2))
    res = RNG.standard_normal((3000, 384)).astype(np.float32)
    blocks = []
    real = norm_kernels.norm
    monkeypatch.setattr(
        norm_kernels, "norm", lambda x2, *a: blocks.append(x2.shape[0]) or real(x2, *a)
    )
    whole = array_rows.norm_last_dim(np, x, w, b, 1e-5, False, res)
    assert len(blocks) > 1 and sum(blocks) == 3000  # blocks of rows, every row once
    for r in (0, 1234, 2999):  # a row alone: the same bits as inside a block
        alone = array_rows.norm_last_dim(np, x[r : r + 1], w, b, 1e-5, False, res[r : r + 1])
        np.testing.assert_array_equal(alone[0], whole[r])
    np.testing.assert_allclose(whole, _reference(x, w, b, 1e-5, False, res), rtol=2e-6, atol=2e-6)


def test_arrays_the_kernel_cannot_take_go_the_numpy_way(norm_kernels, monkeypatch):
    calls = []
    real = norm_kernels.norm
    monkeypatch.setattr(norm_kernels, "norm", lambda *a: calls.append(1) or real(*a))
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    w = RNG.standard_normal(32).astype(np.float32)[::2]  # a strided weight
    got = array_rows.norm_last_dim(np, x, w, None, 1e-6, True)
    x64 = x.astype(np.float64)
    got64 = array_rows.norm_last_dim(np, x64, None, None, 1e-6, True)  # float64 rows
    assert calls == [] and got64.dtype == np.float64
    np.testing.assert_allclose(got, _reference(x, w, None, 1e-6, True, None), rtol=2e-6)
    np.testing.assert_allclose(got64, _reference(x, None, None, 1e-6, True, None), rtol=1e-12)


@pytest.mark.parametrize("rms", [True, False])
@pytest.mark.parametrize(
    "shape, narrow",
    [
        ((1, 1, 640), None),
        ((1, 1, 6, 256), (2, 0, 4)),
        ((1, 1, 6, 256), (2, 4, 1)),
        ((3, 1, 64), None),
    ],
)
def test_a_decode_steps_norm_goes_straight_to_the_kernel_with_its_bits(
    norm_kernels, monkeypatch, rms, shape, narrow
):
    """ArrayBackend.layer_norm's small path (a decode step's hidden state, a head's
    view of the q/k/v projection) calls the kernel directly: norm_last_dim's bits."""
    import ember
    from ember import dtype as dt
    from ember.layout import Layout

    be = ember.Device.parse("cpu").backend
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(int(np.prod(shape))).astype(np.float32)
    layout = Layout(shape) if narrow is None else Layout(shape).narrow(*narrow)
    cols = layout.shape[-1]
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    lw = Layout((cols,))
    from ember.backends import array as array_backend

    calls = []
    monkeypatch.setattr(array_backend, "norm_last_dim", lambda *a, **k: calls.append(a))
    got = be.layer_norm(x, layout, w, lw, None if rms else b, lw, 1e-5, dt.f32, rms=rms)
    assert calls == []  # the small path took it
    monkeypatch.undo()
    want = array_rows.norm_last_dim(np, be.view(x, layout), w, None if rms else b, 1e-5, rms)
    np.testing.assert_array_equal(got.view(np.uint32), want.reshape(-1).view(np.uint32))


def test_a_strided_weight_keeps_the_decode_norm_off_the_kernel(norm_kernels):
    """The small path reads weights as contiguous rows: a strided one (every other
    element of a longer array) takes norm_last_dim's way, with its values."""
    import ember
    from ember import dtype as dt
    from ember.layout import Layout

    be = ember.Device.parse("cpu").backend
    rng = np.random.default_rng(11)
    x = rng.standard_normal(64).astype(np.float32)
    w = rng.standard_normal(128).astype(np.float32)
    strided = Layout((64,), (2,), 0)
    got = be.layer_norm(x, Layout((1, 1, 64)), w, strided, None, None, 1e-5, dt.f32, rms=True)
    want = x / np.sqrt(np.mean(x.astype(np.float64) ** 2) + 1e-5) * w[::2]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
