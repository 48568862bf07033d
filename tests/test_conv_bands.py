"""conv2d's numpy path, im2col a band of output rows at a time on several threads
(backends/array_conv.py), and conv2d's fused activation on every device, against torch."""
import numpy as np
import pytest

import ember
from ember.backends import array_conv, row_parallel
from helpers import require

CASES = [  # (input, weight, kwargs): YOLO's 3x3 s2 and s1 and 1x1, then groups and dilation
    ((1, 3, 17, 19), (8, 3, 3, 3), dict(stride=2, padding=1)),
    ((2, 8, 13, 11), (6, 8, 3, 3), dict(padding=1)),
    ((1, 8, 9, 10), (12, 8, 1, 1), {}),
    ((1, 8, 12, 9), (6, 4, 3, 2), dict(groups=2, dilation=(2, 1), padding=(2, 0), stride=(1, 2))),
    # taps that fall wholly in the padding (the columns hold zeros there, nothing is read)
    ((1, 4, 5, 6), (3, 4, 3, 3), dict(padding=(4, 3), stride=2)),
    ((1, 4, 5, 6), (3, 4, 1, 1), dict(padding=2)),
    # one row (a conv1d: Whisper's encoder front), split over its columns
    ((1, 6, 1, 40), (5, 6, 1, 3), dict(padding=(0, 1), stride=(1, 2))),
    ((2, 6, 1, 33), (4, 3, 1, 3), dict(padding=(0, 2), dilation=(1, 2), groups=2)),
]


def _torch_conv(x, w, b, activation=None, **kw):
    torch = require("torch")
    y = torch.nn.functional.conv2d(*(torch.from_numpy(a.astype(np.float64)) for a in (x, w, b)),
                                   **kw)
    if activation is not None:
        y = getattr(torch.nn.functional, activation)(y)
    return y.numpy()


def _inputs(case):
    xshape, wshape, kw = CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(xshape).astype(np.float32)
    w = rng.standard_normal(wshape).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32)
    return x, w, b, kw


@pytest.fixture(autouse=True)
def im2col_path(monkeypatch):
    """These tests are of the path a CPU without llvm_conv's kernels takes (no llvmlite):
    llvm_conv's own are in test_conv_direct.py."""
    monkeypatch.setattr(array_conv, "DIRECT", False)


@pytest.fixture
def small_bands(monkeypatch):
    """Bands of one or two output rows, spread over three threads however small; records
    how many bands each convolution ran."""
    monkeypatch.setattr(array_conv, "BAND_BYTES", 512)
    monkeypatch.setattr(array_conv, "MIN_BAND_COLUMNS", 1)
    monkeypatch.setitem(row_parallel._state, "workers", 3)
    monkeypatch.setitem(row_parallel._state, "spin_bound", False)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    monkeypatch.setattr(row_parallel, "MIN_PARALLEL_ELEMENTS", 1)
    counts = []
    real = array_conv.run_rows

    def counting(fn, rows, per_row, **kw):
        counts.append(rows)
        real(fn, rows, per_row, **kw)

    monkeypatch.setattr(array_conv, "run_rows", counting)
    yield counts
    pool = row_parallel._state["pool"]
    if pool is not None:
        pool.shutdown()


@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_bands_on_threads_match_torch(small_bands, cpu, case, activation):
    x, w, b, kw = _inputs(case)
    got = ember.conv2d(ember.tensor(x), ember.tensor(w), ember.tensor(b), activation=activation,
                       **kw)
    np.testing.assert_allclose(got.numpy(), _torch_conv(x, w, b, activation, **kw),
                               rtol=1e-5, atol=1e-5)
    assert small_bands and small_bands[-1] > 2  # several bands ran, not one


