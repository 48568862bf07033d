"""ember.functional.linear (bias, activation and residual in the GEMM's epilogue) and the
norms' `residual=`, against torch, on every device: the CPU runs them fused and
row-parallel (array_rows.py), WebGPU in the matmul and norm kernels (epilogue.py); integer
dtypes take the composite path."""
import math

import numpy as np
import pytest

import ember
import ember.functional as F
import ember.nn
from helpers import TOL, require

TORCH_ACT = {"gelu": lambda t, x: t.nn.functional.gelu(x),
             "gelu_tanh": lambda t, x: t.nn.functional.gelu(x, approximate="tanh"),
             "quick_gelu": lambda t, x: x * t.sigmoid(1.702 * x),
             "relu": lambda t, x: t.relu(x), "silu": lambda t, x: t.nn.functional.silu(x),
             "sigmoid": lambda t, x: t.sigmoid(x), "tanh": lambda t, x: t.tanh(x), None: None}


def _torch_linear(torch, x, w, b, act, res):
    y = torch.nn.functional.linear(x, w, b)
    if act is not None:
        y = TORCH_ACT[act](torch, y)
    return y + res if res is not None else y


@pytest.mark.parametrize("act", sorted(TORCH_ACT, key=str))
@pytest.mark.parametrize("with_bias,with_res", [(True, True), (True, False), (False, True),
                                                (False, False)])
def test_linear_matches_torch(device, act, with_bias, with_res):
    torch = require("torch")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 24, generator=g)
    w = torch.randn(40, 24, generator=g) * 0.3
    b = torch.randn(40, generator=g) if with_bias else None
    r = torch.randn(2, 5, 40, generator=g) if with_res else None
    want = _torch_linear(torch, x, w, b, act, r).numpy()
    et = lambda t: None if t is None else ember.tensor(t.numpy(), device=device)  # noqa: E731
    got = F.linear(et(x), et(w), et(b), activation=act, residual=et(r))
    assert got.shape == (2, 5, 40)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_linear_in_half_precision_rounds_like_its_dtype(device, dtype):
    torch = require("torch")
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(7, 16, generator=g), torch.randn(12, 16, generator=g), torch.randn(12, generator=g)
    want = torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b)).numpy()
    d = ember.as_dtype(dtype)
    got = F.linear(*(ember.tensor(t.numpy(), device=device).to(d) for t in (x, w, b)),
                   activation="gelu")
    assert got.dtype is d
    rtol, atol = TOL[dtype]
    np.testing.assert_allclose(got.to(ember.f32).numpy(), want, rtol=4 * rtol, atol=8 * atol)


def test_large_linear_runs_split_over_threads_and_still_matches_torch(cpu):
    """Big enough that the epilogue is split over rows and blocks (row_parallel)."""
    torch = require("torch")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1031, 96, generator=g)
    w, b = torch.randn(700, 96, generator=g) * 0.2, torch.randn(700, generator=g)
    r = torch.randn(1031, 700, generator=g)
    for act in ("gelu", "gelu_tanh", "silu"):
        want = _torch_linear(torch, x, w, b, act, r).numpy()
        got = F.linear(*(ember.tensor(t.numpy()) for t in (x, w, b)), activation=act,
                       residual=ember.tensor(r.numpy())).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


def test_linear_does_not_write_its_inputs(cpu):
    x = ember.tensor(np.random.default_rng(3).standard_normal((300, 256)).astype(np.float32))
    w = ember.tensor(np.random.default_rng(4).standard_normal((512, 256)).astype(np.float32))
    b, r = ember.ones(512), ember.ones(300, 512)
    before = [t.numpy().copy() for t in (x, w, b, r)]
    F.linear(x, w, b, activation="gelu", residual=r)
    for t, saved in zip((x, w, b, r), before, strict=True):
        np.testing.assert_array_equal(t.numpy(), saved)


def test_nn_linear_takes_activation_and_residual(device):
    torch = require("torch")
    layer = ember.nn.Linear(6, 4)
    g = torch.Generator().manual_seed(5)
    w, b = torch.randn(4, 6, generator=g), torch.randn(4, generator=g)
    layer.weight, layer.bias = (ember.tensor(t.numpy(), device=device) for t in (w, b))
    x, r = torch.randn(3, 6, generator=g), torch.randn(3, 4, generator=g)
    got = layer(ember.tensor(x.numpy(), device=device), activation="relu",
                residual=ember.tensor(r.numpy(), device=device))
    np.testing.assert_allclose(got.numpy(), _torch_linear(torch, x, w, b, "relu", r).numpy(),
                               rtol=1e-5, atol=1e-6)
    assert ember.nn.activation_op("gelu_new") == "gelu_tanh"
    assert ember.nn.activation_op("identity") is None


