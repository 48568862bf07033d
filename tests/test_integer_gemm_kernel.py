"""llvm_integer_gemm: a prompt's quantized products with x rounded to 16 bits per group of
32 values and exact integer sums (AVX-512 VNNI): its rounding of x, its products against
float64 on that rounded x and the exact weight, every packed format, any rows, columns,
pieces and threads with the same bits, the columns and rows it must not touch, and when
array_qmatmul takes it."""

import numpy as np
import pytest
from helpers import missing
from test_gguf import assert_same_bits
from test_qmatmul_cpu import weight

from ember.backends import array_qmatmul as aq
from ember.backends import llvm_build, llvm_integer_gemm, llvm_spin
from ember.errors import UnsupportedDType
from ember.io import quant
from ember.io.quant import BLOCK_SIZES, GGMLType, StackedQTensor

PACKED = [
    GGMLType.Q4_0,
    GGMLType.Q4_1,
    GGMLType.Q5_0,
    GGMLType.Q5_1,
    GGMLType.Q8_0,
    GGMLType.Q4_K,
    GGMLType.Q5_K,
]


@pytest.fixture
def integer():
    """The compiled integer kernels: skipped where llvmlite is missing or the CPU has no
    AVX-512 VNNI (a failure under CI=true only for a missing llvmlite: CI's hosts differ,
    an AMD one without VNNI runs the f32 path, which its own tests cover)."""
    try:
        import llvmlite  # noqa: F401
    except ImportError as exc:
        missing("llvmlite (the ember[jit] extra)", str(exc))
    if not llvm_integer_gemm.supported(llvm_build.host()):
        pytest.skip("this CPU has no AVX-512 VNNI: llvm_integer_gemm is not built here")
    built = llvm_build.kernels("llvm_integer_gemm")
    if built is None:
        missing("llvm_integer_gemm's kernels", "EMBER_JIT=0 is set, or their build failed")
    return built


def rounded(integer, x):
    """x as the kernels round it, in float64: each group of 32 as dx * q."""
    m, k = x.shape
    q, scales = integer.quantize(x)
    groups = k // llvm_integer_gemm.GROUP
    return (q[:m].astype(np.float64).reshape(m, groups, -1) * scales[0, :m, :, None]).reshape(m, k)


def assert_product_of(got, xr, w):
    """got == xr @ w.T (float64 on the rounded x) to f32 rounding of the sums."""
    w = w.astype(np.float64)
    want = xr @ w.T
    scale = np.abs(xr) @ np.abs(w).T
    bad = np.abs(got - want) > 2e-6 * scale + 1e-30
    assert not bad.any(), f"{bad.sum()} of {bad.size} off: max {np.abs(got - want).max()}"


def test_x_is_rounded_per_group_of_32_to_16_bits(integer):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 96)) * rng.uniform(0.01, 100, (5, 1))).astype(np.float32)
    x[2, 32:64] = 0  # a group of zeros: scale 0, values 0
    x[3, 5] = 1e4  # an outlier rounds only its own group coarsely
    q, scales = integer.quantize(x)
    assert q.dtype == np.int16 and q.shape == (8, 96)  # rows padded to a multiple of 4
    assert (q[5:] == 0).all() and (scales[:, 5:] == 0).all()
    groups = x.reshape(5, 3, 32).astype(np.float64)
    dx = np.abs(groups).max(-1) / llvm_integer_gemm.QMAX
    np.testing.assert_allclose(scales[0, :5], dx, rtol=1e-6)
    assert np.abs(q).max() <= llvm_integer_gemm.QMAX
    safe = np.where(dx > 0, dx, 1)[..., None]
    off = np.abs(q[:5].reshape(5, 3, 32) - groups / safe)
    assert off.max() <= 0.5 + 1e-3  # each value to its nearest step
    assert (q[2, 32:64] == 0).all() and scales[0, 2, 1] == 0
    sums = q[:5].reshape(5, 3, 32).astype(np.float64).sum(-1)
    np.testing.assert_allclose(scales[1, :5], dx * sums, rtol=1e-5, atol=1e-30)
    # the rounding error is at most half a step of the group's largest value
    err = np.abs(rounded(integer, x) - x).reshape(5, 3, 32).max(-1)
    assert (err <= 0.5 * dx * (1 + 1e-5)).all()


