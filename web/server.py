"""A small static-file server for the browser bundle (what `ember serve` runs).

It serves one directory and nothing outside it: the request path is percent-decoded
once, any `..`, backslash, NUL or drive-like segment is refused, and the resolved real
path (symlinks followed) must still lie inside the bundle. Pages get the cross-origin
isolation headers, which give the worker precise timers and SharedArrayBuffer.
"""
import email.utils
import http.server
import os
import posixpath
import socketserver
import threading
import urllib.parse
from pathlib import Path

# Browsers refuse to compile wasm streamed with the wrong type and refuse module scripts
# without a JavaScript type, so these are set explicitly rather than left to the OS table.
MIME_TYPES = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".map": "application/json",
    ".whl": "application/zip",
    ".zip": "application/zip",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".safetensors": "application/octet-stream",
    ".gguf": "application/octet-stream",
}

ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def resolve_request_path(root, raw_path):
    """The file under `root` that `raw_path` names, or None when it names nothing servable
    (outside the root, a hidden trick such as an encoded `..`, or a missing file)."""
    path = raw_path.split("?", 1)[0].split("#", 1)[0]
    path = urllib.parse.unquote(path, errors="strict") if "%" in path else path
    if "\x00" in path or "\\" in path:
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." or ":" in p for p in parts):
        return None
    root_real = os.path.realpath(root)
    candidate = os.path.join(root_real, *parts) if parts else root_real
    real = os.path.realpath(candidate)
    if os.path.commonpath([real, root_real]) != root_real:
        return None
    if os.path.isdir(real):
        real = os.path.realpath(os.path.join(real, "index.html"))
        if os.path.commonpath([real, root_real]) != root_real:
            return None
    return real if os.path.isfile(real) else None


class BundleHandler(http.server.BaseHTTPRequestHandler):
    root = None          # set on the subclass made by make_server
    quiet = True
    server_version = "ember-serve"

    def do_GET(self):
        self._serve(send_body=True)

    def do_HEAD(self):
        self._serve(send_body=False)

    def _serve(self, send_body):
        try:
            path = resolve_request_path(self.root, self.path)
        except UnicodeDecodeError:
            path = None
        if path is None:
            self._send_error(404, "not found")
            return
        ext = posixpath.splitext(path)[1].lower()
        ctype = MIME_TYPES.get(ext, "application/octet-stream")
        try:
            with open(path, "rb") as f:
                stat = os.fstat(f.fileno())
                if self._not_modified(stat.st_mtime):
                    # The browser's cached copy is current: for pyodide.asm.wasm that also
                    # keeps Chromium's compiled-code cache, so a reload boots faster.
                    self.send_response(304)
                    self.send_header("Cache-Control", "no-cache")
                    for name, value in ISOLATION_HEADERS.items():
                        self.send_header(name, value)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(stat.st_size))
                self.send_header("Last-Modified", self.date_time_string(int(stat.st_mtime)))
                # Revalidate every time: a rebuilt bundle must never mix with a cached one.
                self.send_header("Cache-Control", "no-cache")
                for name, value in ISOLATION_HEADERS.items():
                    self.send_header(name, value)
                self.end_headers()
                if send_body:
                    while True:
                        chunk = f.read(1 << 20)
                        if not chunk:
                            break
                        self.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except OSError:
            self._send_error(404, "not found")

    def _not_modified(self, mtime):
        since = self.headers.get("If-Modified-Since")
        if not since:
            return False
        try:
            return int(mtime) <= email.utils.parsedate_to_datetime(since).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return False

    def _send_error(self, code, text):
        body = f"{code} {text}\n".encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, fmt, *args):
        if not self.quiet:
            super().log_message(fmt, *args)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(root, host="127.0.0.1", port=8000, quiet=True):
    """An HTTP server for `root` (not yet serving); port 0 picks a free port."""
    root = Path(root)
    if not (root / "index.html").is_file():
        raise FileNotFoundError(f"ember serve: no index.html in bundle directory {root}")
    handler = type("Handler", (BundleHandler,), {"root": str(root), "quiet": quiet})
    return _Server((host, port), handler)


def serve_in_thread(root, host="127.0.0.1", port=0):
    """Start serving `root` on a daemon thread; returns (server, base_url). Used by tests
    and benchmarks; call server.shutdown() to stop."""
    server = make_server(root, host, port)
    thread = threading.Thread(target=server.serve_forever, name="ember-serve", daemon=True)
    thread.start()
    h, p = server.server_address[:2]
    return server, f"http://{h}:{p}/"


def bundle_dir():
    """Where `make web` puts the bundle: web/bundle next to this file."""
    return Path(__file__).resolve().parent / "bundle"
