"""Every kernel family runs in the page (Pyodide + the browser's WebGPU) and matches the
native backend (wgpu-py) computing the same snippet in this test run.

The native device is the reference; where wgpu cannot open here the CPU backend stands in
(under CI=true both must exist). Tolerances allow for two different GPU implementations
(SwiftShader in Chromium, lavapipe natively) rounding transcendental functions differently.
"""
import numpy as np
import pytest

from page_harness import PageError
from snippets import run_here, snippet, tensor_inputs

import ember

CASES = {
    # elementwise: unary, binary with broadcasting, a scalar operand, a strided view
    "unary_exp_gelu": (tensor_inputs(1, a=((4, 33), "f32")), "a.exp() + a.gelu() - a.tanh()"),
    "binary_broadcast": (tensor_inputs(2, a=((3, 1, 5), "f32"), b=((4, 5), "f32")),
                         "(a * b - 0.5) / (b.abs() + 1.0)"),
    "binary_strided_view": (tensor_inputs(3, a=((6, 8), "f32"), b=((8, 6), "f32")),
                            "a.t() + b"),
    "integer_arithmetic": (tensor_inputs(4, a=((5, 7), "i32", -100, 100), b=((7,), "i32", 1, 9)),
                           "a * b + 3"),
    # compare / where
    "compare_where": (tensor_inputs(5, a=((5, 6), "f32"), b=((5, 6), "f32")),
                      "ember.where(a > b, a, b * 2.0)"),
    "compare_result": (tensor_inputs(6, a=((9,), "f32"), b=((9,), "f32")), "a.le(b)"),
    # reductions
    "reduce_sum_rows": (tensor_inputs(7, a=((7, 300), "f32")), "a.sum(-1)"),
    "reduce_max_dim0": (tensor_inputs(8, a=((40, 9), "f32")), "a.max(0)"),
    "reduce_mean_all": (tensor_inputs(9, a=((3, 4, 5), "f32")), "a.mean()"),
    "reduce_argmax": (tensor_inputs(10, a=((6, 17), "f32")), "a.argmax(-1)"),
    "cumsum": (tensor_inputs(11, a=((4, 20), "f32")), "a.cumsum(-1)"),
    # matmul: plain, batched with a transposed operand
    "matmul": (tensor_inputs(12, a=((17, 33), "f32"), b=((33, 9), "f32")), "a @ b"),
    "matmul_batched_transposed": (tensor_inputs(13, a=((2, 8, 16), "f32"), b=((2, 12, 16), "f32")),
                                  "a.matmul(b.transpose(-1, -2))"),
    # softmax and norms
    "softmax": (tensor_inputs(14, a=((5, 50), "f32", -6.0, 6.0)), "a.softmax(-1)"),
    "log_softmax": (tensor_inputs(15, a=((3, 20), "f32")), "a.log_softmax(-1)"),
    "layer_norm": (tensor_inputs(16, a=((6, 32), "f32"), w=((32,), "f32"), b=((32,), "f32")),
                   "a.layer_norm(w, b, eps=1e-5)"),
    "rms_norm": (tensor_inputs(17, a=((6, 32), "f32"), w=((32,), "f32")), "a.rms_norm(w, eps=1e-6)"),
    # index ops
    "index_select": (tensor_inputs(18, a=((10, 6), "f32"), i=((7,), "i64", 0, 10)),
                     "a.index_select(0, i)"),
    "gather": (tensor_inputs(19, a=((4, 9), "f32"), i=((4, 5), "i64", 0, 9)), "a.gather(1, i)"),
    "scatter_add": (tensor_inputs(20, a=((4, 6), "f32"), i=((4, 3), "i64", 0, 6), s=((4, 3), "f32")),
                    "a.scatter_add(1, i, s)"),
    "embedding": (tensor_inputs(21, w=((12, 8), "f32"), i=((2, 5), "i64", 0, 12)),
                  "ember.embedding(i, w)"),
    "cat_narrow": (tensor_inputs(22, a=((3, 4), "f32"), b=((2, 4), "f32")),
                   "ember.cat([a, b.narrow(1, 1, 3).pad((0, 1))], 0)"),
    # conv
    "conv2d": (tensor_inputs(23, x=((1, 3, 9, 9), "f32"), w=((4, 3, 3, 3), "f32"), b=((4,), "f32")),
               "ember.conv2d(x, w, b, stride=2, padding=1)"),
    "conv1d": (tensor_inputs(24, x=((2, 4, 16), "f32"), w=((6, 4, 5), "f32")),
               "ember.conv1d(x, w, padding=2)"),
    # casts
    "cast_f32_to_f16_and_back": (tensor_inputs(25, a=((40,), "f32", -70000.0, 70000.0)),
                                 "a.to(ember.f16).to(ember.f32)"),
    "cast_f32_to_bf16": (tensor_inputs(26, a=((40,), "f32")), "a.to(ember.bf16)"),
    "cast_f32_to_i64": (tensor_inputs(27, a=((40,), "f32", -50.0, 50.0)), "a.to(ember.i64)"),
    "cast_i64_to_f32": (tensor_inputs(28, a=((30,), "i64", -1000, 1000)), "a.to(ember.f32) * 0.5"),
    "cast_u8_mask": (tensor_inputs(29, a=((12,), "f32")), "(a > 0).to(ember.f32)"),
    # more of the surface, each a composite of the primitives above
    "creation": ({}, "ember.arange(12, device=dev).reshape(3, 4).to(ember.f32)"
                     " + ember.eye(3, 4, device=dev) * ember.full((3, 4), 2.5, device=dev)"
                     " - ember.ones(3, 4, device=dev) + ember.zeros(4, device=dev)"),
    "activations": (tensor_inputs(30, a=((5, 16), "f32")),
                    "a.gelu_tanh() * a.silu() + a.sigmoid() - a.relu() + a.erf()"),
    "clamp_masked_fill": (tensor_inputs(31, a=((5, 16), "f32")),
                          "a.clamp(-0.5, 0.5).masked_fill(a > 1.0, 7.0)"),
    "reduce_var_prod_argmin": (tensor_inputs(32, a=((6, 10), "f32", 0.5, 1.5)),
                               "ember.stack([a.var(-1), a.prod(-1), a.argmin(-1).to(ember.f32)])"),
    "reduce_integer_sum": (tensor_inputs(33, a=((4, 50), "i64", -1000, 1000)), "a.sum(-1)"),
    "chunk_stack": (tensor_inputs(34, a=((3, 8), "f32")), "ember.stack(a.chunk(2, dim=1), 0)"),
    "max_pool2d": (tensor_inputs(35, x=((1, 2, 8, 8), "f32")), "ember.max_pool2d(x, 2)"),
    "avg_pool2d": (tensor_inputs(36, x=((1, 2, 7, 7), "f32")),
                   "ember.avg_pool2d(x, 3, stride=2, padding=1)"),
    "interpolate_nearest": (tensor_inputs(37, x=((1, 2, 3, 4), "f32")),
                            "ember.interpolate(x, scale_factor=2)"),
    "conv_transpose2d": (tensor_inputs(38, x=((1, 3, 5, 5), "f32"), w=((3, 2, 3, 3), "f32")),
                         "ember.conv_transpose2d(x, w, stride=2)"),
    "pad_replicate": (tensor_inputs(39, a=((2, 3, 6), "f32")), "a.pad((2, 1), mode='replicate')"),
}

