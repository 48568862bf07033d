"""Winograd F(2x2, 3x3) for numpy's stride-1 3x3 convolutions with a numba epilogue
(backends/array_winograd.py, array_winograd_jit.py): against torch in float64 and against
the im2col path, in bands on several threads, the same bits alone or in a batch, and
only where it applies."""
import numpy as np
import pytest

import ember
from ember.backends import array_conv, array_winograd, row_parallel
from helpers import missing, require


@pytest.fixture(autouse=True)
def im2col_path(monkeypatch):
    """These tests are of the path a CPU without llvm_conv's kernels takes (no llvmlite):
    llvm_conv's own are in test_conv_direct.py."""
    monkeypatch.setattr(array_conv, "DIRECT", False)


@pytest.fixture
def jit():
    """Winograd runs only with the numba epilogue: skipped where numba is not installed, a
    failure under CI=true."""
    try:
        from ember.backends import array_winograd_jit  # noqa: F401
    except ImportError as exc:
        missing("numba (the ember[jit] extra)", str(exc))
    if array_conv._epilogue_kernels() is None:
        missing("the numba epilogue", "EMBER_JIT=0 is set")


@pytest.fixture
def counted(monkeypatch):
    """How many Winograd bands ran."""
    calls = []
    real = array_winograd.band

    def band(*args):
        calls.append(args[4:6])
        return real(*args)

    monkeypatch.setattr(array_winograd, "band", band)
    return calls


def _case(seed, c, o, h, w, bias=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32) if bias else None
    return x, wt, b


def _torch(x, w, b, activation):
    torch = require("torch")
    t = [None if a is None else torch.from_numpy(a.astype(np.float64)) for a in (x, w, b)]
    y = torch.nn.functional.conv2d(*t, padding=1)
    return getattr(torch.nn.functional, activation)(y).numpy()


def _ember(x, w, b, activation):
    return ember.conv2d(
        ember.tensor(x), ember.tensor(w), None if b is None else ember.tensor(b),
        padding=1, activation=activation,
    ).numpy()


@pytest.mark.parametrize(
    "shape,activation,bias",
    [
        ((16, 24, 40, 40), "silu", True),
        ((32, 16, 41, 43), "silu", True),  # odd height and width: the last tiles cropped
        ((24, 32, 45, 40), "sigmoid", False),
    ],
)
def test_winograd_matches_torch_and_im2col(jit, counted, monkeypatch, shape, activation, bias):
    x, w, b = _case(1, *shape, bias=bias)
    got = _ember(x, w, b, activation)
    assert counted  # Winograd ran
    ref = _torch(x, w, b, activation)
    monkeypatch.setattr(array_conv, "WINOGRAD", False)
    direct = _ember(x, w, b, activation)
    scale = np.abs(ref).max()
    err, direct_err = np.abs(got - ref).max() / scale, np.abs(direct - ref).max() / scale
    assert err < 2e-6, (err, direct_err)  # f32 rounding: the direct product's is ~4e-7
    np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-5 * scale)


def test_real_size_layer_error_against_float64(jit, counted):
    """YOLOv8's 128 -> 128 bottleneck at 40x40 (and so its deeper neighbours)."""
    x, w, b = _case(2, 128, 128, 40, 40)
    err = np.abs(_ember(x, w, b, "silu") - (ref := _torch(x, w, b, "silu"))).max()
    assert counted and err / np.abs(ref).max() < 2e-6


def test_bands_on_threads_give_the_bits_of_one_and_of_the_image_alone(jit, counted, monkeypatch):
    """Bands of one tile row on three threads: the bits one thread gives, and each image of
    a batch the bits it gets alone (the edges depend on the plane only)."""
    monkeypatch.setattr(array_winograd, "MIN_PIXELS", 1)
    monkeypatch.setattr(array_winograd, "MIN_BAND_TILES", 1)
    monkeypatch.setattr(array_conv, "BAND_BYTES", 512)
    monkeypatch.setattr(row_parallel, "MIN_PARALLEL_ELEMENTS", 1)
    monkeypatch.setitem(row_parallel._state, "spin_bound", False)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 16, 13, 10)).astype(np.float32)
    w = ember.tensor(rng.standard_normal((16, 16, 3, 3)).astype(np.float32))
    b = ember.tensor(rng.standard_normal(16).astype(np.float32))
    results = []
    for threads in (1, 3):
        monkeypatch.setitem(row_parallel._state, "workers", threads)
        monkeypatch.setitem(row_parallel._state, "pool", None)
        results.append(ember.conv2d(ember.tensor(x), w, b, padding=1, activation="silu").numpy())
        for i in range(3):
            alone = ember.conv2d(ember.tensor(x[i : i + 1]), w, b, padding=1, activation="silu")
            np.testing.assert_array_equal(alone.numpy()[0], results[0][i])
        pool = row_parallel._state["pool"]
        if pool is not None:
            pool.shutdown()
    assert len(counted) == 2 * 2 * 3 * 7  # 7 bands of one tile row per image, 4 runs of 3
    np.testing.assert_array_equal(results[0], results[1])
    ref = _torch(x, w.numpy(), b.numpy(), "silu")
    np.testing.assert_allclose(results[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "shape,kw,activation",
    [
        ((16, 16, 40, 40), dict(stride=2, padding=1), "silu"),
        ((16, 16, 40, 40), dict(padding=1, dilation=2), "silu"),
        ((16, 16, 40, 40), dict(padding=1, groups=2), "silu"),
        ((16, 16, 40, 40), dict(padding=1), None),  # no numba epilogue, no Winograd
        ((8, 16, 40, 40), dict(padding=1), "silu"),  # too few channels
        ((16, 16, 20, 20), dict(padding=1), "silu"),  # too few pixels
    ],
)
def test_winograd_only_where_it_applies(jit, counted, shape, kw, activation):
    c, o, h, wd = shape
    rng = np.random.default_rng(4)
    x = ember.tensor(rng.standard_normal((1, c, h, wd)).astype(np.float32))
    w = ember.tensor(rng.standard_normal((o, c // kw.get("groups", 1), 3, 3)).astype(np.float32))
    ember.conv2d(x, w, activation=activation, **kw)
    assert not counted