@pytest.mark.parametrize("args,error,pattern", [
    (((2, 5), (4, 6), None, None), ember.ShapeMismatch, r"input \[2, 5\] and weight \[4, 6\]"),
    (((2, 6), (4, 6), (5,), None), ember.ShapeMismatch, r"bias \[5\] must be \[4\]"),
    (((2, 6), (4, 6), (4,), (2, 5)), ember.ShapeMismatch,
     r"residual \[2, 5\] must have the output's shape \[2, 4\]"),
])
def test_linear_errors_name_the_shapes(cpu, args, error, pattern):
    xs, ws, bs, rs = args
    mk = lambda s: None if s is None else ember.zeros(*s)  # noqa: E731
    with pytest.raises(error, match=pattern):
        F.linear(mk(xs), mk(ws), mk(bs), residual=mk(rs))


def test_linear_unknown_activation_and_device_mismatch(cpu, device):
    with pytest.raises(ValueError, match=r"unknown activation 'mish'.*gelu"):
        F.linear(ember.zeros(2, 3), ember.zeros(4, 3), activation="mish")
    if device != cpu:
        with pytest.raises(ember.DeviceMismatch, match="linear"):
            F.linear(ember.zeros(2, 3), ember.zeros(4, 3, device=device))


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("rows", [3, 700])
def test_norm_with_residual_matches_torch(device, rms, rows):
    torch = require("torch")
    g = torch.Generator().manual_seed(6)
    x, r = torch.randn(rows, 384, generator=g), torch.randn(rows, 384, generator=g)
    w, b = torch.randn(384, generator=g), torch.randn(384, generator=g)
    s = x + r
    if rms:
        want = s * torch.rsqrt(s.square().mean(-1, keepdim=True) + 1e-6) * w
    else:
        want = torch.nn.functional.layer_norm(s, (384,), w, b, 1e-5)
    ex, er, ew, eb = (ember.tensor(t.numpy(), device=device) for t in (x, r, w, b))
    got = ex.rms_norm(ew, 1e-6, residual=er) if rms else ex.layer_norm(ew, eb, 1e-5, residual=er)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=2e-5)
    bad = ember.zeros(rows, 385, device=device)
    with pytest.raises(ember.ShapeMismatch,
                       match=rf"residual shape \[{rows}, 385\] must equal the input's \[{rows}, 384\]"):
        ex.rms_norm(ew, residual=bad) if rms else ex.layer_norm(ew, eb, residual=bad)


def test_softmax_rows_far_below_the_block_maximum(device):
    """The CPU shifts a block by its maximum and redoes rows that would underflow; every
    row must still equal its own softmax, whatever the other rows hold."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((600, 40)).astype(np.float32)
    x[::7] -= 300.0                       # rows whose every exp would underflow
    x[5::11] += 60.0                      # rows far above the rest
    x[3, 4] = -np.inf                     # a masked entry
    x[9, :] = -np.inf                     # a fully masked row: NaN, as numpy and torch give
    got = ember.tensor(x, device=device).softmax(-1).numpy()
    with np.errstate(invalid="ignore"):
        shifted = x - x.max(-1, keepdims=True)
        want = np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert np.isnan(got[9]).all() and not np.isnan(np.delete(got, 9, 0)).any()


def test_softmax_with_an_infinite_entry_poisons_only_its_row(cpu):
    x = np.zeros((300, 300), np.float32)
    x[4, 4] = np.inf
    got = ember.tensor(x).softmax(-1).numpy()
    assert np.isnan(got[4]).any()
    np.testing.assert_allclose(np.delete(got, 4, 0), 1 / 300, rtol=1e-6)


def test_blocked_gelu_is_the_erf_gelu_to_f32_precision(cpu):
    """The CPU's large-array GELU (a fitted tanh form) against math.erf in float64."""
    x = np.linspace(-12, 12, 200_001)
    want = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    for got in (ember.tensor(x.astype(np.float32)).gelu().numpy(),
                F.linear(ember.tensor(x.astype(np.float32)).reshape(-1, 1), ember.ones(1, 1),
                         activation="gelu").numpy().reshape(-1)):
        err = np.abs(got.astype(np.float64) - want)
        assert err.max() <= 1e-6
        pos = x > 0.01
        assert (err[pos] / want[pos]).max() <= 4e-7
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 1e-40] * 10000,
                        np.float32)
    got = ember.tensor(specials).gelu().numpy()[:8]
    np.testing.assert_array_equal(got[[0, 2, 5]], specials[[0, 2, 5]])
    # -inf * 0 is NaN, as in torch (which also gives NaN for +inf)
    assert np.isnan(got[3]) and got[6] == 0 and np.isnan(got[4]) and abs(got[7]) <= 1e-40
