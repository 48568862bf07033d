"""The Python half of the page's worker (web/static/worker.js): opens the WebGPU device
and runs snippets, answering in JSON so no proxy outlives a call.

Every snippet runs in one shared namespace that already holds `ember` and `dev` (the
WebGPU device), so a page can build on earlier snippets, as in a notebook.
"""

import contextlib
import io
import json
import math
import traceback

_namespace = {}


async def open_device():
    """Request the adapter and device (async, so no JSPI is needed), then open
    ember's WebGPU device on them; returns JSON with the adapter's name and limits."""
    import ember
    from ember.backends.webgpu import browser

    info = await browser.request_device_async()
    _namespace.update({"__name__": "__main__", "ember": ember, "dev": ember.Device.webgpu()})
    return json.dumps(info)


async def run(code):
    """Run `code` as a coroutine (top-level await allowed); the last expression is the value."""
    from pyodide.code import eval_code_async

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            value = await eval_code_async(code, globals=_namespace, filename="<snippet>")
            return _answer(True, value, out)
    except BaseException as exc:  # the snippet's error is the answer, not a worker crash
        return _failure(exc, out)


def run_plain(code):
    """Run `code` as an ordinary call: no suspendable stack, as without JSPI."""
    from pyodide.code import eval_code

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            value = eval_code(code, globals=_namespace, filename="<snippet>")
            return _answer(True, value, out)
    except BaseException as exc:
        return _failure(exc, out)


def _answer(ok, value, out):
    try:
        text = None if value is None else repr(value)
    except Exception as exc:  # e.g. a tensor whose repr needs a readback that cannot run here
        text = f"<repr failed: {type(exc).__name__}: {exc}>"
    try:
        payload = json.dumps(
            {"ok": ok, "value": _json_safe(value), "repr": text, "stdout": out.getvalue()},
            allow_nan=False,
        )
    except (TypeError, ValueError):  # not JSON-able: the repr is the answer
        payload = json.dumps({"ok": ok, "value": None, "repr": text, "stdout": out.getvalue()})
    return payload


def _json_safe(value):
    """JSON has no inf/nan: send them as the strings float() reads back ("inf", "nan")."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def _failure(exc, out):
    return json.dumps(
        {
            "ok": False,
            "value": None,
            "repr": None,
            "stdout": out.getvalue(),
            "error": {
                "type": type(exc).__name__,
                "message": str(exc),
                "traceback": "".join(traceback.format_exception(exc)),
            },
        }
    )
