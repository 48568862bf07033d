"""The CPU quantized matmul's paths (backends/array_qmatmul.py): numba's fused dot kernels
and row decoders for the ggml block types llvm_quant leaves to them, against
dequantize-then-matmul, and the numpy path that serves when numba is missing
(llvm_quant's Q4_0, Q4_1, Q5_0, Q8_0, Q4_K and Q6_K: tests/test_qmatmul_llvm_quant.py)."""

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import missing
from test_gguf import assert_same_bits, random_blocks

from ember.backends import array_qmatmul as aq
from ember.errors import UnsupportedDType
from ember.io import quant
from ember.io.quant import BLOCK_SIZES, GGMLType, QTensor, StackedQTensor

TYPES = [GGMLType.Q5_1, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q5_K]


@pytest.fixture
def jit():
    """The numba kernels: skipped where numba is not installed, a failure under CI=true."""
    try:
        from ember.backends import array_qkernels
    except ImportError as exc:
        missing("numba (the ember[jit] extra)", str(exc))
    if not aq.jit_available():
        missing("the numba kernels", "EMBER_JIT=0 is set")
    return array_qkernels


def weight(rng, t, rows, blocks):
    """A random (rows, blocks * block size) QTensor of type t: random bytes, finite scales."""
    block = BLOCK_SIZES[t][0]
    return QTensor(random_blocks(rng, t, rows * blocks).reshape(-1), t, (rows, blocks * block))


def assert_matmul_to_f32_rounding(got, x, w):
    """got == x @ w.T up to f32 rounding: the error is a few ulps of sum |x| |w|."""
    w = w.astype(np.float64)
    want = x.astype(np.float64) @ w.T
    scale = np.abs(x).astype(np.float64) @ np.abs(w).T
    bad = np.abs(got - want) > 1e-5 * scale + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} outputs off: max {np.abs(got - want).max()}"


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("m", [1, 3])
def test_fused_kernel_equals_dequantize_then_matmul(jit, t, m):
    rng = np.random.default_rng(int(t) * 10 + m)
    blocks = 512 // BLOCK_SIZES[t][0] or 2
    w = weight(rng, t, 7, blocks)  # an odd row count: the kernels take rows two at a time
    x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
    got = quant.qmatmul(x, w, path="fused")
    assert got.shape == (m, 7)
    assert_matmul_to_f32_rounding(got, x, w.dequantize())


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_row_decoder_is_bit_exact_with_the_numpy_dequantizer(jit, t):
    rng = np.random.default_rng(200 + int(t))
    w = weight(rng, t, 5, 2 if BLOCK_SIZES[t][0] == 256 else 9)
    decode = getattr(jit, "decode_" + t.name.lower())
    got = np.full((3, w.shape[1]), np.nan, np.float32)
    decode(w.raw.reshape(5, -1), got, 1, 4, jit.F16)  # rows 1:4 only
    assert_same_bits(got, w.dequantize()[1:4])


@pytest.mark.parametrize("t", [GGMLType.Q5_1, GGMLType.Q3_K], ids=lambda t: t.name)
def test_decode_path_chunks_rows_through_gemm(jit, t):
    rng = np.random.default_rng(300 + int(t))
    w = weight(rng, t, 40, 2)
    x = rng.standard_normal((9, w.shape[1])).astype(np.float32)
    got = quant.qmatmul(x, w, path="decode", chunk_rows=16)  # chunks of 16, 16 and 8 rows
    assert_matmul_to_f32_rounding(got, x, w.dequantize())


def test_auto_takes_the_fused_kernel_for_few_rows_and_decoders_for_many(jit, monkeypatch):
    rng = np.random.default_rng(7)
    w = weight(rng, GGMLType.Q5_1, 12, 4)
    calls = []
    kernels, f16, _spread = aq._kernels()
    dot, dec, _wide = kernels[int(GGMLType.Q5_1)]
    spied = {
        int(GGMLType.Q5_1): (
            lambda *a: calls.append("fused") or dot(*a),
            lambda *a: calls.append("decode") or dec(*a),
            None,  # the fused kernel on the caller's thread or row_parallel's pool
        )
    }
    monkeypatch.setitem(aq._state, "kernels", (spied, f16, None))
    for m in (1, aq.FUSED_MAX_ROWS, aq.FUSED_MAX_ROWS + 1):
        calls.clear()
        x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
        got = quant.qmatmul(x, w, path="auto")
        assert calls[0] == ("fused" if m <= aq.FUSED_MAX_ROWS else "decode"), m
        assert_matmul_to_f32_rounding(got, x, w.dequantize())