@pytest.mark.parametrize("t", PACKED, ids=lambda t: t.name)
@pytest.mark.parametrize("m", [1, 13])
def test_products_equal_float64_on_the_rounded_x(integer, t, m):
    """Rows not a multiple of the tile's 4, 70 weight rows (not of its 48 columns), 512
    weights a row (two spans of 8 groups), pieces of 32 rows shared with a helper."""
    rng = np.random.default_rng(50 + int(t) + m)
    w = weight(rng, t, 70, 512 // BLOCK_SIZES[t][0])
    kernels = aq.compiled_kernels(t)
    rows = kernels.weight_rows(w)
    x = rng.standard_normal((m, 512)).astype(np.float32)
    got = np.full((m, 70), np.nan, np.float32)
    pieces = [(rows, r0, min(70, r0 + 32), 0) for r0 in range(0, 70, 32)]
    integer.run(x, got, pieces, kernels.pack_address, llvm_spin.process_helpers(2))
    assert_product_of(got, rounded(integer, x), w.dequantize())


def test_the_bits_do_not_depend_on_pieces_or_threads(integer):
    rng = np.random.default_rng(3)
    t = GGMLType.Q4_K
    w = weight(rng, t, 150, 3)
    kernels = aq.compiled_kernels(t)
    rows = kernels.weight_rows(w)
    x = rng.standard_normal((21, w.shape[1])).astype(np.float32)
    runs = []
    for step, helpers in ((150, 0), (48, 0), (17, 2), (5, 1)):
        out = np.empty((21, 150), np.float32)
        pieces = [(rows, r0, min(150, r0 + step), 0) for r0 in range(0, 150, step)]
        team = llvm_spin.process_helpers(helpers + 1)
        integer.run(x, out, pieces, kernels.pack_address, team)
        runs.append(out)
    for other in runs[1:]:
        assert_same_bits(other, runs[0])


def test_only_its_own_rows_and_columns_are_written(integer):
    """Output columns of two parts at their offsets in a wider array: the columns beside
    them and the rows after x's keep their values (the padded rows and columns of the
    tiles are never stored)."""
    rng = np.random.default_rng(4)
    t = GGMLType.Q8_0
    a, b = weight(rng, t, 50, 4), weight(rng, t, 21, 4)
    kernels = aq.compiled_kernels(t)
    pieces = [(kernels.weight_rows(a), 0, 50, 0), (kernels.weight_rows(b), 0, 21, 50)]
    x = rng.standard_normal((6, 128)).astype(np.float32)
    wide = np.full((9, 80), -7.0, np.float32)
    integer.run(x, wide[:6, 3:74], pieces, kernels.pack_address, llvm_spin.process_helpers(2))
    assert (wide[:, :3] == -7).all() and (wide[:, 74:] == -7).all() and (wide[6:] == -7).all()
    want = np.concatenate([a.dequantize(), b.dequantize()])
    assert_product_of(wide[:6, 3:74], rounded(integer, x), want)


def test_auto_takes_it_for_many_rows_unless_told_not_to(integer, monkeypatch):
    rng = np.random.default_rng(5)
    parts = [weight(rng, GGMLType.Q4_1, 40, 4), weight(rng, GGMLType.Q4_1, 24, 4)]
    w = StackedQTensor(parts)
    x = rng.standard_normal((aq.FUSED_MAX_ROWS + 1, 128)).astype(np.float32)
    taken = []
    real = llvm_integer_gemm.IntegerGemm.run
    monkeypatch.setattr(
        llvm_integer_gemm.IntegerGemm, "run", lambda *a: taken.append(1) or real(*a)
    )
    got = quant.qmatmul(x, w, path="auto")
    assert taken == [1]
    assert_product_of(got, rounded(integer, x), w.dequantize())
    assert_same_bits(got, quant.qmatmul(x, w, path="integer"))
    with aq.exact_products():
        exact = quant.qmatmul(x, w, path="auto")
    monkeypatch.setenv("EMBER_INTEGER_GEMM", "0")
    assert_same_bits(quant.qmatmul(x, w, path="auto"), exact)
    assert taken == [1, 1]  # path="integer" only: the exact ones decoded to f32
    assert_same_bits(exact, quant.qmatmul(x, w, path="decode"))


def test_a_format_it_does_not_pack_is_refused_by_name_and_left_to_f32(integer):
    rng = np.random.default_rng(6)
    w = weight(rng, GGMLType.Q6_K, 20, 2)  # terms of 16 weights
    x = rng.standard_normal((8, w.shape[1])).astype(np.float32)
    with pytest.raises(UnsupportedDType, match="q6_k does not pack"):
        quant.qmatmul(x, w, path="integer")
    assert_same_bits(quant.qmatmul(x, w, path="auto"), quant.qmatmul(x, w, path="decode"))
