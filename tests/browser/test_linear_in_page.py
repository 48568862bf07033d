"""The fused linear in the page: Chromium's Tint compiles the matmul kernels with their
epilogue (bias, every activation, residual), on each matmul kernel, on the f16 path
SwiftShader takes (no shader-f16: f32 storage rounded on store) and split over a 4 KiB
binding cap; and the norms' residual= read by the norm kernel. Reference: the CPU
backend (numpy), which shares no WGSL with the page."""
import numpy as np
import pytest

from snippets import run_here, snippet, tensor_inputs

import ember

ACTS = ["gelu", "gelu_tanh", "quick_gelu", "relu", "silu", "sigmoid", "tanh", None]
LINEAR = "ember.functional.linear(x, {w}, b, activation={act!r}, residual={r})"


def _inputs(seed, m, k, n, w_shape=None):
    return tensor_inputs(seed, x=((m, k), "f32"), w=(w_shape or (n, k), "f32"),
                         b=((n,), "f32"), r=((m, n), "f32"), rt=((n, m), "f32"))


CASES = {f"act_{act}": (_inputs(70, 9, 36, 20), LINEAR.format(w="w", act=act, r="r"))
         for act in ACTS}
CASES.update({
    # x @ W kernel (the weight stored (in, out)), general kernel (odd K), column-major residual
    "weight_in_out": (_inputs(71, 9, 36, 20, (36, 20)), LINEAR.format(w="w.t()", act="gelu",
                                                                       r="rt.t()")),
    "odd_k_few_rows": (_inputs(72, 3, 7, 10), LINEAR.format(w="w", act="silu", r="rt.t()")),
    "f16": (_inputs(73, 9, 36, 20),
            "ember.functional.linear(*(t.to(ember.f16) for t in (x, w, b)), activation='gelu',"
            " residual=r.to(ember.f16)).to(ember.f32)"),
})
CASES.update({
    "layer_norm_residual": (_inputs(75, 7, 3, 40), "r.layer_norm(b, b * 0.5, residual=r * 2.0)"),
    "rms_norm_residual": (_inputs(76, 7, 3, 40), "r.rms_norm(b, residual=r + 1.0)"),
})
TOLERANCE = {"f16": (4e-3, 4e-3)}


def _compare(name, got, expected):
    assert got["shape"] == expected["shape"] and got["dtype"] == expected["dtype"], name
    rtol, atol = TOLERANCE.get(name, (2e-4, 5e-5))
    np.testing.assert_allclose(np.asarray(got["values"], dtype=np.float64),
                               np.asarray(expected["values"], dtype=np.float64),
                               rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_linear_in_page_matches_numpy(name, ember_page):
    inputs, expression = CASES[name]
    code = snippet(inputs, expression)
    _compare(name, ember_page.run(code), run_here(code, ember.Device.cpu()))


CAPPED_BINDING = 4096
CAPPED_SETUP = (
    "from ember.backends.webgpu import browser\n"
    f"capped_linear = ember.Device('webgpu', 2, browser.open_browser_backend("
    f"max_binding_size={CAPPED_BINDING}))\n"
    "capped_linear.backend.max_binding")


def test_linear_split_over_a_capped_binding(ember_page):
    """x, weight, residual and output of several KiB each: launches over ranges of rows,
    columns and K, bias and residual bound for each, the epilogue after the last part."""
    assert ember_page.run(CAPPED_SETUP) == CAPPED_BINDING
    inputs = _inputs(74, 40, 300, 24)
    code = snippet(inputs, LINEAR.format(w="w", act="gelu", r="rt.t()"), device="capped_linear")
    _compare("capped", ember_page.run(code), run_here(code, ember.Device.cpu(),
                                                      capped_linear=ember.Device.cpu()))
    code = snippet(inputs, "x.layer_norm(x[0], x[1], residual=x * 3.0)", device="capped_linear")
    _compare("capped norm", ember_page.run(code), run_here(code, ember.Device.cpu(),
                                                           capped_linear=ember.Device.cpu()))


def test_linear_in_page_is_one_dispatch(ember_page):
    """The page's wheel carries the fused path: bias + gelu + residual in one dispatch."""
    count = ember_page.run(
        "x, w, b, r = (ember.ones(*s, device=dev) for s in ((9, 36), (20, 36), (20,), (9, 20)))\n"
        "n0 = dev.backend.counters['dispatches']\n"
        "ember.functional.linear(x, w, b, activation='gelu', residual=r).tolist()\n"
        "dev.backend.counters['dispatches'] - n0")
    assert count == 1
