"""llvm_quant's compiled jit for every ggml block type (through array_qmatmul):
products against float64 on the dequantized weights, row decoders bit for bit against
numpy's dequantizer, splits over llvm_spin's helpers with the whole kernel's bits, and
models in these types that never import numba."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import missing
from test_gguf import assert_same_bits, random_blocks
from test_llvm_spin import AWAKE, shares_with_the_helpers, wait_for
from test_qmatmul_cpu import TYPES, assert_matmul_to_f32_rounding, jit, weight  # noqa: F401

from ember.backends import array_qmatmul as aq
from ember.backends import llvm_build, llvm_quant, llvm_spin, row_parallel
from ember.io import quant
from ember.io.quant import BLOCK_SIZES, GGMLType, QTensor, StackedQTensor

ids = lambda t: t.name  # noqa: E731


@pytest.mark.parametrize("t", TYPES, ids=ids)
@pytest.mark.parametrize("m", [1, 3, 6])
@pytest.mark.parametrize("path", ["fused", "decode", "auto"])
def test_products_equal_float64_on_the_dequantized_weight(jit, t, m, path, monkeypatch):
    # llvm_quant's own kernels: "auto" without the integer products (their tests:
    # tests/test_integer_gemm_kernel.py)
    monkeypatch.setenv("EMBER_INTEGER_GEMM", "0")
    rng = np.random.default_rng(int(t) * 10 + m)
    w = weight(rng, t, 7, 5)  # an odd row count: the jit take rows two at a time
    x = rng.standard_normal((m, w.shape[1])).astype(np.float32)
    used = []
    real = aq._compiled_rows
    monkeypatch.setattr(aq, "_compiled_rows", lambda *a: used.append(a[0]) or real(*a))
    got = quant.qmatmul(x, w, path=path)
    assert used == [jit[int(t)]], "the product did not take llvm_quant's jit"
    assert got.shape == (m, 7)
    assert_matmul_to_f32_rounding(got, x, w.dequantize())


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_the_row_decoder_is_bit_exact_with_the_numpy_dequantizer(jit, t):
    rng = np.random.default_rng(300 + int(t))
    w = weight(rng, t, 6, 9)
    k = jit[int(t)]
    got = np.full((4, w.shape[1]), np.nan, np.float32)
    k.decode(k.weight_rows(w), got, 1, 5)  # rows 1:5 only
    assert_same_bits(got, w.dequantize()[1:5])


# where each type keeps its f16 scales (and minimums) in a block
HALVES = {
    GGMLType.Q4_0: (0,),
    GGMLType.Q4_1: (0, 2),
    GGMLType.Q5_0: (0,),
    GGMLType.Q5_1: (0, 2),
    GGMLType.Q8_0: (0,),
    GGMLType.Q2_K: (80, 82),
    GGMLType.Q3_K: (108,),
    GGMLType.Q4_K: (0, 2),
    GGMLType.Q5_K: (0, 2),
    GGMLType.Q6_K: (208,),
}


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_every_half_scale_decodes_as_numpy_does(jit, t):
    """Each block's scale (and minimum) takes every finite f16 value, subnormals and
    both zeros among them: the decoder widens each as numpy's cast does."""
    block = BLOCK_SIZES[t][1]
    finite = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    finite = finite[(finite & 0x7C00) != 0x7C00]
    rng = np.random.default_rng(int(t))
    raw = rng.integers(0, 256, (finite.size, block), dtype=np.uint8)
    for i, at in enumerate(HALVES[t]):
        raw[:, at : at + 2] = (finite if i == 0 else rng.permutation(finite)).view(np.uint8).reshape(-1, 2)
    rows = finite.size // 64  # 64 blocks a row
    w = QTensor(raw[: rows * 64].reshape(-1), t, (rows, 64 * BLOCK_SIZES[t][0]))
    k = jit[int(t)]
    got = np.empty(w.shape, np.float32)
    k.decode(k.weight_rows(w), got, 0, rows)
    assert_same_bits(got, w.dequantize())


