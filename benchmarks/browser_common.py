"""What the browser benchmarks share: Debian's Chromium driven by playwright, on ember's
page bundle served by ember's own server.

    from browser_common import BrowserUnavailable, open_browser
    try:
        with open_browser() as session:      # bundle built if stale, served, Chromium up
            page = session.page("embed.html").boot()
    except BrowserUnavailable as exc:
        print(f"skipped: {exc}")             # benchmarks never fail

The launch flags, the page driver (EmberPage) and the bundle builder live with the browser
tests (tests/browser/page_harness.py, build_scripts/build_web.py); this module only puts
them together for a benchmark and turns what is missing into a reason to skip.
"""

import contextlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "browser"))

from page_harness import CHROMIUM, EmberPage, chromium_problem, launch, load_build_web  # noqa: E402


class BrowserUnavailable(Exception):
    """Why a browser benchmark cannot run here (no Chromium, no playwright, no bundle)."""


class BrowserSession:
    """A launched Chromium and the base URL of the served bundle."""

    def __init__(self, browser, url, bundle):
        self.browser = browser
        self.url = url
        self.bundle = bundle
        with open(os.path.join(str(bundle), "manifest.json")) as fh:
            self.manifest = json.load(fh)

    def has_model(self, name):
        return name in self.manifest.get("models", {})

    def page(self, path=""):
        """An EmberPage for `path` under the bundle (not opened yet: call .boot())."""
        return EmberPage(self.browser.new_page(), self.url + path)

    def describe(self, info):
        """Chromium and the WebGPU adapter a booted page reported, in one line."""
        adapter = (info or {}).get("adapter", {})
        return (
            f"{CHROMIUM} ({self.browser.version}), adapter "
            f"{adapter.get('description') or adapter.get('vendor') or '?'} "
            f"[{adapter.get('architecture') or '?'}]"
        )


@contextlib.contextmanager
def open_browser():
    """Build the bundle if stale, serve it, launch Chromium; yields a BrowserSession and
    closes everything on the way out. Raises BrowserUnavailable before yielding when any
    of it cannot be had here."""
    problem = chromium_problem()
    if problem:
        raise BrowserUnavailable(problem)
    try:
        bundle = load_build_web().ensure_bundle()
    except Exception as exc:  # no npm pyodide, no wheel build: say why, don't fail
        raise BrowserUnavailable(
            f"the web bundle could not be built (make web): {type(exc).__name__}: {exc}"
        ) from exc
    from ember.web.server import serve_in_thread
    from playwright.sync_api import sync_playwright

    server, url = serve_in_thread(bundle)
    try:
        with sync_playwright() as pw:
            try:
                browser = launch(pw)
            except Exception as exc:
                raise BrowserUnavailable(f"Chromium at {CHROMIUM} did not start: {exc}") from exc
            try:
                yield BrowserSession(browser, url, bundle)
            finally:
                browser.close()
    finally:
        server.shutdown()
