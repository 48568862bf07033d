"""ember's API inside the page: without numpy, sync readback through JSPI, the async
readback API, errors carried back with their message, the device's description."""
import numpy as np
import pytest

from helpers import require
from page_harness import PageError


def test_page_has_no_numpy_and_cpu_device_says_so(ember_page):
    assert ember_page.run("import importlib.util\nimportlib.util.find_spec('numpy') is None")
    answer = ember_page.result("ember.Device.cpu()")
    assert not answer["ok"]
    assert answer["error"]["type"] == "DeviceError"
    assert "numpy" in answer["error"]["message"]
    # ...and the best device in a page is the browser's WebGPU.
    assert ember_page.run("str(ember.Device.best())") == "webgpu:0"


def test_sync_readback_values(ember_page):
    got = ember_page.run(
        "import sys\n"
        "t = ember.tensor([[1, 2, 3], [4, 5, 6]], device=dev)\n"
        "u = ember.tensor([[0.5, -1.5], [2.25, 4.0]], device=dev)\n"
        "[t.dtype.name, str(t.device), t.tolist(), (t * 2).sum().item(),\n"
        " u.dtype.name, (u @ u).tolist(), u.max().item(), 'numpy' in sys.modules]")
    assert got[0] == "i64" and got[1].startswith("webgpu")
    assert got[2] == [[1, 2, 3], [4, 5, 6]]
    assert got[3] == 42
    assert got[4] == "f32"
    # exact in binary floating point: 0.5*0.5 + -1.5*2.25 = -3.125, etc.
    assert got[5] == [[0.5 * 0.5 - 1.5 * 2.25, 0.5 * -1.5 - 1.5 * 4.0],
                      [2.25 * 0.5 + 4.0 * 2.25, 2.25 * -1.5 + 4.0 * 4.0]]
    assert got[6] == 4.0
    assert got[7] is False


def test_async_readback_api(ember_page):
    got = ember_page.run(
        "t = ember.arange(6, device=dev).reshape(2, 3).to(ember.f32) * 1.5\n"
        "[await t.tolist_async(), await t.sum().item_async(), await t[1].tolist_async()]")
    assert got == [[[0.0, 1.5, 3.0], [4.5, 6.0, 7.5]], 22.5, [4.5, 6.0, 7.5]]


def test_sync_readback_without_jspi_names_the_async_form(ember_page):
    # "plain" runs the snippet as an ordinary call: no suspendable stack, as in a browser
    # without JSPI. The sync readback must refuse and point at the async API.
    assert ember_page.run("from pyodide.ffi import can_run_sync\ncan_run_sync()", mode="plain") \
        is False
    answer = ember_page.result("w = ember.tensor([1.0, 2.0, 3.0], device=dev) * 2\nw.tolist()",
                               mode="plain")
    assert not answer["ok"]
    assert answer["error"]["type"] == "DeviceError"
    assert "tolist_async" in answer["error"]["message"]
    # The tensor made there reads back fine through the async form.
    assert ember_page.run("await w.tolist_async()") == [2.0, 4.0, 6.0]


def test_shape_error_reaches_the_test_with_its_message(ember_page):
    with pytest.raises(PageError) as info:
        ember_page.run("ember.tensor([1.0, 2.0], device=dev) + ember.tensor([1.0, 2.0, 3.0], device=dev)")
    assert info.value.type == "ShapeMismatch"
    assert "[2]" in info.value.message and "[3]" in info.value.message
    assert "add" in info.value.message


def test_python_error_reaches_the_test_with_its_message(ember_page):
    answer = ember_page.result("print('before the error')\nraise ValueError('boom from the page')")
    assert not answer["ok"]
    assert answer["error"] == {**answer["error"], "type": "ValueError",
                               "message": "boom from the page"}
    assert "boom from the page" in answer["error"]["traceback"]
    assert answer["stdout"] == "before the error\n"


