"""llvm_decode_gemm's compiled driver of a many-row product's pieces (each decoded by its
format's compiled decoder, then multiplied by BLAS's sgemm, the pieces shared with
llvm_spin's helpers): the bits of the Python path (decoder, then np.matmul on one BLAS
thread) for every weight format, on one thread or three, each piece's columns written
and nothing else."""

import numpy as np
import pytest
from helpers import missing
from test_gguf import assert_same_bits
from test_qmatmul_cpu import TYPES, assert_matmul_to_f32_rounding, weight
from test_qmatmul_f16 import half_weight

from ember.backends import array_qmatmul as aq
from ember.backends import llvm_build, llvm_decode_gemm, llvm_spin, row_parallel
from ember.backends.blas_threads import single_thread_below
from ember.io.quant import BLOCK_SIZES, GGMLType, StackedQTensor


@pytest.fixture
def driver():
    """The compiled driver: skipped where llvmlite is missing or the CPU has no helpers
    (a failure under CI=true, whose x86-64 Linux has both, and numpy's OpenBLAS)."""
    try:
        import llvmlite  # noqa: F401
    except ImportError as exc:
        missing("llvmlite (the ember[jit] extra)", str(exc))
    built = llvm_build.kernels("llvm_decode_gemm")
    if built is None:
        missing("llvm_decode_gemm's driver", "EMBER_JIT=0, a CPU without llvm_spin's helpers, "
                "or no cblas_sgemm in numpy's BLAS")
    return built


def python_pieces(x, pieces, kernels, out):
    """The Python path's arithmetic, piece after piece on this thread: the reference."""
    with single_thread_below(0):
        for rows, r0, r1, at in pieces:
            chunk = np.empty((r1 - r0, x.shape[1]), np.float32)
            kernels.decode(rows, chunk, r0, r1)
            np.matmul(x, chunk.T, out=out[:, at + r0 : at + r1])
    return out


def cut(rows, at, step):
    return [(rows, r0, min(rows.shape[0], r0 + step), at) for r0 in range(0, rows.shape[0], step)]


@pytest.mark.parametrize("t", TYPES + [GGMLType.F16], ids=lambda t: t.name)
@pytest.mark.parametrize("helpers", [0, 2])
def test_the_driver_gives_the_python_paths_bits(driver, t, helpers):
    rng = np.random.default_rng(40 + int(t))
    if t == GGMLType.F16:
        w, _ = half_weight(rng, 70, 96)
    else:
        w = weight(rng, t, 70, 512 // BLOCK_SIZES[t][0])
    kernels = aq.compiled_kernels(t)
    rows = kernels.weight_rows(w)
    x = rng.standard_normal((13, w.shape[1])).astype(np.float32)
    pieces = cut(rows, 0, 16)  # 16, 16, 16, 16 and 6 rows
    want = python_pieces(x, pieces, kernels, np.empty((13, 70), np.float32))
    got = np.full((13, 70), np.nan, np.float32)
    team = llvm_spin.process_helpers(helpers + 1)
    assert (team is None) == (helpers == 0)
    scratch = np.empty((helpers + 1) * 16 * w.shape[1], np.float32)
    with single_thread_below(0):
        driver.run(x, got, pieces, kernels.decode_address, team, scratch)
    assert_same_bits(got, want)
    assert_matmul_to_f32_rounding(got, x, w.dequantize())


def test_each_piece_writes_its_own_columns_of_a_wider_output(driver):
    """Pieces of two parts at their output columns, in an output whose rows are wider
    than the product (a column slice): the columns outside stay as they were."""
    rng = np.random.default_rng(5)
    t = GGMLType.Q8_0
    a, b = weight(rng, t, 50, 8), weight(rng, t, 21, 8)
    kernels = aq.compiled_kernels(t)
    pieces = cut(kernels.weight_rows(a), 0, 13) + cut(kernels.weight_rows(b), 50, 7)
    x = rng.standard_normal((6, 256)).astype(np.float32)
    wide = np.full((6, 80), -7.0, np.float32)
    with single_thread_below(0):
        driver.run(x, wide[:, 3:74], pieces, kernels.decode_address,
                   llvm_spin.process_helpers(2), np.empty(2 * 13 * 256, np.float32))
    assert (wide[:, :3] == -7).all() and (wide[:, 74:] == -7).all()
    want = np.concatenate([a.dequantize(), b.dequantize()]).astype(np.float32)
    assert_matmul_to_f32_rounding(wide[:, 3:74], x, want)


def test_a_prompts_product_takes_the_driver_with_the_python_paths_bits(driver, monkeypatch):
    """array_qmatmul's many-row product of a row stack: through the driver (its pieces cut
    as the Python path cuts them, at least SPLIT_CHUNKS a part), on one thread or three,
    the bits of the Python path."""
    rng = np.random.default_rng(9)
    parts = [weight(rng, GGMLType.Q4_1, 70, 4), weight(rng, GGMLType.Q4_1, 33, 4)]
    w = StackedQTensor(parts)
    x = rng.standard_normal((9, w.shape[1])).astype(np.float32)
    seen = []
    real_run = llvm_decode_gemm.DecodeGemm.run
    monkeypatch.setattr(
        llvm_decode_gemm.DecodeGemm,
        "run",
        lambda self, x2, out, pieces, *a: seen.append(pieces) or real_run(self, x2, out, pieces, *a),
    )
    runs = {}
    for threads in (1, 3):
        monkeypatch.setitem(row_parallel._state, "workers", threads)
        runs[threads] = aq.qmatmul_rows(x, w, np.empty((9, 103), np.float32), path="decode")
    assert len(seen) == 2
    for p, at in zip(parts, w.offsets, strict=False):  # offsets end with the total
        spans = sorted((r0, r1) for rows, r0, r1, col in seen[1] if col == at)
        assert len(spans) >= aq.SPLIT_CHUNKS
        assert spans[0][0] == 0 and spans[-1][1] == p.shape[0]
        assert all(s[1] == n[0] for s, n in zip(spans, spans[1:], strict=False))
    monkeypatch.setattr(aq, "_compiled_pieces", lambda *a: False)
    python = aq.qmatmul_rows(x, w, np.empty((9, 103), np.float32), path="decode")
    assert_same_bits(runs[1], python)
    assert_same_bits(runs[3], python)
    assert_matmul_to_f32_rounding(runs[3], x, w.dequantize())


def test_numpys_blas_gives_its_sgemm(driver):
    found = llvm_decode_gemm.sgemm_address()
    assert found is not None and found[0] == driver.sgemm and found[1] in (32, 64)
