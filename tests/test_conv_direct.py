"""conv2d on numpy through llvm_conv's compiled indexed GEMM (backends/array_conv_direct.py,
llvm_conv.py): against torch in float64 for every geometry a model uses and odd ones, the
fused activations equal to the ops' own, the same bits whatever the pieces and threads
(spinning helpers or row_parallel's pool), the kernel's row and position tails writing
nothing past their ends, and the phase split against a numpy construction."""

import numpy as np
import pytest
from helpers import missing, require

import ember
from ember.backends import array_conv, array_conv_direct, llvm_conv, row_parallel
from ember.backends.addresses import address

# (input, weight, kwargs)
CASES = [
    ((1, 3, 17, 19), (8, 3, 3, 3), dict(stride=2, padding=1)),  # YOLO's stem
    ((2, 8, 13, 11), (6, 8, 3, 3), dict(padding=1)),  # a batch, rows not a tile's multiple
    ((1, 8, 9, 10), (12, 8, 1, 1), {}),  # 1 x 1: the input's planes, panels
    ((1, 20, 7, 9), (17, 20, 1, 1), dict(stride=2)),  # 1 x 1 strided: phases
    ((1, 8, 12, 9), (6, 4, 3, 2), dict(groups=2, padding=(2, 0), stride=(1, 2))),
    ((1, 4, 5, 6), (3, 4, 3, 3), dict(padding=(4, 3), stride=2)),  # taps wholly in padding
    ((1, 4, 5, 6), (3, 4, 1, 1), dict(padding=2)),
    ((1, 6, 2, 40), (5, 6, 1, 3), dict(padding=(0, 1), stride=(1, 2))),  # rows of a conv1d
    ((1, 5, 11, 13), (9, 5, 5, 5), dict(padding=2)),
    ((1, 3, 10, 14), (4, 3, 2, 2), dict(stride=2)),  # a patch embedding
    ((1, 2, 9, 8), (3, 2, 3, 3), dict(stride=3, padding=(1, 0))),
    ((3, 16, 20, 20), (40, 16, 3, 3), dict(padding=1)),  # several tiles of rows and positions
]
ACTIVATIONS = [None, "silu", "gelu", "gelu_tanh", "sigmoid", "relu"]


@pytest.fixture
def kernels():
    """llvm_conv's kernels: skipped where llvmlite is missing (a failure under CI=true)."""
    try:
        import llvmlite  # noqa: F401
    except ImportError as exc:
        missing("llvmlite (the ember[jit] extra)", str(exc))
    built = llvm_conv.kernels()
    if built is None:
        missing("llvm_conv's kernels", "EMBER_JIT=0 is set, or their build failed")
    return built


