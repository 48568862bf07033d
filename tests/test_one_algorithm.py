"""One algorithm per op on the CPU: the same values give the same bits whatever tensor
they sit in (10, 70,000 or 300,000 elements: below and above the sizes where the array
backend's blocked, in-place and row-parallel forms take over) and on the fused and
unfused paths (a linear layer's epilogue against the separate ops; a norm's residual=
against the sum first)."""
import math

import numpy as np
import pytest

import ember
import ember.functional as F
from ember.ops import UNARY

SIZES = (10, 70_000, 300_000)
FAST_UNARY = ("gelu", "gelu_tanh", "silu", "sigmoid", "relu")


def _values(rng, n):
    v = (rng.standard_normal(n) * 4).astype(np.float32)
    v[:6] = [0.0, -0.0, 30.0, -30.0, 1e-40, 7.5]
    return v


def _embedded(head, total, rng):
    """`head` followed by other values, `total` elements in all."""
    rest = rng.standard_normal(total - head.size).astype(np.float32) * 4
    return np.concatenate([head, rest])


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("op", FAST_UNARY)
def test_unary_bits_do_not_depend_on_the_tensor_size(op):
    rng = np.random.default_rng(0)
    head = _values(rng, 10)
    want = _bits(getattr(ember.tensor(head), op)().numpy())
    for n in SIZES:
        got = getattr(ember.tensor(_embedded(head, n, rng)), op)().numpy()[:10]
        assert np.array_equal(_bits(got), want), (op, n)
    for i in range(10):   # and each value alone, as a 0-d tensor
        assert _bits(getattr(ember.tensor(head[i]), op)().numpy()) == want[i]


@pytest.mark.parametrize("log", [False, True])
def test_softmax_row_bits_do_not_depend_on_the_other_rows(log):
    rng = np.random.default_rng(1)
    row = (rng.standard_normal(17) * 3).astype(np.float32)
    fn = (lambda t, d=-1: t.log_softmax(d)) if log else (lambda t, d=-1: t.softmax(d))
    want = _bits(fn(ember.tensor(row[None])).numpy()[0])
    for n_rows in (1, 4_000, 20_000):       # one row, one block, several blocks and threads
        others = (rng.standard_normal((n_rows, 17)) * 3).astype(np.float32)
        others[-1] += 500.0                 # a row far above the rest shares the block
        others[0] = row
        got = fn(ember.tensor(others)).numpy()
        assert np.array_equal(_bits(got[0]), want), n_rows
        assert np.all(np.isfinite(got[-1]))
        down = fn(ember.tensor(np.ascontiguousarray(others.T)), 0).numpy()  # another dim
        assert np.array_equal(_bits(down[:, 0]), want), n_rows


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("with_residual", [False, True])
def test_norm_bits_do_not_depend_on_rows_or_the_residual_path(rms, with_residual):
    rng = np.random.default_rng(2)
    cols = 384
    w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    tw, tb = ember.tensor(w), ember.tensor(b)

    def norm(x, r=None):
        return x.rms_norm(tw, residual=r) if rms else x.layer_norm(tw, tb, residual=r)

    row = rng.standard_normal((1, cols)).astype(np.float32)
    res = rng.standard_normal((1, cols)).astype(np.float32)
    want = _bits(norm(ember.tensor(row), ember.tensor(res) if with_residual else None).numpy())
    for n_rows in (1, 200, 900):
        x = rng.standard_normal((n_rows, cols)).astype(np.float32)
        r = rng.standard_normal((n_rows, cols)).astype(np.float32)
        x[0], r[0] = row[0], res[0]
        tx, tr = ember.tensor(x), ember.tensor(r)
        got = norm(tx, tr if with_residual else None).numpy()
        assert np.array_equal(_bits(got[:1]), want), n_rows
        if with_residual:   # fused add & norm == the sum, then the norm
            assert np.array_equal(_bits(got), _bits(norm(tx + tr).numpy()))


@pytest.mark.parametrize("activation", sorted(F.LINEAR_ACTIVATIONS))
@pytest.mark.parametrize("rows", [4, 200])
def test_linear_epilogue_bits_equal_the_separate_ops(activation, rows):
    """256 outputs (4 rows) was where the old erfc/tanh GELU split gave 61 different."""
    rng = np.random.default_rng(3)
    x = ember.tensor(rng.standard_normal((rows, 96)).astype(np.float32))
    w = ember.tensor(rng.standard_normal((64, 96)).astype(np.float32) / math.sqrt(96))
    b = ember.tensor(rng.standard_normal(64).astype(np.float32))
    r = ember.tensor(rng.standard_normal((rows, 64)).astype(np.float32))
    fused = F.linear(x, w, b, activation, r).numpy()
    apart = (getattr((x @ w.t()) + b, activation)() + r).numpy()
    assert np.array_equal(_bits(fused), _bits(apart))
    plain = F.linear(x, w, activation=activation).numpy()
    assert np.array_equal(_bits(plain), _bits(getattr(x @ w.t(), activation)().numpy()))


def test_exact_gelu_is_f32_accurate_against_math_erf():
    """The fitted-polynomial tanh form (ops.gelu_erf_block), the one GELU at every size:
    max abs error against math.erf over [-12, 12] in f32 stays under 6e-7 (1.2 ulp at 5)."""
    x = np.linspace(-12, 12, 240_001).astype(np.float32)
    got = UNARY["gelu"].array(np, x).astype(np.float64)
    want = np.array([0.5 * float(v) * (1 + math.erf(float(v) / math.sqrt(2))) for v in x])
    assert np.abs(got - want).max() < 6e-7
