"""The "gpu" kernel set in the page: Chromium's Tint compiles and SwiftShader runs the
kernels discrete and integrated GPUs get (shared-memory tiled matmul with vec4 and scalar
loads, both GEMVs, the fused epilogue, f16 as SwiftShader holds it: f32 storage rounded on
store, and the row kernels), on a second backend over the page's device with the set
forced by EMBER_WGPU_KERNELS (the page's own device keeps the CPU adapter's). Reference:
the CPU backend (numpy), which shares no WGSL with the page."""
import numpy as np
import pytest

from snippets import run_here, snippet, tensor_inputs

import ember

SETUP = (
    "import os\n"
    "from ember.backends.webgpu import browser\n"
    "os.environ['EMBER_WGPU_KERNELS'] = 'gpu'\n"
    "try:\n"
    "    gpu_set = ember.Device('webgpu', 3, browser.open_browser_backend())\n"
    "finally:\n"
    "    del os.environ['EMBER_WGPU_KERNELS']\n"
    "[dev.backend.kernel_set, gpu_set.backend.kernel_set]")

LINEAR = "ember.functional.linear(x, {w}, b, activation='gelu', residual=r)"


def _inputs(seed, m, k, n, w_shape=None):
    return tensor_inputs(seed, x=((m, k), "f32"), w=(w_shape or (n, k), "f32"),
                         b=((n,), "f32"), r=((m, n), "f32"))


CASES = {
    "tiled_vec4": (_inputs(80, 33, 36, 20, (36, 20)), "x @ w"),
    "tiled_scalar_views": (_inputs(81, 9, 35, 21, (21, 38)), "x @ w[:, 1:36].t()"),
    "tiled_linear": (_inputs(82, 9, 36, 20), LINEAR.format(w="w")),
    "gemv_nt_linear": (_inputs(83, 2, 64, 30), LINEAR.format(w="w")),
    "gemv_nn_linear": (_inputs(84, 1, 40, 24, (40, 24)), LINEAR.format(w="w.t()")),
    "batched": (tensor_inputs(85, a=((2, 8, 16), "f32"), b=((2, 12, 16), "f32")),
                "a.matmul(b.transpose(-1, -2))"),
    "f16": (_inputs(86, 9, 36, 20),
            "ember.functional.linear(*(t.to(ember.f16) for t in (x, w, b)), activation='gelu',"
            " residual=r.to(ember.f16)).to(ember.f32)"),
    "softmax_rows": (tensor_inputs(87, a=((5, 300), "f32", -6.0, 6.0)), "a.softmax(-1)"),
    "layer_norm_residual": (_inputs(88, 7, 3, 40), "r.layer_norm(b, b * 0.5, residual=r * 2.0)"),
    "rms_norm_residual": (_inputs(89, 7, 3, 40), "r.rms_norm(b, residual=r + 1.0)"),
}
TOLERANCE = {"f16": (4e-3, 4e-3)}


@pytest.fixture(scope="module")
def gpu_set_page(ember_page):
    assert ember_page.run(SETUP) == ["cpu-adapter", "gpu"]
    return ember_page


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_kernel_set_in_page_matches_numpy(name, gpu_set_page):
    inputs, expression = CASES[name]
    code = snippet(inputs, expression, device="gpu_set")
    got = gpu_set_page.run(code)
    expected = run_here(code, ember.Device.cpu(), gpu_set=ember.Device.cpu())
    assert got["shape"] == expected["shape"] and got["dtype"] == expected["dtype"], name
    rtol, atol = TOLERANCE.get(name, (2e-4, 5e-5))
    np.testing.assert_allclose(np.asarray(got["values"], dtype=np.float64),
                               np.asarray(expected["values"], dtype=np.float64),
                               rtol=rtol, atol=atol, err_msg=name)


def test_the_page_built_the_gpu_kernels(gpu_set_page):
    """The cases above ran the gpu set's kernels, not the CPU adapter's."""
    names = gpu_set_page.run(
        "sorted({label.split(':')[0].split('[')[0] for label in "
        "gpu_set.backend.runtime.labels.values()})")
    assert {"matmul_tiled", "gemv_nt", "gemv_nn"} <= set(names)
    assert not {"matmul_nt", "matmul_nn", "matmul_nt_sg"} & set(names)
