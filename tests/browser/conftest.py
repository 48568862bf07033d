"""Browser fixtures: ONE Chromium launch, one server and one booted page per test session.

Under CI=true a missing Chromium or playwright fails the run; elsewhere the browser tests
skip with the reason. The bundle is (re)built first when the sources changed.
"""
import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from page_harness import (EmberPage, PlaywrightThread, chromium_problem,  # noqa: E402
                          load_build_web)
from helpers import ON_CI, missing  # noqa: E402
from serve_process import start_ember_serve  # noqa: E402

ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "..", "test-artifacts")


def pytest_collection_modifyitems(items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def bundle_dir():
    try:
        return load_build_web().ensure_bundle()
    except SystemExit as exc:  # build_web explains what is missing (npm, the build package)
        missing("the browser bundle", str(exc))


@pytest.fixture(scope="session")
def server_url(bundle_dir):
    """`ember serve` itself (a subprocess on a free port), so every browser test loads the
    pages exactly as a person would after `make web`."""
    from ember.web.server import bundle_dir as default_bundle
    args = ["--port", "0"]
    if os.path.realpath(bundle_dir) != os.path.realpath(default_bundle()):
        args += ["--bundle", str(bundle_dir)]
    proc, match = start_ember_serve(*args, url=r"(http://127\.0\.0\.1:\d+/)")
    # Drain the request log so the pipe never fills and blocks the server.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    yield match.group(1)
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def chromium():
    """(PlaywrightThread, Browser): the session's one Chromium, driven from its own thread."""
    problem = chromium_problem()
    if problem:
        missing("Chromium for the browser tests", problem)
    thread = PlaywrightThread()
    try:
        browser = thread.launch()
    except Exception as exc:  # playwright's Error: the binary would not start
        thread.stop()
        missing("Chromium for the browser tests", f"launch failed: {exc}")
    yield thread, browser
    try:
        thread.do(browser.close)
    finally:
        thread.stop()


@pytest.fixture(scope="session")
def ember_page(chromium, server_url):
    """The playground page, booted once (Pyodide, the ember wheel, the WebGPU device)."""
    thread, browser = chromium
    context = thread.do(lambda: browser.new_context(viewport={"width": 1000, "height": 900}))
    booted = EmberPage(thread.do(context.new_page), server_url, do=thread.do)
    try:
        booted.boot()
    except Exception as exc:
        console = "\n".join(booted.console[-30:])
        pytest.fail(f"the ember page did not boot: {exc}\nconsole:\n{console}")
    yield booted
    thread.do(context.close)


@pytest.fixture(scope="session")
def artifacts_dir():
    os.makedirs(ARTIFACTS, exist_ok=True)
    return os.path.abspath(ARTIFACTS)


@pytest.fixture(scope="session")
def reference_device():
    """The native WebGPU device (wgpu-py) that page results are compared with; the CPU
    stands in where wgpu cannot open here (under CI=true both must exist)."""
    import ember
    try:
        return ember.Device.wgpu()
    except ember.DeviceError as exc:
        if ON_CI:
            pytest.fail(f"the native wgpu device is required under CI=true: {exc}")
        return ember.Device.cpu()