@pytest.mark.parametrize("activation", ["silu", "relu", "sigmoid"])
@pytest.mark.parametrize("case", [0, 2])
def test_fused_activation_matches_torch(device, case, activation):
    x, w, b, kw = _inputs(case)
    got = ember.conv2d(ember.tensor(x, device=device), ember.tensor(w, device=device),
                       ember.tensor(b, device=device), activation=activation, **kw)
    np.testing.assert_allclose(got.numpy(), _torch_conv(x, w, b, activation, **kw),
                               rtol=1e-5, atol=1e-5)


def test_fused_activation_on_a_strided_input_without_bias(cpu):
    x, w, _, kw = _inputs(1)
    xt = ember.tensor(np.ascontiguousarray(x.transpose(0, 1, 3, 2))).transpose(2, 3)
    got = ember.conv2d(xt, ember.tensor(w), activation="silu", **kw)
    np.testing.assert_allclose(got.numpy(), _torch_conv(x, w, np.zeros(w.shape[0]), "silu", **kw),
                               rtol=1e-5, atol=1e-5)


def test_unknown_activation_is_refused(cpu):
    x, w, b, _ = _inputs(2)
    with pytest.raises(ValueError, match="conv2d: unknown activation 'swish'"):
        ember.conv2d(ember.tensor(x), ember.tensor(w), activation="swish")


@pytest.mark.parametrize("oh,rows", [(40, 13), (20, 20), (80, 7), (7, 7), (5, 2), (1, 1), (9, 4)])
def test_band_edges_cover_the_rows_and_split_evenly(oh, rows):
    edges = array_conv._band_edges(oh, rows)
    sizes = np.diff(edges)
    assert edges[0] == 0 and edges[-1] == oh and (sizes >= 1).all()
    assert sizes.max() - sizes.min() <= 1  # evenly spread
    assert sizes.max() <= rows  # never larger than asked
    if oh >= array_conv.BAND_MULTIPLE:  # two threads get as many bands
        assert len(sizes) % array_conv.BAND_MULTIPLE == 0


