"""WebGPU matmul at the sizes where the register-tiled kernels run (M of 8 and more; the
general matmul tests use M of at most 3): x @ W and x @ W.T (a Linear layer), M, N and K
off every tile and block size, batched and broadcast W, f16 storage, and K long enough to
be split into accumulated partial products. On lavapipe these run matmul_nt_sg (x @ W
through matmul_transpose); on GPUs matmul_nn / matmul_nt. Expected values: numpy."""
import numpy as np
import pytest

import ember
from wgpu_device import wgpu  # noqa: F401  (fixture)

# (x shape, W shape as x @ W takes it): M of 8 (the smallest that takes the tiled CPU
# path), M not a multiple of the 8-row tile, K not a multiple of the 32-value blocks the
# subgroup kernel steps by, N not a multiple of the 64-invocation workgroups.
SHAPES = [
    ((8, 4), (4, 4)),
    ((9, 36), (36, 68)),
    ((17, 132), (132, 20)),
    ((130, 1000), (1000, 260)),
    ((3, 33, 260), (3, 260, 72)),     # batched W
    ((4, 16, 64), (64, 32)),          # one W for every batch (batch stride 0)
    ((2, 1, 15, 64), (1, 3, 64, 8)),  # both broadcast
]


def _w_t(wgpu, w):
    """W stored [.., N, K] as a Linear layer keeps it, used as [.., K, N]."""
    return ember.tensor(np.ascontiguousarray(np.swapaxes(w, -1, -2)), device=wgpu).transpose(-1, -2)


@pytest.mark.parametrize("layout", ["x @ W", "x @ W.T"])
@pytest.mark.parametrize("xs,ws", SHAPES)
def test_matmul_f32_tiled(wgpu, xs, ws, layout):
    rng = np.random.default_rng(len(xs) * 1000 + xs[-1] + ws[-1])
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    tw = ember.tensor(w, device=wgpu) if layout == "x @ W" else _w_t(wgpu, w)
    got = (ember.tensor(x, device=wgpu) @ tw).numpy()
    expected = x.astype(np.float64) @ w.astype(np.float64)
    k = xs[-1]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.sqrt(k) * 4)


@pytest.mark.parametrize("layout", ["x @ W", "x @ W.T"])
def test_matmul_f16_tiled(wgpu, layout):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 260)).astype(np.float16)
    w = rng.standard_normal((260, 36)).astype(np.float16)
    tx = ember.tensor(x, device=wgpu)
    tw = ember.tensor(w, device=wgpu) if layout == "x @ W" else _w_t(wgpu, w)
    got = (tx @ tw).numpy()
    assert got.dtype == np.float16
    # The sum runs in f32 and is rounded to f16 once.
    expected = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                               rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("layout", ["x @ W", "x @ W.T"])
def test_matmul_long_k_tiled(wgpu, layout):
    """K past 32,768 runs as partial products added into the output."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((9, 40004)).astype(np.float32)
    w = rng.standard_normal((40004, 12)).astype(np.float32)
    tw = ember.tensor(w, device=wgpu) if layout == "x @ W" else _w_t(wgpu, w)
    got = (ember.tensor(x, device=wgpu) @ tw).numpy()
    expected = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-3)
