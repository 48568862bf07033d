"""The quantized GEMV of GPU adapters (shaders/qmatmul.wgsl in gemv mode) in the page: a
second backend on the page's SwiftShader device opened with EMBER_WGPU_KERNELS=gpu decodes
1 or 3 rows of x through it, for every common GGUF type, and matches numpy's
x @ dequantize(W).T; the page's own device keeps the CPU adapters' kernels."""
import pytest

from ember.io.quant import GGMLType
from test_qmatmul_in_page import _case, _check

ALL = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0,
       GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]

GPU_SETUP = (
    "import os\n"
    "from ember.backends.webgpu import browser\n"
    "os.environ['EMBER_WGPU_KERNELS'] = 'gpu'\n"
    "try:\n"
    "    gpukernels = ember.Device('webgpu', 2, browser.open_browser_backend())\n"
    "finally:\n"
    "    del os.environ['EMBER_WGPU_KERNELS']\n"
    "[dev.backend.kernel_set, gpukernels.backend.kernel_set]")


@pytest.fixture(scope="module")
def gpu_page(ember_page):
    assert ember_page.run(GPU_SETUP) == ["cpu-adapter", "gpu"]
    return ember_page


# Each type once (the page's pipelines compile slowly): 1 row (a tile of 1) for half of
# them, 3 rows (a tile of 4 with a row unused) for the other half.
CASES = [(t, 1 if i % 2 == 0 else 3) for i, t in enumerate(ALL)]


@pytest.mark.parametrize(("t", "rows"), CASES, ids=lambda c: getattr(c, "name", str(c)))
def test_qgemv_in_page_matches_numpy(t, rows, gpu_page):
    code, ref, scale = _case(t, 67, 768, rows, seed=int(t) + 40 + rows)
    _check(gpu_page.run(code.replace("DEV", "gpukernels")), ref, scale)
    assert gpu_page.run("any('MODE=gemv' in label and 'QTYPE=%s,' in label and 'TM=%d,' in label "
                        "for label in gpukernels.backend.labels.values())"
                        % (t.name.lower(), 1 if rows == 1 else 4))