def test_an_image_gets_the_same_bits_alone_in_a_batch_and_on_any_threads(cpu, monkeypatch):
    """Band edges depend on the image plane only, so a batch runs each image's GEMMs as it
    would alone, on one thread as on three (a 20-row map is two bands every time)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 16, 20, 20)).astype(np.float32)
    w = ember.tensor(rng.standard_normal((32, 16, 3, 3)).astype(np.float32))
    b = ember.tensor(rng.standard_normal(32).astype(np.float32))
    both = ember.conv2d(ember.tensor(x), w, b, padding=1, activation="silu").numpy()
    for i in range(3):
        alone = ember.conv2d(ember.tensor(x[i : i + 1]), w, b, padding=1, activation="silu")
        np.testing.assert_array_equal(both[i], alone.numpy()[0])
    monkeypatch.setitem(row_parallel._state, "spin_bound", False)
    for threads in (1, 3):
        monkeypatch.setitem(row_parallel._state, "workers", threads)
        monkeypatch.setitem(row_parallel._state, "pool", None)
        again = ember.conv2d(ember.tensor(x), w, b, padding=1, activation="silu").numpy()
        np.testing.assert_array_equal(again, both)
        pool = row_parallel._state["pool"]
        if pool is not None:
            pool.shutdown()


def test_bands_split_over_threads_where_blas_workers_spin(cpu, monkeypatch):
    """numpy imported before ember leaves OpenBLAS's spin timeout long, which turns the
    row split off (workers() == 1); the conv's GEMMs run on one BLAS thread, so its bands
    are still offered to several threads (one range each; a thread that starts late finds
    the bands taken), with the bits of one."""
    rng = np.random.default_rng(9)
    x = ember.tensor(rng.standard_normal((1, 16, 24, 24)).astype(np.float32))
    w = ember.tensor(rng.standard_normal((32, 16, 3, 3)).astype(np.float32))
    b = ember.tensor(rng.standard_normal(32).astype(np.float32))
    monkeypatch.setattr(array_conv, "BAND_BYTES", 4096)
    monkeypatch.setattr(array_conv, "MIN_BAND_COLUMNS", 1)  # 24 bands of one row
    monkeypatch.setattr(row_parallel, "MIN_PARALLEL_ELEMENTS", 1)
    monkeypatch.setattr(row_parallel, "_cpu_count", lambda: 3)
    monkeypatch.setitem(row_parallel._state, "blas_free", None)  # found again, from the 3
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    monkeypatch.setitem(row_parallel._state, "spin_bound", False)
    one = ember.conv2d(x, w, b, padding=1, activation="silu").numpy()
    ranges, real = [], array_conv.run_rows

    def recording(fn, rows, per_row, **kw):
        def marked(start, stop):
            ranges.append((start, stop))
            fn(start, stop)

        real(marked, rows, per_row, **kw)

    monkeypatch.setattr(array_conv, "run_rows", recording)
    monkeypatch.setitem(row_parallel._state, "spin_bound", True)
    assert row_parallel.workers() == 1 and row_parallel.workers(blas_free=True) == 3
    split = ember.conv2d(x, w, b, padding=1, activation="silu").numpy()
    pool = row_parallel._state["pool"]
    if pool is not None:
        pool.shutdown()
    # shared band by band (one thread would have run all 24 bands as one range)
    assert sorted(ranges) == [(j, j + 1) for j in range(24)]
    np.testing.assert_array_equal(split, one)


def test_spin_bound_only_when_the_timeout_came_too_late():
    """A fresh process that imports numpy first: workers() is 1 (the BLAS spin check), the
    conv's count is the cores'; EMBER_CPU_THREADS wins over both."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json, numpy, ember\n"
        "from ember.backends import row_parallel as r\n"
        "print(json.dumps([r.workers(), r.workers(blas_free=True), r._cpu_count()]))\n"
    )
    unset = ("OPENBLAS_THREAD_TIMEOUT", "EMBER_CPU_THREADS")
    env = {k: v for k, v in os.environ.items() if k not in unset}

    def counts():
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return json.loads(done.stdout.strip().splitlines()[-1])

    n, free, cores = counts()
    assert n == 1 and free == min(cores, 8)
    env["EMBER_CPU_THREADS"] = "1"
    assert counts()[:2] == [1, 1]


@pytest.mark.parametrize("size,kernel,stride,padding,dilation,rows", [
    ((3, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), (0, 9)),
    ((3, 9, 11), (3, 3), (1, 1), (1, 1), (1, 1), (4, 7)),     # a band inside the map
    ((2, 13, 10), (3, 3), (2, 2), (1, 1), (1, 1), (3, 7)),    # stride 2 (YOLO's downsampling)
    ((2, 17, 17), (5, 5), (2, 1), (2, 0), (1, 1), (0, 7)),
    ((4, 12, 12), (3, 3), (1, 1), (2, 2), (2, 2), (5, 12)),   # dilated
    ((2, 5, 5), (3, 3), (1, 1), (4, 3), (1, 1), (0, 11)),     # padding wider than the map
])
def test_band_columns_are_the_taps_of_the_padded_input(size, kernel, stride, padding,
                                                        dilation, rows):
    """A band's im2col columns (one strided copy of its zero-bordered input rows) against
    the definition: tap (a, b) of output (r, j) reads padded input (r sh + a dh, j sw + b dw)."""
    rng = np.random.default_rng(1)
    src = rng.standard_normal(size).astype(np.float32)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    oh = (size[1] + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (size[2] + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    r0, r1 = rows
    padded = np.pad(src, ((0, 0), (ph, ph), (pw, pw)))
    want = np.empty((size[0], kh, kw, r1 - r0, ow), np.float32)
    for a in range(kh):
        for b in range(kw):
            for r in range(r0, r1):
                want[:, a, b, r - r0] = padded[:, r * sh + a * dh, b * dw : b * dw + (ow - 1) * sw + 1 : sw]
    assert r1 <= oh
    got = array_conv._band_columns(np, src, r0, r1, ow, kernel, stride, padding, dilation)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)