def test_page_describes_its_adapter(ember_page):
    info = ember_page.info
    assert info["limits"]["maxStorageBuffersPerShaderStage"] >= 8
    assert info["limits"]["maxComputeInvocationsPerWorkgroup"] >= 256
    assert info["can_run_sync"] is True
    assert any(info["adapter"].values())
    timings = info["timings_ms"]
    assert timings["total"] >= timings["pyodide"] > 0


def test_js_array_buffer_goes_to_the_gpu_without_python_bytes(ember_page):
    values = [0.5, -1.25, 3.0, 1e-3, -7.5, 42.0]
    got = ember_page.run(
        "import js\n"
        "from pyodide.ffi import to_js\n"
        "from ember.io.js_buffers import tensor_from_js\n"
        f"_ab = js.Float32Array.new(to_js({values!r})).buffer\n"
        "_from_host = dev.backend.from_host\n"
        "def _refuse(*args, **kw):\n"
        "    raise AssertionError('f32 upload went through Python bytes')\n"
        "dev.backend.from_host = _refuse\n"
        "try:\n"
        "    _t = tensor_from_js(_ab, ember.f32, (2, 3))\n"
        "finally:\n"
        "    dev.backend.from_host = _from_host\n"
        "_i = tensor_from_js(js.Int32Array.new(to_js([3, -4, 5])), ember.i32, (3,))\n"
        "[_t.tolist(), (_t * 2).sum().item(), _i.tolist()]")
    expected = np.asarray(values, dtype=np.float32)
    assert got[0] == expected.reshape(2, 3).tolist()
    assert got[1] == pytest.approx(float((expected * 2).sum(dtype=np.float32)), rel=1e-6)
    assert got[2] == [3, -4, 5]


def test_js_buffer_of_the_wrong_size_names_shape_and_dtype(ember_page):
    answer = ember_page.result(
        "import js\nfrom ember.io.js_buffers import tensor_from_js\n"
        "tensor_from_js(js.ArrayBuffer.new(12), ember.f32, (2, 2))")
    assert answer["error"]["type"] == "ShapeMismatch"
    assert "12 bytes" in answer["error"]["message"] and "[2, 2]" in answer["error"]["message"]


def test_a_runaway_snippet_can_be_interrupted(ember_page):
    answer = ember_page.evaluate("""async () => {
        const running = window.ember.run("n = 0\\nwhile True:\\n    n += 1");
        await new Promise((resolve) => setTimeout(resolve, 300));
        const interrupted = window.ember.interrupt();
        return [interrupted, await running];
    }""")
    assert answer[0] is True
    assert answer[1]["error"]["type"] == "KeyboardInterrupt"
    # The worker keeps working afterwards, and the loop did run.
    assert ember_page.run("n > 0 and ember.tensor([2.0], device=dev).item() == 2.0") is True


BROKEN_WGSL = "@compute @workgroup_size(1) fn main() { let x: f32 = undefined_name; }"


def test_a_kernel_that_fails_to_compile_names_itself_and_the_compiler_message(ember_page):
    answer = ember_page.result(
        f"dev.backend.driver.create_pipeline({BROKEN_WGSL!r}, 'broken_kernel', 1, [True])")
    assert answer["error"]["type"] == "DeviceError"
    message = answer["error"]["message"]
    assert "broken_kernel" in message and "undefined_name" in message


def test_without_jspi_a_gpu_error_surfaces_at_the_next_readback(ember_page):
    # No JSPI: the pipeline cannot be checked when made; the device reports the error
    # later, and the next readback raises it instead of losing it.
    ember_page.run("from ember.backends.webgpu import browser\n"
                   "_twin = ember.Device('webgpu', 4, browser.open_browser_backend())")
    made = ember_page.result(
        f"dev.backend.driver.create_pipeline({BROKEN_WGSL!r}, 'late_kernel', 1, [True])",
        mode="plain")
    assert made["ok"], made
    answer = ember_page.result(
        "import asyncio\nawait asyncio.sleep(0.3)\n"
        "await ember.tensor([1.0], device=dev).tolist_async()")
    assert answer["error"]["type"] == "DeviceError"
    assert "late_kernel" in answer["error"]["message"]
    # Reported once, also to a second backend sharing the GPU device: both work on.
    assert ember_page.run(
        "[await (ember.tensor([1.0], device=dev) * 3).tolist_async(),\n"
        " await (ember.tensor([1.0], device=_twin) * 4).tolist_async()]") == [[3.0], [4.0]]