def test_the_dot_kernel_writes_only_its_rows_and_columns(jit):
    rng = np.random.default_rng(5)
    w = weight(rng, GGMLType.Q4_1, 9, 2)
    k = jit[int(GGMLType.Q4_1)]
    x = rng.standard_normal((2, 64)).astype(np.float32)
    wide = np.full((2, 20), -7.0, np.float32)
    cols = wide[:, 5:14]
    k.dot(k.weight_rows(w), x, cols, 2, 6)
    assert_matmul_to_f32_rounding(cols[:, 2:6], x, w.dequantize()[2:6])
    untouched = np.ones(wide.shape, bool)
    untouched[:, 7:11] = False
    assert (wide[untouched] == -7.0).all()


def test_the_kernels_refuse_arrays_they_cannot_index(jit):
    k = jit[int(GGMLType.Q8_0)]
    w = np.zeros((4, 34), np.uint8)
    x, out = np.zeros((1, 32), np.float32), np.zeros((1, 4), np.float32)
    with pytest.raises(ValueError, match="uint8"):
        k.dot(w.view(np.uint16), x, out, 0, 4)
    with pytest.raises(ValueError, match="float32"):
        k.dot(w, np.zeros((1, 64), np.float32)[:, ::2], out, 0, 4)
    with pytest.raises(ValueError, match="x has 40 columns, the weight 32"):
        k.dot(w, np.zeros((1, 40), np.float32), out, 0, 4)


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_a_stack_of_parts_runs_as_one_weight(jit, t):
    rng = np.random.default_rng(int(t) + 40)
    parts = [weight(rng, t, n, 3) for n in (6, 6, 5)]
    stack = StackedQTensor(parts)
    dense = np.concatenate([p.dequantize() for p in parts])
    x = rng.standard_normal((2, stack.shape[1])).astype(np.float32)
    for path in ("fused", "decode"):
        assert_matmul_to_f32_rounding(quant.qmatmul(x, stack, path=path), x, dense)


@pytest.fixture
def helpers_wait(jit):
    if llvm_build.kernels("llvm_spin") is None:
        pytest.skip("no spinning helpers on this CPU (llvm_spin.supported: x86-64 only)")
    return llvm_build.kernels("llvm_spin").spin


@pytest.mark.parametrize("t", TYPES, ids=ids)
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("rows", [1, 3, 64, 301])
def test_a_split_product_has_the_whole_kernels_bits(jit, helpers_wait, t, count, rows):
    rng = np.random.default_rng(rows + int(t))
    w = weight(rng, t, rows, 4)
    k = jit[int(t)]
    x = rng.standard_normal((2, w.shape[1])).astype(np.float32)
    want = np.empty((2, rows), np.float32)
    k.dot(k.weight_rows(w), x, want, 0, rows)
    helpers = llvm_spin.Helpers(helpers_wait, count, AWAKE)
    try:
        helpers.wake((1 << count) - 1)
        assert wait_for(lambda: all(s != llvm_spin.ASLEEP for s in helpers.slots[:, 0]))
        wide = np.full((2, rows + 9), -7.0, np.float32)
        k.dot_split(k.weight_rows(w), x, wide[:, 4 : 4 + rows], 0, rows, helpers)
        assert_same_bits(wide[:, 4 : 4 + rows], want)
        assert (wide[:, :4] == -7.0).all() and (wide[:, 4 + rows :] == -7.0).all()
        if rows > 2 * (count + 1):
            assert wait_for(lambda: sum(helpers.jobs()) > 0), "no helper ran a part"
    finally:
        helpers.close()


def test_a_decode_steps_product_runs_on_the_processes_helpers(jit, helpers_wait, monkeypatch):
    """array_qmatmul's fused path shares a product run_rows would share with the process's
    helpers (while it times faster): the bits of one thread's kernel."""
    rng = np.random.default_rng(8)
    w = weight(rng, GGMLType.Q4_1, 3072, 18)
    k = jit[int(GGMLType.Q4_1)]
    x = rng.standard_normal((1, 576)).astype(np.float32)
    want = np.empty((1, 3072), np.float32)
    k.dot(k.weight_rows(w), x, want, 0, 3072)
    shares_with_the_helpers(monkeypatch, lambda: quant.qmatmul(x, w, path="fused"), want, k.helpers(2))