@pytest.fixture
def taken(monkeypatch):
    """The convolutions the direct path ran."""
    calls = []
    real = array_conv_direct.conv2d

    def counting(*args, **kw):
        calls.append(args[3].shape)
        return real(*args, **kw)

    monkeypatch.setattr(array_conv_direct, "conv2d", counting)
    return calls


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Pieces of a few rows and positions, shared by three threads however small."""
    monkeypatch.setattr(array_conv_direct, "PIECE_WEIGHT_BYTES", 64)
    monkeypatch.setattr(array_conv_direct, "PIECE_INPUT_BYTES", 64)
    monkeypatch.setattr(array_conv_direct, "MIN_PIECE_POSITIONS", 1)
    monkeypatch.setattr(array_conv_direct, "PHASE_PIECE_BYTES", 4)
    monkeypatch.setitem(row_parallel._state, "workers", 3)
    monkeypatch.setattr(row_parallel, "MIN_PARALLEL_ELEMENTS", 1)


def _inputs(case, seed=0):
    xshape, wshape, kw = CASES[case]
    rng = np.random.default_rng(seed + case)
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32)
    return x, w, b, kw


def _torch(x, w, b, activation, **kw):
    torch = require("torch")
    y = torch.nn.functional.conv2d(*(torch.from_numpy(a.astype(np.float64)) for a in (x, w, b)), **kw)
    if activation == "gelu_tanh":
        y = torch.nn.functional.gelu(y, approximate="tanh")
    elif activation is not None:
        y = getattr(torch.nn.functional, activation)(y)
    return y.numpy()


def _conv(x, w, b, activation=None, **kw):
    return ember.conv2d(
        ember.tensor(x), ember.tensor(w), None if b is None else ember.tensor(b),
        activation=activation, **kw,
    ).numpy()  # fmt: skip


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_matches_torch(kernels, taken, case, activation):
    x, w, b, kw = _inputs(case)
    got = _conv(x, w, b, activation, **kw)
    want = _torch(x, w, b, activation, **kw)
    assert taken, "the direct path did not run"
    assert got.shape == want.shape
    scale = np.abs(x).max() * np.abs(w).sum(axis=(1, 2, 3)).max() + np.abs(b).max()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * scale)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_same_bits_whatever_the_pieces_and_threads(kernels, case, monkeypatch, tiny_pieces):
    x, w, b, kw = _inputs(case, seed=7)
    small = _conv(x, w, b, "silu", **kw)
    monkeypatch.setattr(array_conv_direct, "PIECE_WEIGHT_BYTES", 1 << 30)
    monkeypatch.setattr(array_conv_direct, "PIECE_INPUT_BYTES", 1 << 30)
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    whole = _conv(x, w, b, "silu", **kw)
    assert np.array_equal(small, whole)


def test_pool_threads_where_no_helpers_spin(kernels, monkeypatch, tiny_pieces):
    """A CPU without llvm_spin's helpers: row_parallel's threads take the pieces, each with
    a scratch of its own (shared ones would mix their outputs)."""
    x, w, b, kw = _inputs(11)
    helped = _conv(x, w, b, "silu", **kw)
    monkeypatch.setattr(kernels, "_teams", {a: (run, None) for a, (run, _) in kernels._teams.items()})
    monkeypatch.setattr(kernels, "_phases", (kernels._phases[0], None))
    monkeypatch.setitem(row_parallel._state, "spin_bound", False)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    try:
        pooled = _conv(x, w, b, "silu", **kw)
    finally:
        pool = row_parallel._state["pool"]
        if pool is not None:
            pool.shutdown()
    assert np.array_equal(helped, pooled)


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh", "sigmoid", "relu"])
def test_fused_activation_is_the_ops_own(kernels, activation):
    """conv2d(activation=f) has the bits of f applied to conv2d's output: llvm_math's in
    the kernel's epilogue, the op's own pass after it for the others."""
    x, w, b, kw = _inputs(1)
    fused = _conv(x, w, b, activation, **kw)
    plain = ember.conv2d(ember.tensor(x), ember.tensor(w), ember.tensor(b), **kw)
    assert np.array_equal(fused, getattr(plain, activation)().numpy())


def test_no_bias_and_empty_batch(kernels):
    x, w, _, kw = _inputs(1)
    np.testing.assert_allclose(
        _conv(x, w, None, **kw), _torch(x, w, np.zeros(w.shape[0], np.float32), None, **kw),
        rtol=2e-6, atol=1e-4,
    )  # fmt: skip
    assert _conv(x[:0], w, None, **kw).shape == (0, w.shape[0], 13, 11)


@pytest.mark.parametrize("rows", [1, 7, 8, 9, 17])
@pytest.mark.parametrize("positions", [1, 15, 48, 50, 97])
def test_kernel_writes_its_rows_and_positions_only(kernels, rows, positions):
    """The tails: a tile past the last row or the last position stores nothing there."""
    rng = np.random.default_rng(rows * 100 + positions)
    k, ldo = 5, positions + 3
    x = rng.standard_normal(k * positions).astype(np.float32)
    koff = np.arange(k, dtype=np.int64) * positions
    w = rng.standard_normal((rows, k)).astype(np.float32)
    b = rng.standard_normal(rows).astype(np.float32)
    out = np.full((rows + 1, ldo), 7.0, np.float32)
    kernels.run(None, address(x), koff, k, address(w), k, rows, address(b), positions, address(out), ldo)
    want = w.astype(np.float64) @ x.reshape(k, positions) + b[:, None]
    np.testing.assert_allclose(out[:rows, :positions], want, rtol=1e-5, atol=1e-5)
    assert (out[:rows, positions:] == 7.0).all()
    assert (out[rows] == 7.0).all()


@pytest.mark.parametrize(
    "shape, stride, padding, wide",
    [
        ((2, 3, 9, 11), (2, 2), (1, 1), 7),
        ((1, 4, 8, 8), (1, 1), (1, 2), 7),
        ((1, 2, 7, 10), (3, 2), (0, 4), 7),
        # rows long enough for the vector copies, stride 1 and 2, the row's end in any lane
        ((1, 2, 5, 77), (2, 2), (1, 1), 40),
        ((1, 2, 5, 78), (2, 2), (1, 1), 40),
        ((1, 2, 5, 70), (1, 1), (1, 1), 72),
        ((1, 2, 5, 71), (1, 1), (0, 0), 71),
    ],
)
def test_phase_block_against_numpy(kernels, tiny_pieces, shape, stride, padding, wide):
    n, c, h, width = shape
    (sh, sw), (ph, pw) = stride, padding
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    rows = 6
    plane = rows * wide + 3
    got = np.empty((n, sh * sw, c, plane), np.float32)
    table = array_conv_direct._phase_table(x.shape, stride, padding, rows, wide, plane,
                                           array_conv_direct.PHASE_PIECE_BYTES)  # fmt: skip
    kernels.split_phases(table, x, got, 3, array_conv._share)
    padded = np.zeros((n, c, h + 2 * ph + rows * sh, width + 2 * pw + wide * sw), np.float32)
    padded[:, :, ph : ph + h, pw : pw + width] = x
    for a in range(sh):
        for b in range(sw):
            want = padded[:, :, a : a + rows * sh : sh, b : b + wide * sw : sw]
            phase = got[:, a * sw + b]
            assert np.array_equal(phase[..., : rows * wide].reshape(n, c, rows, wide), want)
            assert (phase[..., rows * wide :] == 0).all()


def test_one_position_rows_take_im2col(kernels, taken):
    """A conv1d (one input row) runs with its axes swapped, rows of one position: that
    geometry stays on the im2col path (array_conv_direct.eligible says why)."""
    x = np.random.default_rng(2).standard_normal((1, 6, 1, 40)).astype(np.float32)
    w = np.random.default_rng(3).standard_normal((5, 6, 1, 3)).astype(np.float32)
    b = np.zeros(5, np.float32)
    got = _conv(x, w, b, "gelu", padding=(0, 1), stride=(1, 2))
    np.testing.assert_allclose(got, _torch(x, w, b, "gelu", padding=(0, 1), stride=(1, 2)),
                               rtol=2e-6, atol=1e-5)  # fmt: skip
    assert not taken


def test_built_at_the_first_convolution_it_takes_and_only_then(kernels):
    """llvm_conv is a kernel group of its own (llvm_build.GROUPS: ~3.4 s to build cold):
    a conv1d (Whisper's, left to im2col) does not build it, and it builds in a process
    where no other kernel was asked for first."""
    import subprocess
    import sys

    code = (
        "import numpy as np, ember\n"
        "from ember.backends import llvm_build\n"
        "x = ember.tensor(np.ones((1, 8, 1, 30), np.float32))\n"
        "w = ember.tensor(np.ones((4, 8, 1, 3), np.float32))\n"
        "ember.conv2d(x, w, padding=(0, 1), activation='gelu')\n"
        "print(llvm_build.is_built('llvm_conv'))\n"
        "x = ember.tensor(np.ones((1, 8, 5, 30), np.float32))\n"
        "w = ember.tensor(np.ones((4, 8, 3, 3), np.float32))\n"
        "y = ember.conv2d(x, w, padding=1).numpy()\n"
        "print(llvm_build.is_built('llvm_conv'), y[0, 0, 2, 2])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "72.0"], out.stderr


def test_never_imports_numba(kernels):
    """The direct path's epilogue is compiled with it: a SiLU convolution (YOLO's every
    one) no longer imports numba (~1 s of CPU and ~120 MB of a cold start)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, ember\n"
        "x = ember.tensor(np.ones((1, 2, 5, 5), np.float32))\n"
        "w = ember.tensor(np.ones((3, 2, 3, 3), np.float32))\n"
        "for act in (None, 'silu', 'gelu'):\n"
        "    ember.conv2d(x, w, padding=1, activation=act)\n"
        "from ember.backends import llvm_build\n"
        "print(llvm_build.is_built('llvm_conv'), 'numba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