def test_opening_without_a_requested_device(ember_page):
    # Device.webgpu() normally finds the device the worker requested while loading. Without
    # one it requests it itself through JSPI, and without JSPI it names the async call.
    setup = ("from ember.backends.webgpu import browser\n"
             "_saved = (browser._Opened.adapter, browser._Opened.device)\n"
             "browser._Opened.adapter = browser._Opened.device = None\n")
    restore = "browser._Opened.adapter, browser._Opened.device = _saved\n"
    plain = ember_page.result(setup + "try:\n    browser.open_browser_backend()\n"
                              "finally:\n    " + restore, mode="plain")
    assert plain["error"]["type"] == "DeviceError"
    assert "request_device_async" in plain["error"]["message"]
    got = ember_page.run(setup + "try:\n    _be = browser.open_browser_backend()\n"
                         "finally:\n    " + restore +
                         "_d = ember.Device('webgpu', 2, _be)\n"
                         "[_be.driver.device is not _saved[1], "
                         "(ember.tensor([1.5, 2.5], device=_d) * 2).tolist()]")
    assert got == [True, [3.0, 5.0]]


def test_safetensors_from_an_array_buffer(ember_page, tmp_path_factory):
    # A file written by the reference library, read in the page from a JS ArrayBuffer.
    safetensors_numpy = require("safetensors.numpy")
    rng = np.random.default_rng(7)
    tensors = {"w": rng.standard_normal((3, 5)).astype(np.float32),
               "ids": np.arange(6, dtype=np.int64).reshape(2, 3) * 1000 - 2500,
               "h": rng.standard_normal(7).astype(np.float16)}
    blob = safetensors_numpy.save(tensors)
    got = ember_page.run(
        "import js\nfrom pyodide.ffi import to_js\n"
        "from ember.io.js_buffers import load_safetensors_js\n"
        f"_ab = js.Uint8Array.new(to_js({list(blob)!r})).buffer\n"
        "_t = load_safetensors_js(_ab)\n"
        "{k: [v.dtype.name, list(v.shape), v.tolist()] for k, v in sorted(_t.items())}")
    assert got["w"][:2] == ["f32", [3, 5]]
    np.testing.assert_array_equal(np.asarray(got["w"][2], np.float32), tensors["w"])
    assert got["ids"] == ["i64", [2, 3], tensors["ids"].tolist()]
    assert got["h"][:2] == ["f16", [7]]
    np.testing.assert_array_equal(np.asarray(got["h"][2], np.float16), tensors["h"])
    broken = ember_page.result(
        "load_safetensors_js(js.Uint8Array.new(to_js([255, 0, 0, 0, 0, 0, 0, 0, 123])).buffer)")
    assert broken["error"]["type"] == "FormatError"
    assert "header length" in broken["error"]["message"]


def test_a_lost_device_is_reported_at_the_next_readback(ember_page):
    answer = ember_page.result(
        "import asyncio\nfrom ember.backends.webgpu import browser\n"
        "_saved = (browser._Opened.adapter, browser._Opened.device)\n"
        "browser._Opened.adapter = browser._Opened.device = None\n"
        "try:\n    _lost_be = browser.open_browser_backend()\n"
        "finally:\n    browser._Opened.adapter, browser._Opened.device = _saved\n"
        "_lost = ember.Device('webgpu', 3, _lost_be)\n"
        "_x = ember.tensor([1.0, 2.0], device=_lost)\n"
        "_lost_be.driver.device.destroy()\n"
        "await asyncio.sleep(0.2)\n"
        "await (_x * 2).tolist_async()")
    assert answer["error"]["type"] == "DeviceError"
    assert "lost" in answer["error"]["message"]
    assert ember_page.run("(ember.tensor([4.0], device=dev) + 1).item()") == 5.0
