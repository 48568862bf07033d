"""The CPU quantized matmul's paths (backends/array_qmatmul.py): which path a product takes,
its rows and chunks over the threads with the same bits, row stacks, and the numpy path
that serves without the compiled kernels (the kernels themselves, type by type:
tests/test_qmatmul_llvm_quant.py)."""

import itertools

import numpy as np
import pytest
from helpers import missing
from test_gguf import assert_same_bits, random_blocks

from ember.backends import array_qmatmul as aq
from ember.backends import llvm_quant
from ember.errors import UnsupportedDType
from ember.io import quant
from ember.io.quant import BLOCK_SIZES, GGMLType, QTensor, StackedQTensor


# every ggml block type (llvm_quant's kernels take them all)
TYPES = [
    GGMLType.Q4_0,
    GGMLType.Q4_1,
    GGMLType.Q5_0,
    GGMLType.Q5_1,
    GGMLType.Q8_0,
    GGMLType.Q2_K,
    GGMLType.Q3_K,
    GGMLType.Q4_K,
    GGMLType.Q5_K,
    GGMLType.Q6_K,
]


@pytest.fixture
def jit():
    """llvm_quant's kernels by type: skipped where llvmlite is not installed, a failure
    under CI=true."""
    try:
        import llvmlite  # noqa: F401
    except ImportError as exc:
        missing("llvmlite (the ember[jit] extra)", str(exc))
    built = llvm_quant.kernels()
    if built is None:
        missing("llvm_quant's kernels", "EMBER_JIT=0 is set")
    return built


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


@pytest.mark.parametrize("t", [GGMLType.Q4_1, GGMLType.Q3_K], ids=lambda t: t.name)
def test_decode_path_chunks_rows_through_gemm(jit, t):
    rng = np.random.default_rng(300 + int(t))
    w = weight(rng, t, 40, 512 // BLOCK_SIZES[t][0])
    x = rng.standard_normal((9, w.shape[1])).astype(np.float32)
    got = quant.qmatmul(x, w, path="decode", chunk_rows=16)  # chunks of 16, 16 and 8 rows
    assert_matmul_to_f32_rounding(got, x, w.dequantize())


def test_auto_takes_the_fused_kernel_for_few_rows_and_decoders_for_many(jit, monkeypatch):
    """With the integer products off (EMBER_INTEGER_GEMM=0; where they are on, they take
    the many-row products: tests/test_integer_gemm_kernel.py)."""
    monkeypatch.setenv("EMBER_INTEGER_GEMM", "0")
    rng = np.random.default_rng(7)
    w = weight(rng, GGMLType.Q8_0, 12, 4)
    calls = []
    fused, chunked = aq._FusedPlan.run, aq._chunked_gemm
    monkeypatch.setattr(aq._FusedPlan, "run", lambda *a: calls.append("fused") or fused(*a))
    monkeypatch.setattr(aq, "_chunked_gemm", lambda *a: calls.append("decode") or chunked(*a))
    for m in (1, aq.FUSED_MAX_ROWS, aq.FUSED_MAX_ROWS + 1):
        calls.clear()
        x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
        got = quant.qmatmul(x, w, path="auto")
        assert calls[0] == ("fused" if m <= aq.FUSED_MAX_ROWS else "decode"), m
        assert_matmul_to_f32_rounding(got, x, w.dequantize())


def test_rows_split_over_threads_give_the_same_bits(jit, monkeypatch):
    """Without llvm_spin's helpers (a CPU they are not built for) the fused kernel's rows go
    over row_parallel's pool, in ranges that start a pair of rows: the bits of one thread."""
    from ember.backends import llvm_spin, row_parallel

    monkeypatch.setattr(llvm_spin, "process_helpers", lambda threads: None)
    monkeypatch.setattr(row_parallel, "_choices", row_parallel._Choices())
    rng = np.random.default_rng(8)
    w = weight(rng, GGMLType.Q4_K, 301, 3)  # 301 x 768 weights: enough for three threads
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
    """Without llvm_decode_gemm's driver (no helpers on the CPU, no sgemm found), the decode
    path splits a weight (and each part of a row stack) into a fixed count of chunks,
    decoded and multiplied on whichever of row_parallel's threads is free: one thread or
    three, the same bits, and every weight row in exactly one chunk (the driver's side:
    tests/test_decode_gemm_kernel.py)."""
    from ember.backends import row_parallel

    monkeypatch.setattr(aq, "_compiled_pieces", lambda *a: False)
    rng = np.random.default_rng(9)
    parts = [weight(rng, GGMLType.Q4_1, 70, 4), weight(rng, GGMLType.Q4_1, 33, 4)]
    w = StackedQTensor(parts)
    x = rng.standard_normal((9, w.shape[1])).astype(np.float32)
    monkeypatch.setitem(row_parallel._state, "workers", 1)
    one = quant.qmatmul(x, w, path="decode")
    decoded = []
    k = jit[int(GGMLType.Q4_1)]
    real = k.decode
    monkeypatch.setattr(
        k, "decode", lambda raw, out, r0, r1: decoded.append((raw.shape[0], r0, r1)) or real(raw, out, r0, r1)
    )
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


@pytest.mark.parametrize("t", [GGMLType.Q4_1, GGMLType.Q2_K], ids=lambda t: t.name)
@pytest.mark.parametrize("m", [1, 3])
def test_a_row_stacks_fused_product_is_its_parts_products_side_by_side(jit, m, t):
    """The fused kernels write each part straight into its columns of the output: each
    part's own product, bit for bit, at its offset (the first two parts large enough to
    be shared over the threads, the last not)."""
    rng = np.random.default_rng(12)
    parts = [weight(rng, t, n, 512 // BLOCK_SIZES[t][0]) for n in (300, 262, 33)]
    w = StackedQTensor(parts)
    x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
    got = quant.qmatmul(x, w, path="fused")
    assert got.shape == (m, 595) and got.flags.c_contiguous
    assert_same_bits(got, np.concatenate([quant.qmatmul(x, p, path="fused") for p in parts], 1))
    assert_matmul_to_f32_rounding(got, x, w.dequantize())


def test_without_the_kernels_every_path_is_numpys(monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")  # as if llvmlite were not installed
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
    assert aq.compiled_kernels(GGMLType.Q4_K) is None
    assert aq.compiled_kernels(GGMLType.F16) is None


def test_an_unknown_path_is_refused():
    w = weight(np.random.default_rng(1), GGMLType.Q8_0, 2, 1)
    with pytest.raises(ValueError, match="path must be one of"):
        quant.qmatmul(np.ones((1, 32), np.float32), w, path="gpu")
