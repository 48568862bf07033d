"""matmul with batch broadcasting and 1-D operands, on every device, dtype and layout."""
import numpy as np
import pytest

import ember
from strided import ALL, F32Guard, FLOATS, VARIANTS, check, on_device, rng_for, sample, variant

# (lhs shape, rhs shape): plain, batched, batch-broadcast, 1-D on either side, empty.
SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (3, 4, 2)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((0, 4), (4, 5)),
    ((3, 0), (0, 5)),
    ((2, 0, 4), (4, 3)),
]


def _tol(dtype_name, k):
    # f16/bf16 results are rounded once; their inputs are exact, the sum runs in f32.
    return {"f32": (1e-5, 1e-5), "f64": (1e-12, 1e-12)}.get(dtype_name, (None, None))


def _layouts(kind, shape, dtype_name, device, rng):
    if kind == "transposed" and len(shape) < 2 or kind != "contiguous" and len(shape) < 1:
        kind = "contiguous"
    if kind == "broadcast" and len(shape) < 2:
        kind = "sliced"
    return variant(kind, shape, dtype_name, device, rng, 0, 5)


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_matmul(device, dtype_name, kind):
    for lhs, rhs in SHAPES:
        rng = rng_for("matmul", dtype_name, kind, lhs, rhs)
        a, x = _layouts(kind, lhs, dtype_name, device, rng)
        b, y = _layouts("contiguous" if kind == "broadcast" else kind, rhs, dtype_name, device,
                        rng)
        expected = np.matmul(x, y)
        if dtype_name in ("u8",):
            expected = np.matmul(x.astype(np.int64), y.astype(np.int64)).astype(np.uint8)
        check(a @ b, expected, dtype_name, *_tol(dtype_name, lhs[-1]))
        check(ember.matmul(a, b), expected, dtype_name, *_tol(dtype_name, lhs[-1]))


@pytest.mark.parametrize("dtype_name", FLOATS)
def test_matmul_transposed_weight_like_linear(device, dtype_name):
    """x (B, T, K) @ W.T with W (N, K): the shape of every Linear layer."""
    rng = rng_for("linear", dtype_name)
    x = sample((2, 3, 8), dtype_name, rng)
    w = sample((6, 8), dtype_name, rng)
    bias = sample((6,), dtype_name, rng)
    tx, tw, tb = (on_device(v, dtype_name, device) for v in (x, w, bias))
    check(tx @ tw.t(), x @ w.T, dtype_name, *_tol(dtype_name, 8))
    check(tx @ tw.T, x @ w.T, dtype_name, *_tol(dtype_name, 8))
    check(ember.linear(tx, tw, tb), x @ w.T + bias, dtype_name, *_tol(dtype_name, 8))


def test_matmul_larger_f32(device):
    """One size past any small-tile kernel edge cases (odd sizes, K not a multiple of 4)."""
    rng = rng_for("matmul-large")
    x = sample((33, 67), "f32", rng)
    y = sample((67, 29), "f32", rng)
    check(on_device(x, "f32", device) @ on_device(y, "f32", device), x @ y, "f32", 1e-5, 1e-5)


class _MatmulSpy(F32Guard):
    calls = []

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc is np.matmul:
            _MatmulSpy.calls.append([np.asarray(i) for i in inputs])
        return super().__array_ufunc__(ufunc, method, *inputs, **kwargs)


def _cpu_tensor(values, shape):
    """A CPU tensor whose storage is the spy array itself (so the backend's views are too)."""
    return ember.Tensor(values.reshape(-1).view(_MatmulSpy), ember.Layout(shape), ember.f32,
                        ember.Device.cpu())


def test_linear_shaped_matmul_is_one_2d_gemm_without_copying_the_weight():
    """Fast by construction: 3-D x @ W.T runs one large 2-D GEMM on the transposed weight
    in place (BLAS takes a transposed operand), not one small GEMM per batch row."""
    rng = rng_for("gemm")
    x = sample((4, 5, 8), "f32", rng)
    w = sample((6, 8), "f32", rng)
    tx, tw = _cpu_tensor(x, x.shape), _cpu_tensor(w, w.shape)
    _MatmulSpy.calls.clear()
    out = tx @ tw.t()
    assert len(_MatmulSpy.calls) == 1, "one GEMM"
    lhs, rhs = _MatmulSpy.calls[0]
    assert lhs.shape == (20, 8) and rhs.shape == (8, 6)
    assert np.shares_memory(rhs, tw.storage), "the transposed weight was copied"
    assert np.shares_memory(lhs, tx.storage), "a contiguous input was copied"
    np.testing.assert_allclose(out.numpy(), x @ w.T, rtol=1e-5, atol=1e-5)
    assert out.numpy().dtype == np.float32


def test_batched_matmul_runs_on_contiguous_operands():
    """A batched matmul with a transposed batch operand feeds BLAS-friendly inner matrices."""
    rng = rng_for("bmm")
    x = sample((3, 4, 5), "f32", rng)
    y = sample((3, 6, 5), "f32", rng)
    tx, ty = _cpu_tensor(x, x.shape), _cpu_tensor(y, y.shape)
    _MatmulSpy.calls.clear()
    out = tx @ ty.transpose(1, 2)
    assert len(_MatmulSpy.calls) == 1
    for operand in _MatmulSpy.calls[0]:
        inner = operand.strides[-2:]
        assert operand.itemsize in inner, f"inner strides {inner} have no unit stride"
    np.testing.assert_allclose(out.numpy(), x @ y.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


def test_matmul_keeps_f32():
    rng = rng_for("f32")
    x = sample((2, 3, 4), "f32", rng)
    tx = _cpu_tensor(x, x.shape)
    assert (tx @ tx.transpose(1, 2)).numpy().dtype == np.float32
