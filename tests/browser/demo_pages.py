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
