"""numba's bias + activation pass after each band's GEMM (backends/array_conv_jit.py):
against float64, on strided destinations, with NaN and infinities, and conv2d through it
equal to conv2d through numpy's ufuncs (the path without numba)."""
import numpy as np
import pytest

import ember
from ember.backends import array_conv
from helpers import missing

ACTIVATIONS = [None, "silu", "relu", "sigmoid"]


@pytest.fixture(autouse=True)
def im2col_path(monkeypatch):
    """These tests are of the path a CPU without llvm_conv's kernels takes (no llvmlite):
    llvm_conv's own are in test_conv_direct.py."""
    monkeypatch.setattr(array_conv, "DIRECT", False)


@pytest.fixture
def jit():
    """The numba epilogue: skipped where numba is not installed, a failure under CI=true."""
    try:
        from ember.backends import array_conv_jit
    except ImportError as exc:
        missing("numba (the ember[jit] extra)", str(exc))
    if array_conv._epilogue_kernels() is None:
        missing("the numba epilogue", "EMBER_JIT=0 is set")
    return array_conv_jit


def _reference(v, activation):
    v = v.astype(np.float64)
    with np.errstate(over="ignore"):
        if activation == "silu":
            return v / (1.0 + np.exp(-v))
        if activation == "sigmoid":
            return 1.0 / (1.0 + np.exp(-v))
    if activation == "relu":
        return np.maximum(v, 0.0)
    return v


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_bias_activation_against_float64(jit, activation):
    rng = np.random.default_rng(3)
    # wide values: deep in both tails of the sigmoid, and exp(-v) far past f32's range
    y = (rng.standard_normal((5, 1003)) * np.array([[0.1], [1], [8], [40], [200]])).astype(
        np.float32
    )
    bias = rng.standard_normal(5).astype(np.float32)
    out = np.full((5, 2, 1003), np.nan, np.float32)[:, 1]  # a strided destination
    jit.bias_activation(y, bias, out, jit.CODES[activation])
    v = y + bias[:, None]
    want = _reference(v, activation)
    core = np.abs(v) <= 16  # where numpy's own f32 forms keep 1e-6
    np.testing.assert_allclose(out[core], want[core], rtol=1e-6, atol=1e-30)
    # the far tails: f32's rounding of -v / ln 2, amplified by exp; below v = -88, SiLU's
    # v * 2^-127 where the true value underflows
    np.testing.assert_allclose(out, want, rtol=4e-6, atol=1e-33)


@pytest.mark.parametrize("activation", ["silu", "sigmoid", "relu"])
def test_special_values(jit, activation):
    v = np.array([[np.nan, np.inf, 0.0, -0.0, 1e-30, 88.0, -88.0, 104.0, -104.0, 3e38]],
                 np.float32)
    out = np.empty_like(v)
    jit.bias_activation(v, np.zeros(1, np.float32), out, jit.CODES[activation])
    assert np.isnan(out[0, 0])  # NaN stays NaN
    want = _reference(v[:, 1:], activation)
    np.testing.assert_allclose(out[:, 1:], want, rtol=1e-6, atol=1e-36)
    assert np.isfinite(out[:, 2:]).all()


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_with_and_without_numba_agree(jit, monkeypatch, activation, bias):
    rng = np.random.default_rng(11)
    x = ember.tensor(rng.standard_normal((2, 6, 15, 13)).astype(np.float32))
    w = ember.tensor(rng.standard_normal((8, 3, 3, 3)).astype(np.float32))
    b = ember.tensor(rng.standard_normal(8).astype(np.float32)) if bias else None
    kw = dict(stride=(1, 2), padding=1, groups=2, activation=activation)
    fused = ember.conv2d(x, w, b, **kw).numpy()
    monkeypatch.setattr(array_conv, "_epilogue_kernels", lambda: None)  # as if no numba
    plain = ember.conv2d(x, w, b, **kw).numpy()
    np.testing.assert_allclose(fused, plain, rtol=2e-6, atol=2e-6)
    if activation in (None, "relu"):  # no transcendental: the same bits
        np.testing.assert_array_equal(fused, plain)


def test_ember_jit_0_turns_the_epilogue_off(monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")
    assert array_conv._epilogue_kernels() is None


def test_fused_silu_is_silu_after_the_convolution(jit, math_kernels):
    """The fused SiLU is llvm_math's, as Tensor.silu's: the same bits as the convolution
    then the op, one algorithm on both paths (numba's epilogue, its own exp, was within
    2e-6); that a batch keeps each image's bits is tests/test_conv_bands.py's."""
    rng = np.random.default_rng(4)
    x = ember.tensor(rng.standard_normal((2, 5, 21, 17)).astype(np.float32))
    w = ember.tensor(rng.standard_normal((7, 5, 3, 3)).astype(np.float32))
    b = ember.tensor(rng.standard_normal(7).astype(np.float32))
    fused = ember.conv2d(x, w, b, padding=1, activation="silu").numpy()
    after = ember.conv2d(x, w, b, padding=1).silu().numpy()
    np.testing.assert_array_equal(fused.view(np.uint32), after.view(np.uint32))


def test_only_an_exp_activation_loads_numba():
    """A bias add, ReLU or GELU convolution (Whisper's conv1d) never imports numba: its
    import costs ~1 s of CPU and ~120 MB of a cold start, and numpy gives those the same
    speed; SiLU loads it (when installed)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, ember\n"
        "from ember.backends import array_conv\n"
        "array_conv.DIRECT = False\n"
        "x = ember.tensor(np.ones((1, 2, 5, 5), np.float32))\n"
        "w = ember.tensor(np.ones((3, 2, 3, 3), np.float32))\n"
        "b = ember.tensor(np.ones(3, np.float32))\n"
        "for act in (None, 'relu', 'gelu'):\n"
        "    ember.conv2d(x, w, b, padding=1, activation=act)\n"
        "print('numba' in sys.modules)\n"
        "ember.conv2d(x, w, b, padding=1, activation='silu')\n"
        "print('numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = out.stdout.split()
    assert before == "False"
    assert after == str(array_conv._epilogue_kernels() is not None)