def _without_numba_threads(monkeypatch):
    """The kernels as where numba's threading layer is unsafe: row_parallel's pool runs them."""
    kernels, f16, _spread = aq._kernels()
    pool_only = {t: (dot, dec, None) for t, (dot, dec, _wide) in kernels.items()}
    monkeypatch.setitem(aq._state, "kernels", (pool_only, f16, None))


def test_rows_split_over_threads_give_the_same_bits(jit, monkeypatch):
    from ember.backends import row_parallel

    _without_numba_threads(monkeypatch)
    rng = np.random.default_rng(8)
    w = weight(rng, GGMLType.Q5_K, 301, 3)  # 301 x 768 weights: enough for three threads
    assert w.shape[0] * w.shape[1] >= 3 * row_parallel.MIN_PARALLEL_ELEMENTS
    x = rng.standard_normal((1, w.shape[1])).astype(np.float32)
    ranges = []
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    one = quant.qmatmul(x, w, path="fused")
    real = row_parallel.run_rows
    monkeypatch.setattr(
        aq,
        "run_rows",
        lambda fn, *a, **k: real(lambda s, e: ranges.append((s, e)) or fn(s, e), *a, **k),
    )
    monkeypatch.setitem(row_parallel._state, "workers", 3)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    split = quant.qmatmul(x, w, path="fused")
    ranges.sort()  # several ranges, each starting a pair of rows, covering every row once
    assert len(ranges) > 1 and ranges[0][0] == 0 and ranges[-1][1] == w.shape[0]
    assert all(a[1] == b[0] and b[0] % 2 == 0 for a, b in itertools.pairwise(ranges))
    assert_same_bits(split, one)


def test_a_prompts_chunks_go_over_the_threads_with_the_same_bits(jit, monkeypatch):
    """The decode path splits a weight (and each part of a row stack) into a fixed count of
    chunks, decoded and multiplied on whichever thread is free: one thread or three, the
    same bits, and every weight row in exactly one chunk."""
    from ember.backends import row_parallel

    rng = np.random.default_rng(9)
    parts = [weight(rng, GGMLType.Q5_1, 70, 4), weight(rng, GGMLType.Q5_1, 33, 4)]
    w = StackedQTensor(parts)
    x = rng.standard_normal((9, w.shape[1])).astype(np.float32)
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    one = quant.qmatmul(x, w, path="decode")
    decoded = []
    kernels, f16, spread = aq._kernels()
    counted = {
        t: (dot, lambda raw, out, r0, r1, f, d=dec: decoded.append((raw.shape[0], r0, r1))
            or d(raw, out, r0, r1, f), wide)
        for t, (dot, dec, wide) in kernels.items()
    }
    monkeypatch.setitem(aq._state, "kernels", (counted, f16, spread))
    monkeypatch.setitem(row_parallel._state, "workers", 3)
    monkeypatch.setitem(row_parallel._state, "pool", None)
    split = quant.qmatmul(x, w, path="decode")
    assert_same_bits(split, one)
    assert_matmul_to_f32_rounding(split, x, w.dequantize())
    for p in parts:  # each part in at least SPLIT_CHUNKS chunks, covering its rows once
        spans = sorted((r0, r1) for n, r0, r1 in decoded if n == p.shape[0])
        assert len(spans) >= aq.SPLIT_CHUNKS
        assert spans[0][0] == 0 and spans[-1][1] == p.shape[0]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))


@pytest.mark.parametrize("t", [GGMLType.Q4_1, GGMLType.Q5_1], ids=lambda t: t.name)
@pytest.mark.parametrize("m", [1, 3])
def test_a_row_stacks_fused_product_is_its_parts_products_side_by_side(jit, m, t):
    """With one row of x the fused kernels write each part straight into its columns of
    the output; with more, into an array per part placed after: either way each part's
    own product, bit for bit, at its offset (the first two parts large enough to be
    shared over the threads, the last not)."""
    rng = np.random.default_rng(12)
    parts = [weight(rng, t, n, 16) for n in (300, 262, 33)]
    w = StackedQTensor(parts)
    x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
    got = quant.qmatmul(x, w, path="fused")
    assert got.shape == (m, 595) and got.flags.c_contiguous
    assert_same_bits(got, np.concatenate([quant.qmatmul(x, p, path="fused") for p in parts], 1))
    assert_matmul_to_f32_rounding(got, x, w.dequantize())