SAME_CASES = [  # stride 1, output the input's size: read in place, the padding masked off
    ((2, 8, 13, 11), (6, 8, 3, 3), (1, 1)),
    ((1, 5, 11, 13), (9, 5, 5, 5), (2, 2)),
    ((3, 16, 20, 20), (40, 16, 3, 3), (1, 1)),
    ((1, 3, 7, 2), (4, 3, 3, 3), (1, 1)),  # rows of 2: a vector's lanes span 8 rows
    ((1, 4, 3, 17), (5, 4, 3, 1), (1, 0)),  # taps down a column only
    ((1, 4, 6, 5), (6, 2, 3, 3), (1, 1)),  # groups=2
    # strided: a zero-bordered phase block either way
    ((2, 5, 16, 12), (7, 5, 3, 3), (1, 1), 2),  # YOLO's downsampling
    ((1, 3, 17, 19), (9, 3, 3, 3), (1, 1), 2),  # odd sizes: the phases differ by a row
    ((1, 4, 9, 10), (5, 4, 5, 5), (2, 2), 2),
    ((1, 4, 12, 9), (5, 4, 3, 3), (1, 1), (2, 1)),
]


@pytest.mark.parametrize("case", range(len(SAME_CASES)))
def test_same_padding_masked_has_the_phase_blocks_bits(kernels, case, monkeypatch, tiny_pieces):
    """The padding's taps masked off as the input is read in place, or read as zeros
    from a zero-bordered copy: the same sums, so the same bits; and the masked way ran
    (the kernel's "same" words were set) where the CPU has it."""
    xshape, wshape, padding, *stride = SAME_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32)
    kw = dict(padding=padding, groups=xshape[1] // wshape[1], stride=stride[0] if stride else 1)
    masked = _conv(x, w, b, "silu", **kw)
    headers = [g.table[2 + 8] for g in _planned(monkeypatch, lambda: _conv(x, w, b, "silu", **kw))]
    monkeypatch.setattr(array_conv_direct, "SAME", False)
    blocked = _conv(x, w, b, "silu", **kw)
    assert np.array_equal(masked, blocked)
    np.testing.assert_allclose(masked, _torch(x, w, b, "silu", **kw), rtol=2e-6, atol=1e-4)
    masks = kernels.same and not stride
    assert headers and all(taps == (wshape[2] * wshape[3] if masks else 0) for taps in headers)


def _planned(monkeypatch, run):
    """The geometries (array_conv_direct._geometry) that run() planned."""
    plans = []
    real = array_conv_direct._geometry

    def planning(*args):
        plans.append(real(*args))
        return plans[-1]

    monkeypatch.setattr(array_conv_direct, "_geometry", planning)
    run()
    monkeypatch.setattr(array_conv_direct, "_geometry", real)
    return plans


@pytest.mark.parametrize("batch", [1, 3])
def test_conv2d_cat_reads_the_parts_where_they_lie(kernels, batch, monkeypatch, tiny_pieces):
    """A 1 x 1 convolution of a channel concatenation, each part read in place (a split's
    views among them): the bits of conv2d over the joined array, and no join made."""
    rng = np.random.default_rng(batch)
    whole = rng.standard_normal((batch, 12, 7, 9)).astype(np.float32)
    extra = rng.standard_normal((batch, 5, 7, 9)).astype(np.float32)
    w = rng.standard_normal((10, 17, 1, 1)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    t = ember.tensor(whole)
    parts = [*t.split(4, 1), ember.tensor(extra)]  # views of one array, then another array
    joined = np.concatenate([whole, extra], 1)
    calls = []
    real = array_conv_direct.conv2d_cat
    monkeypatch.setattr(array_conv_direct, "conv2d_cat", lambda *a: calls.append(1) or real(*a))
    got = ember.conv2d_cat(parts, ember.tensor(w), ember.tensor(b), activation="silu").numpy()
    want = _conv(joined, w, b, "silu")
    assert calls and np.array_equal(got, want)


@pytest.mark.parametrize("masked", [False, True])
def test_the_avx2_tile_on_any_host(kernels, monkeypatch, masked):
    """The 8-lane module (llvm_conv.tile_of's AVX2 tile, 6 x 2 vectors) built and run on
    this host: CI's hosts differ (AVX-512 one day, AVX2 the next), and each must build
    the other's IR (an 8-lane mask word once failed to build). `masked`: its masked reads
    too, which AVX2 hosts leave off."""
    from ember.backends import llvm_build, llvm_math, llvm_spin

    lanes, rows, vectors = llvm_conv.tile_of({"avx2": True})
    engine = llvm_build.compile_kernels(
        llvm_conv,
        lambda triple: llvm_conv._ir_module(triple, lanes, rows, vectors, True),
        params=(lanes, rows, vectors, True),
        sources=(llvm_math, llvm_spin),
    )
    narrow = llvm_conv.ConvKernels(engine, rows, lanes, vectors, True)
    narrow.same = masked
    monkeypatch.setattr(llvm_conv, "kernels", lambda: narrow)
    for case in (0, 1, 2, 11):
        x, w, b, kw = _inputs(case)
        got = _conv(x, w, b, "silu", **kw)
        scale = np.abs(x).max() * np.abs(w).sum(axis=(1, 2, 3)).max() + np.abs(b).max()
        np.testing.assert_allclose(got, _torch(x, w, b, "silu", **kw), rtol=2e-6, atol=2e-6 * scale)
