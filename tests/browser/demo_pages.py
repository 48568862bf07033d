"""Opening one of the bundle's demo pages (embed.html, generate.html) for a test module."""
import contextlib

import pytest

from page_harness import EmberPage


@contextlib.contextmanager
def open_demo_page(chromium, url, height, what):
    """The demo page at `url` in a browser context of its own (1000 x `height`), booted and
    past its `window.demoReady`; fails the test with the console's tail when the demo does
    not load. The context closes on leaving."""
    thread, browser = chromium
    context = thread.do(lambda: browser.new_context(viewport={"width": 1000, "height": height}))
    page = EmberPage(thread.do(context.new_page), url, do=thread.do)
    page.boot()
    try:
        page.evaluate("() => window.demoReady")
    except Exception as exc:
        pytest.fail(f"the {what} demo did not load: {exc}\n" + "\n".join(page.console[-20:]))
    yield page
    thread.do(context.close)


def assert_explains_missing_webgpu(chromium, url, hidden):
    """A browser whose navigator has no `gpu` opens the demo page at `url`: its #no-webgpu
    card is shown and says why, each selector in `hidden` (the page's controls, its loading
    bar) stays hidden, and no worker was started that could only fail."""
    thread, browser = chromium

    def visit():
        context = browser.new_context()
        try:
            context.add_init_script("delete Navigator.prototype.gpu; delete navigator.gpu;")
            page = context.new_page()
            page.goto(url)
            page.evaluate("() => window.demoReady")
            return {
                "shown": page.is_visible("#no-webgpu"),
                "text": page.inner_text("#no-webgpu"),
                "hidden": [page.is_hidden(s) for s in hidden],
                "worker": page.evaluate("() => window.ember === undefined"),
            }
        finally:
            context.close()

    seen = thread.do(visit)
    assert seen["shown"] and seen["hidden"] == [True] * len(hidden), seen
    assert "no WebGPU" in seen["text"] and "navigator.gpu is missing" in seen["text"]
    assert seen["worker"]   # nothing was started that could only fail
