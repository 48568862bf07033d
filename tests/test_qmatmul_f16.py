"""F16 host weights on the CPU: llvm_f16's kernels (through array_qmatmul) against float64
products of the same halves, and the backend's answer to whether it computes with them
(whisper_load keeps f16 weights where it does)."""

import os

import numpy as np
import pytest
from helpers import missing
from test_gguf import assert_same_bits
from test_qmatmul_cpu import assert_matmul_to_f32_rounding

from ember.backends import array_qmatmul as aq
from ember.backends import llvm_f16
from ember.io import quant
from ember.io.quant import GGMLType, QTensor


@pytest.fixture
def jit():
    """llvm_f16's compiled kernels: skipped where llvmlite is missing (a failure under
    CI=true)."""
    try:
        import llvmlite  # noqa: F401
    except ImportError as exc:
        missing("llvmlite (the ember[jit] extra)", str(exc))
    kernels = llvm_f16.kernels()
    if kernels is None:
        missing("llvm_f16's kernels", "EMBER_JIT=0, or a CPU without hardware half conversion")
    return kernels


def half_weight(rng, rows, cols, scale=0.5):
    h = (rng.standard_normal((rows, cols)) * scale).astype(np.float16)
    return QTensor(h.view(np.uint8), GGMLType.F16, h.shape), h.astype(np.float32)


@pytest.mark.parametrize("cols", [5, 37, 384])  # below, between and at whole vectors
@pytest.mark.parametrize("m", [1, 3, 6])
@pytest.mark.parametrize("path", ["fused", "decode", "auto"])
def test_f16_products_equal_float64_on_the_same_halves(jit, cols, m, path):
    rng = np.random.default_rng(cols * 10 + m)
    w, dense = half_weight(rng, 7, cols)  # an odd row count: rows go two at a time
    x = rng.standard_normal((m, cols)).astype(np.float32)
    got = quant.qmatmul(x, w, path=path)
    assert got.shape == (m, 7)
    assert_matmul_to_f32_rounding(got, x, dense)


def test_the_f16_decoder_widens_every_bit_pattern_as_numpy_does(jit):
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    finite = bits[(bits & 0x7C00) != 0x7C00]  # NaN payloads may be quieted either way
    specials = np.array([0x7C00, 0xFC00], np.uint16)  # +inf, -inf
    row = np.concatenate([finite, specials]).reshape(1, -1)
    got = np.empty(row.shape, np.float32)
    jit.decode(row, got, 0, 1)
    assert_same_bits(got, row.view(np.float16).astype(np.float32))
    nan = np.array([[0x7E00, 0xFE01]], np.uint16)
    out = np.empty(nan.shape, np.float32)
    jit.decode(nan, out, 0, 1)
    assert np.isnan(out).all()


def test_the_dot_kernel_writes_only_its_rows_and_columns(jit):
    """dot(w, x, out, r0, r1) fills out[:, r0:r1] of an output that may be a column slice
    of a wider array (a row stack's part), and nothing else."""
    rng = np.random.default_rng(5)
    _, dense = half_weight(rng, 9, 40)
    halves = dense.astype(np.float16).view(np.uint16)
    x = rng.standard_normal((2, 40)).astype(np.float32)
    wide = np.full((2, 20), -7.0, np.float32)
    cols = wide[:, 5:14]
    jit.dot(halves, x, cols, 2, 6)
    assert_matmul_to_f32_rounding(cols[:, 2:6], x, dense[2:6])
    untouched = np.ones(wide.shape, bool)
    untouched[:, 7:11] = False
    assert (wide[untouched] == -7.0).all()


def test_the_kernels_refuse_arrays_they_cannot_index(jit):
    w = np.zeros((4, 8), np.uint16)
    with pytest.raises(ValueError, match="uint16"):
        jit.dot(
            w.astype(np.int32), np.zeros((1, 8), np.float32), np.zeros((1, 4), np.float32), 0, 4
        )
    with pytest.raises(ValueError, match="uint16"):  # one row, its halves strided
        jit.dot(np.zeros((1, 16), np.uint16)[:, ::2], np.zeros((1, 8), np.float32),
                np.zeros((1, 1), np.float32), 0, 1)
    with pytest.raises(ValueError, match="float32"):
        jit.dot(w, np.zeros((1, 16), np.float32)[:, ::2], np.zeros((1, 4), np.float32), 0, 4)


