"""Driving ember's page from a test: one Chromium, one server, one booted page per session.

Everything here is plain playwright (sync API) on Debian's /usr/bin/chromium, which runs
WebGPU on SwiftShader when given --enable-unsafe-webgpu.
"""
import importlib.util
import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("EMBER_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--enable-unsafe-webgpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run",
                 # a fake camera for the detection page; getUserMedia still asks for the
                 # permission, which a test grants (or not) per browser context
                 "--use-fake-device-for-media-stream"]
# Pyodide's boot on a busy 2-core machine under software WebGPU takes seconds, not minutes;
# this bound only turns a hung page into a failure with a message instead of a stuck run.
PAGE_TIMEOUT_MS = 300_000


class PageError(Exception):
    """A Python exception raised inside the page, carried back with its type and message."""

    def __init__(self, error):
        self.type = error.get("type")
        self.message = error.get("message")
        self.traceback = error.get("traceback", "")
        super().__init__(f"{self.type}: {self.message}\n{self.traceback}")


def load_build_web():
    spec = importlib.util.spec_from_file_location("build_web", ROOT / "build_scripts" / "build_web.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chromium_problem():
    """Why Chromium cannot be driven here, or None."""
    if not (os.path.isfile(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"the playwright package is missing ({exc}); pip install pytest-playwright"
    return None


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)


class PlaywrightThread:
    """Playwright's sync API confined to a thread of its own. While it runs it marks its
    thread's asyncio loop as running, so on the test thread every later `asyncio.run()`
    of the session (native async-readback tests, say) would fail."""

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor
        from playwright.sync_api import sync_playwright
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="playwright")
        self.playwright = self.do(lambda: sync_playwright().start())

    def do(self, fn, *args):
        """Run fn(*args) on the playwright thread and return its result (or raise)."""
        return self._executor.submit(fn, *args).result()

    def launch(self):
        return self.do(launch, self.playwright)

    def stop(self):
        try:
            self.do(self.playwright.stop)
        finally:
            self._executor.shutdown()


class EmberPage:
    """A page with ember's worker booted; `run` executes Python in it. `do` runs playwright
    calls where the browser lives (a PlaywrightThread's `do`, or directly)."""

    def __init__(self, page, url, do=None):
        self.page = page
        self.url = url
        self.do = do or (lambda fn, *args: fn(*args))
        self.console = []
        self.requests = []   # every URL the page and its worker asked for
        self.info = None

        def attach():
            page.on("request", lambda req: self.requests.append(req.url))
            page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
            page.on("pageerror", lambda err: self.console.append(f"pageerror: {err}"))
            page.set_default_timeout(PAGE_TIMEOUT_MS)
        self.do(attach)

    def boot(self):
        """Open the page and wait until Pyodide, ember and the device are ready."""
        self.do(self.page.goto, self.url)
        self.info = self.evaluate("() => window.ember.ready")
        return self

    def evaluate(self, script, arg=None):
        return self.do(self.page.evaluate, script, arg)

    def result(self, code, mode="async"):
        """The worker's whole answer: {ok, value, repr, stdout, error}."""
        return self.evaluate("([code, mode]) => window.ember.run(code, {mode})", [code, mode])

    def run(self, code, mode="async"):
        """The snippet's value (its last expression); a Python error in the page raises PageError."""
        answer = self.result(code, mode)
        if not answer["ok"]:
            raise PageError(answer["error"])
        return answer["value"]