# (rtol, atol) by case; exact for integer and compare results.
TOLERANCE = {"default": (1e-4, 1e-5), "unary_exp_gelu": (2e-4, 2e-5),
             "log_softmax": (1e-4, 1e-4), "layer_norm": (2e-4, 1e-4), "rms_norm": (2e-4, 1e-4),
             "activations": (2e-4, 2e-5)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_family_matches_native(name, ember_page, reference_device):
    inputs, expression = CASES[name]
    code = snippet(inputs, expression)
    expected = run_here(code, reference_device)
    got = ember_page.run(code)
    assert got["shape"] == expected["shape"], name
    assert got["dtype"] == expected["dtype"], name
    if expected["dtype"] in ("f32", "f16", "bf16"):
        rtol, atol = TOLERANCE.get(name, TOLERANCE["default"])
        np.testing.assert_allclose(np.asarray(got["values"], dtype=np.float64),
                                   np.asarray(expected["values"], dtype=np.float64),
                                   rtol=rtol, atol=atol, err_msg=name)
    else:
        assert got["values"] == expected["values"], name


# --- operands larger than the storage binding limit -------------------------------------
# SwiftShader allows 1 GiB bindings, so the page opens a second backend on the same GPU
# device that plans with 4 KiB bindings: every operand below spans several bindings.
CAPPED_BINDING = 4096
CAPPED_SETUP = (
    "from ember.backends.webgpu import browser\n"
    f"capped = ember.Device('webgpu', 1, browser.open_browser_backend(max_binding_size={CAPPED_BINDING}))\n"
    "capped.backend.max_binding")

SPLIT_CASES = {
    "split_elementwise_broadcast": (tensor_inputs(40, a=((40, 300), "f32"), b=((300,), "f32")),
                                    "a * b + 1.0"),
    "split_matmul": (tensor_inputs(42, a=((40, 300), "f32"), b=((300, 24), "f32")), "a @ b"),
    "split_cast_f32_to_f16_to_f32": (tensor_inputs(43, a=((40, 300), "f32")),
                                     "a.to(ember.f16).to(ember.f32)"),
    "split_upload_i64": (tensor_inputs(44, a=((5000,), "i64", -10 ** 6, 10 ** 6)),
                         "(a + 1).to(ember.f32)"),
    # a transposed view: its rows are columns of `a`, copied contiguous in tiles first
    "split_strided_view": (tensor_inputs(41, a=((300, 40), "f32")), "a.t().exp()"),
    # reductions: rows apart, pieces of dim 0 combined, indices kept global
    "split_reduce_rows": (tensor_inputs(45, a=((40, 300), "f32")), "a.sum(-1)"),
    "split_reduce_dim0": (tensor_inputs(47, a=((40, 300), "f32")), "a.max(0)"),
    "split_reduce_mean_all": (tensor_inputs(48, a=((6, 50, 40), "f32")), "a.mean()"),
    "split_reduce_transposed": (tensor_inputs(49, a=((300, 40), "f32")), "a.t().sum(0)"),
    "split_argmax_rows": (tensor_inputs(51, a=((40, 300), "f32")), "a.argmax(-1)"),
    "split_argmax_dim0": (tensor_inputs(52, a=((300, 40), "f32")), "a.argmax(0)"),
    "split_argmin_all": (tensor_inputs(53, a=((40, 300), "f32")), "a.argmin()"),
    # row kernels split by rows; softmax down the columns runs on a transposed copy
    "split_softmax_rows": (tensor_inputs(46, a=((40, 300), "f32")), "a.softmax(-1)"),
    "split_log_softmax_dim0": (tensor_inputs(54, a=((40, 300), "f32")), "a.log_softmax(0)"),
    "split_layer_norm": (tensor_inputs(55, a=((40, 300), "f32"), w=((300,), "f32"),
                                       b=((300,), "f32")), "a.layer_norm(w, b, eps=1e-5)"),
    "split_rms_norm": (tensor_inputs(56, a=((40, 300), "f32"), w=((300,), "f32")),
                       "a.rms_norm(w, eps=1e-6)"),
    # readback packs in ranges of words
    "split_readback_packed_f16": (tensor_inputs(43, a=((40, 300), "f32")), "a.to(ember.f16)"),
    "split_readback_packed_i64": (tensor_inputs(44, a=((5000,), "i64", -10 ** 6, 10 ** 6)),
                                  "a + 1"),
    "split_readback_packed_bf16": (tensor_inputs(57, a=((40, 300), "f32")), "a.to(ember.bf16)"),
    "split_readback_packed_u8": (tensor_inputs(58, a=((40, 300), "f32")), "a > 0"),
    # an embedding table larger than a binding: ranges of rows, each writing its hits
    "split_index_select_table": (tensor_inputs(59, w=((600, 24), "f32"),
                                               i=((2, 70), "i64", 0, 600)),
                                 "ember.embedding(i, w)"),
    "split_gather": (tensor_inputs(60, a=((40, 300), "f32"), i=((40, 5), "i64", 0, 300)),
                     "a.gather(1, i)"),
}

# (rtol, atol) by case; exact for integer, bf16 and compare results.
SPLIT_TOLERANCE = {"default": (1e-4, 1e-4), "split_layer_norm": (2e-4, 1e-4),
                   "split_rms_norm": (2e-4, 1e-4)}


@pytest.fixture(scope="session")
def capped_page(ember_page):
    assert ember_page.run(CAPPED_SETUP) == CAPPED_BINDING
    return ember_page


@pytest.mark.parametrize("name", sorted(SPLIT_CASES))
def test_operands_over_the_binding_limit_are_split(name, capped_page, reference_device):
    inputs, expression = SPLIT_CASES[name]
    code = snippet(inputs, expression, device="capped")
    expected = run_here(code, reference_device, capped=reference_device)
    got = capped_page.run(code)
    assert got["shape"] == expected["shape"] and got["dtype"] == expected["dtype"]
    if expected["dtype"] in ("f32", "f16"):
        rtol, atol = SPLIT_TOLERANCE.get(name, SPLIT_TOLERANCE["default"])
        np.testing.assert_allclose(np.asarray(got["values"], dtype=np.float64),
                                   np.asarray(expected["values"], dtype=np.float64),
                                   rtol=rtol, atol=atol, err_msg=name)
    else:
        assert got["values"] == expected["values"], name


def test_a_row_over_the_binding_limit_is_refused_naming_the_op(capped_page):
    # One row of 2,000 f32 is 8,000 bytes, twice the cap: it cannot be split.
    with pytest.raises(PageError) as info:
        capped_page.run("ember.ones(2, 2000, device=capped).softmax(-1).tolist()")
    assert info.value.type == "UnsupportedOp"
    assert info.value.message.startswith("softmax:") and "8000 bytes" in info.value.message


def test_capped_backend_really_splits(capped_page):
    # The same op costs more dispatches under the 4 KiB cap than on the real limits.
    counts = capped_page.run(
        "def _dispatches(d):\n"
        "    x = ember.ones(64, 300, device=d)\n"
        "    n0 = d.backend.counters['dispatches']\n"
        "    (x * 2.0).tolist()\n"
        "    return d.backend.counters['dispatches'] - n0\n"
        "[_dispatches(dev), _dispatches(capped)]")
    assert counts[1] > counts[0] >= 1


def test_async_readback_matches_native_async_beside_the_browser(ember_page, reference_device):
    # asyncio.run on the test thread while the browser session lives (playwright runs on
    # a thread of its own), and the async readback agrees in both places.
    import asyncio
    inputs = tensor_inputs(50, a=((3, 7), "f32"))
    code = snippet(inputs, "a.softmax(-1) * 3.0")
    native_tensor = run_here(code.rsplit("\n", 1)[0] + "\n_out", reference_device)
    expected = asyncio.run(native_tensor.tolist_async())
    got = ember_page.run(code.rsplit("\n", 1)[0] + "\nawait _out.tolist_async()")
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=1e-5, atol=1e-6)
