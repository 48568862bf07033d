"""The playground, served by `ember serve` from http://127.0.0.1:PORT/: it shows loading
progress and the adapter, and runs a snippet typed by a person on the WebGPU device.
A screenshot is kept in test-artifacts/. (Playwright calls go through `ember_page.do`,
which runs them on the browser's own thread.)"""
import os

import ember

RUN_FINISHED = ("() => /^(done|error)/.test(document.getElementById('run-status').textContent)")


def test_loading_progress_moved_to_ready(ember_page):
    log = ember_page.evaluate("() => window.ember.progressLog")
    fractions = [m["fraction"] for m in log]
    assert len(fractions) >= 4
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1
    assert {"pyodide", "wheel", "device", "ready"} <= {m["stage"] for m in log}


def test_playground_shows_the_adapter_and_limits(ember_page):
    def read(page):
        return {"device_visible": page.locator("#device").is_visible(),
                "loading_visible": page.locator("#loading").is_visible(),
                "name": page.locator("#adapter-name").inner_text(),
                "limits": page.locator("#limits").inner_text()}
    shown = ember_page.do(read, ember_page.page)
    assert shown["device_visible"] and not shown["loading_visible"]
    described = [v for v in ember_page.info["adapter"].values() if v]
    assert any(part in shown["name"] for part in described)
    assert "maxStorageBufferBindingSize" in shown["limits"]
    assert "maxStorageBuffersPerShaderStage" in shown["limits"]


def _type_and_run(page, code, shortcut):
    page.fill("#code", code)
    if shortcut:
        page.focus("#code")
        page.keyboard.press("Control+Enter")
    else:
        page.click("#run")
    page.wait_for_function(RUN_FINISHED)
    output = page.locator("#output")
    return {"text": output.inner_text(), "class": output.get_attribute("class") or "",
            "status": page.locator("#run-status").inner_text()}


def test_playground_runs_a_typed_snippet(ember_page, artifacts_dir):
    assert ember_page.url.startswith("http://127.0.0.1:")
    code = ("x = ember.tensor([[1.0, 2.0], [3.0, 4.0]], device=dev)\n"
            "print('device:', x.device)\n"
            "print('x @ x =', (x @ x).tolist())\n"
            "(x * 10).sum().item()")
    shown = ember_page.do(_type_and_run, ember_page.page, code, False)
    assert shown["status"].startswith("done")
    assert "device: webgpu" in shown["text"]
    assert "x @ x = [[7.0, 10.0], [15.0, 22.0]]" in shown["text"]
    assert "→ 100.0" in shown["text"]
    ember_page.do(lambda: ember_page.page.screenshot(
        path=os.path.join(artifacts_dir, "playground.png"), full_page=True))


def test_playground_shows_an_error_from_the_snippet(ember_page):
    try:  # the error the same snippet raises here, natively
        ember.tensor([1.0]).reshape(2, 2)
    except ember.EmberError as exc:
        expected = f"{type(exc).__name__}: {exc}"
    shown = ember_page.do(_type_and_run, ember_page.page,
                          "ember.tensor([1.0], device=dev).reshape(2, 2)", True)
    assert shown["status"].startswith("error")
    assert expected in shown["text"]
    assert "error" in shown["class"]


def test_the_page_and_its_worker_fetch_only_from_the_local_server(ember_page):
    urls = list(ember_page.requests)
    assert any(u.endswith("/pyodide/pyodide.asm.wasm") for u in urls), urls
    assert any("/wheels/ember-" in u for u in urls), urls
    foreign = [u for u in urls if not u.startswith(ember_page.url.split("?")[0].rsplit("/", 1)[0])
               and not u.startswith(("blob:", "data:"))]
    assert foreign == []
