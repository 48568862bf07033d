"""The playground, served by `ember serve` from http://127.0.0.1:PORT/: it shows loading
progress and the adapter, and runs a snippet typed by a person on the WebGPU device.
A screenshot is kept in test-artifacts/."""
import os


def test_loading_progress_moved_to_ready(ember_page):
    log = ember_page.page.evaluate("() => window.ember.progressLog")
    fractions = [m["fraction"] for m in log]
    assert len(fractions) >= 4
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1
    assert {"pyodide", "wheel", "device", "ready"} <= {m["stage"] for m in log}


def test_playground_shows_the_adapter_and_limits(ember_page):
    page = ember_page.page
    assert page.locator("#device").is_visible()
    assert not page.locator("#loading").is_visible()
    name = page.locator("#adapter-name").inner_text()
    described = [v for v in ember_page.info["adapter"].values() if v]
    assert any(part in name for part in described)
    limits = page.locator("#limits").inner_text()
    assert "maxStorageBufferBindingSize" in limits
    assert "maxStorageBuffersPerShaderStage" in limits


def test_playground_runs_a_typed_snippet(ember_page, artifacts_dir):
    page = ember_page.page
    assert ember_page.url.startswith("http://127.0.0.1:")
    code = ("x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], device=dev)\n"
            "print('device:', x.device)\n"
            "print('x @ x =', (x @ x).tolist())\n"
            "(x * 10).sum().item()")
    page.fill("#code", code)
    page.click("#run")
    page.wait_for_function(
        "() => document.getElementById('run-status').textContent.startsWith('done') || "
        "document.getElementById('run-status').textContent.startsWith('error')")
    output = page.locator("#output").inner_text()
    assert "device: webgpu" in output
    assert "x @ x = [[7.0, 10.0], [15.0, 22.0]]" in output
    assert "→ 100.0" in output
    page.screenshot(path=os.path.join(artifacts_dir, "playground.png"), full_page=True)


def test_playground_shows_an_error_from_the_snippet(ember_page):
    import ember
    try:  # the error the same snippet raises here, natively
        ember.tensor([1.0]).reshape(2, 2)
    except ember.EmberError as exc:
        expected = f"{type(exc).__name__}: {exc}"
    page = ember_page.page
    page.fill("#code", "ember.tensor([1.0], device=dev).reshape(2, 2)")
    page.focus("#code")
    page.keyboard.press("Control+Enter")
    page.wait_for_function(
        "() => document.getElementById('run-status').textContent.startsWith('error')")
    output = page.locator("#output")
    assert expected in output.inner_text()
    assert "error" in (output.get_attribute("class") or "")