@pytest.mark.parametrize("t", [GGMLType.Q5_1, GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q5_K],
                         ids=lambda t: t.name)
def test_numba_threads_split_rows_with_the_same_bits(jit, monkeypatch, t):
    from ember.backends import array_qkernels_parallel as par
    from ember.backends import row_parallel

    if not par.usable():
        pytest.skip(f"numba's threading layer here is {par.numba.threading_layer()!r}: "
                    "row_parallel's pool runs the kernels (tested above)")
    rng = np.random.default_rng(10 + int(t))
    w = weight(rng, t, 301, 3)  # an odd row count: the last span ends on half a pair
    x = rng.standard_normal((1, w.shape[1])).astype(np.float32)
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    one = quant.qmatmul(x, w, path="fused")
    kernels, f16, spread = aq._kernels()
    raw = w.raw.reshape(w.shape[0], -1)
    xs = x.reshape(1, -1, 16).sum(-1, dtype=np.float32)
    wide = kernels[int(t)][2]
    for chunks in (2, 3, 4, 7):  # more spans than numba has threads too
        out = np.full((1, w.shape[0]), np.nan, np.float32)
        wide(raw, x, xs, out, w.shape[0], f16, chunks)
        assert_same_bits(out, one)
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    assert_same_bits(quant.qmatmul(x, w, path="fused"), one)
    assert_matmul_to_f32_rounding(one, x, w.dequantize())


FORKED_CHILD = """
import os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from ember.backends import array_qkernels_parallel as par, row_parallel
from ember.io import quant
from ember.io.quant import GGMLType
from test_qmatmul_cpu import weight
row_parallel._state["workers"] = 2
rng = np.random.default_rng(0)
w = weight(rng, GGMLType.Q5_1, 301, 24)  # 301 x 768: split in two in the parent
x = rng.standard_normal((1, w.shape[1])).astype(np.float32)
want = quant.qmatmul(x, w, path="fused")  # numba's threads launched in the parent
launched = par.usable()
pid = os.fork()
if pid == 0:
    same = np.array_equal(quant.qmatmul(x, w, path="fused"), want)
    os._exit(0 if same and not par.usable() else 3)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) or (0 if launched else 4))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_runs_the_kernels_after_the_parent_spread_them(jit):
    # GNU OpenMP ends a forked child at its first parallel launch once the parent has run
    # one: the child must compute on row_parallel's pool instead, and get the parent's bits
    from ember.backends import array_qkernels_parallel as par

    if not par.usable():
        pytest.skip(f"numba's threading layer here is {par.numba.threading_layer()!r}")
    done = subprocess.run([sys.executable, "-c", FORKED_CHILD, os.path.dirname(__file__)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_without_numba_every_path_is_numpys(monkeypatch):
    monkeypatch.setitem(aq._state, "kernels", None)  # as if numba were not installed
    monkeypatch.setitem(aq._state, "tried", True)
    assert not aq.jit_available()
    rng = np.random.default_rng(9)
    w = weight(rng, GGMLType.Q5_K, 6, 1)
    seen = []
    real = QTensor.dequantize_rows
    monkeypatch.setattr(
        QTensor,
        "dequantize_rows",
        lambda self, a, b, out=None: seen.append((a, b)) or real(self, a, b, out),
    )
    for m in (1, 8):
        seen.clear()
        x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
        assert_matmul_to_f32_rounding(quant.qmatmul(x, w, path="auto"), x, w.dequantize())
        assert seen == [(0, 6)]
    with pytest.raises(UnsupportedDType, match=r"ember\[jit\]"):
        quant.qmatmul(x, w, path="fused")


def test_ember_jit_0_turns_the_kernels_off(monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")
    assert aq._load_kernels() is None


def test_an_unknown_path_is_refused():
    w = weight(np.random.default_rng(1), GGMLType.Q8_0, 2, 1)
    with pytest.raises(ValueError, match="path must be one of"):
        quant.qmatmul(np.ones((1, 32), np.float32), w, path="gpu")