def test_a_stack_of_f16_parts_runs_as_one_weight(jit):
    rng = np.random.default_rng(3)
    parts = [half_weight(rng, n, 64) for n in (6, 6, 5)]
    stack = quant.StackedQTensor([p for p, _ in parts])
    dense = np.concatenate([d for _, d in parts])
    x = rng.standard_normal((2, 64)).astype(np.float32)
    for path in ("fused", "decode"):
        assert_matmul_to_f32_rounding(quant.qmatmul(x, stack, path=path), x, dense)


@pytest.mark.parametrize("spin_bound", [False, True])
def test_many_rows_go_in_fixed_chunks_over_embers_threads_whether_or_not_blas_spins(
    jit, monkeypatch, spin_bound
):
    """A many-row F16 product goes in chunks over ember's threads, each on one BLAS
    thread, whether or not OpenBLAS's pool would spin (numpy imported before ember or
    after): a whole GEMM on BLAS's threads gives other bits on some hosts (Haswell
    kernels), and the import order must not change a result. The chunks' bits equal
    the same chunks multiplied one after another on one thread."""
    from ember.backends import blas_threads, row_parallel

    rng = np.random.default_rng(12)
    w, dense = half_weight(rng, 203, 96)
    x = rng.standard_normal((37, 96)).astype(np.float32)
    monkeypatch.setitem(row_parallel._state, "workers", 2)
    monkeypatch.setitem(row_parallel._state, "spin_bound", spin_bound)
    chunks = []
    real = aq._chunked_gemm
    monkeypatch.setattr(aq, "_chunked_gemm", lambda *a: chunks.append(1) or real(*a))
    got = aq.qmatmul_rows(x, w, np.empty((37, 203), np.float32), path="decode")
    assert chunks, "the product did not go through ember's chunks"
    with blas_threads.one_thread_throughout():  # one thread: the chunks in turn
        monkeypatch.setitem(row_parallel._state, "workers", 1)
        alone = aq.qmatmul_rows(x, w, np.empty((37, 203), np.float32), path="decode")
    assert_same_bits(got, alone)
    assert_matmul_to_f32_rounding(got, x, dense)


def test_the_cpu_says_it_computes_f16_weights_only_with_the_jit(jit, monkeypatch):
    import ember

    be = ember.Device.cpu().backend
    assert be.computes_quantized(GGMLType.F16)
    assert not be.computes_quantized(GGMLType.F32)  # no kernel: dense is the fast form
    monkeypatch.setenv("EMBER_JIT", "0")
    assert not be.computes_quantized(GGMLType.F16)
    assert not be.computes_quantized(GGMLType.Q4_K)


def test_without_the_kernels_f16_takes_numpys_dequantizer(monkeypatch):
    monkeypatch.setenv("EMBER_JIT", "0")
    rng = np.random.default_rng(6)
    w, dense = half_weight(rng, 5, 24)
    x = rng.standard_normal((1, 24)).astype(np.float32)
    assert_matmul_to_f32_rounding(quant.qmatmul(x, w, path="auto"), x, dense)
    with pytest.raises(aq.UnsupportedDType, match="llvmlite"):
        quant.qmatmul(x, w, path="fused")


KERNEL_RUN = """
import sys
import os

import numpy as np
from ember.backends import llvm_f16
k = llvm_f16.kernels()
rng = np.random.default_rng(11)
w = (rng.standard_normal((9, 70)) * 0.3).astype(np.float16).view(np.uint16)
x = rng.standard_normal((2, 70)).astype(np.float32)
out = np.empty((2, 9), np.float32)
k.dot(w, x, out, 0, 9)
sys.stdout.write(out.tobytes().hex())
"""


def test_the_compiled_code_is_kept_for_the_next_process(jit, tmp_path):
    """The first process writes its machine code under $EMBER_CACHE/jit; the next loads it
    (no passes, no code generation) and computes the same bits; a cache file that fails
    its checksum is not trusted (the process compiles its own) and not overwritten."""
    import subprocess
    import sys

    env = dict(os.environ, EMBER_CACHE=str(tmp_path))

    def run():
        done = subprocess.run([sys.executable, "-c", KERNEL_RUN], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    first = run()
    kept = list((tmp_path / "jit").glob("llvm_f16-*.o"))
    assert len(kept) == 1 and kept[0].stat().st_size > 0
    assert run() == first
    kept[0].write_bytes(b"not an object file")
    assert run() == first
    # a file that fails the check is neither trusted nor replaced: it may not be ember's
    assert kept[0].read_bytes() == b"not an object file"
    names = [p.name for p in (tmp_path / "jit").iterdir()]
    assert kept[0].name in names and not [n for n in names if n.endswith(".part")]