def test_the_cpu_computes_these_types_only_with_the_kernels(jit, monkeypatch):
    import ember

    be = ember.Device.cpu().backend
    for t in TYPES:
        assert be.computes_quantized(t)
    assert not be.computes_quantized(GGMLType.F32)  # no kernel: dense is the fast form
    monkeypatch.setenv("EMBER_JIT", "0")
    assert not be.computes_quantized(GGMLType.Q4_1)


GENERATE = """
import sys
import numpy as np
from ember.models.gguf_llama import load_gguf_model
model = load_gguf_model(sys.argv[1], device="cpu")
logits = model([[1, 5, 9, 3]], last_only=True).numpy()
print(int(np.argmax(logits[0, -1])), "numba" in sys.modules)
"""


@pytest.mark.parametrize("linear", ["Q4_1", "Q2_K", "Q4_K"])
def test_a_quantized_model_never_imports_numba(jit, tmp_path, linear):
    """A GGUF Llama runs without numba in the process (its import and ~48 MB of its
    objects), whatever its block types."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from ggml_encode import write_llama_gguf

    qtypes = {"linear": linear, "embed": "Q8_0", "output": "Q8_0"}
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=96,
        max_position_embeddings=64,
    )
    path = str(tmp_path / "m.gguf")
    write_llama_gguf(path, transformers.LlamaForCausalLM(cfg).eval(), qtypes)
    done = subprocess.run(
        [sys.executable, "-c", GENERATE, path],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, EMBER_JIT="1"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    token, imported = done.stdout.split()
    assert 0 <= int(token) < 96
    assert imported == "False"


def test_a_weights_later_products_reuse_its_plan_with_the_same_bits(jit, monkeypatch):
    """A weight's first few-row product on the "auto" path keeps a plan of its kernel
    arguments (array_qmatmul._FusedPlan), weakly: later products run through it, with
    the fused path's bits; x it cannot index, and EMBER_JIT=0 set since, go the
    ordinary way."""
    import gc

    rng = np.random.default_rng(21)
    w = StackedQTensor([weight(rng, GGMLType.Q4_1, 6, 3), weight(rng, GGMLType.Q4_1, 5, 3)])
    x = rng.standard_normal((2, 96)).astype(np.float32)
    want = quant.qmatmul(x, w, path="fused")
    assert aq._plan_of(w) is None  # only "auto" keeps one
    first = aq.qmatmul_rows(x, w, np.empty((2, 11), np.float32))
    plan = aq._plan_of(w)
    assert plan is not None
    runs = []
    real = aq._FusedPlan.run
    monkeypatch.setattr(aq._FusedPlan, "run", lambda self, *a: runs.append(1) or real(self, *a))
    again = aq.qmatmul_rows(x, w, np.empty((2, 11), np.float32))
    assert runs == [1]
    assert_same_bits(first, want)
    assert_same_bits(again, want)
    # x it cannot index: the plan declines, and the ordinary path says what is wrong
    with pytest.raises(ValueError, match="contiguous"):
        aq.qmatmul_rows(np.asfortranarray(x), w, np.empty((2, 11), np.float32))
    monkeypatch.setenv("EMBER_JIT", "0")  # numpy's dequantizer from now on
    used = []
    real_gemm = aq._dequantize_gemm
    monkeypatch.setattr(aq, "_dequantize_gemm", lambda *a: used.append(1) or real_gemm(*a))
    assert_matmul_to_f32_rounding(
        aq.qmatmul_rows(x, w, np.empty((2, 11), np.float32)), x, w.dequantize()
    )
    assert used == [1]
    monkeypatch.delenv("EMBER_JIT")
    del w, plan
    gc.collect()
    assert len(aq._plans) == 0  # the weight gone, its plan with it
