"""A small static-file server for the browser bundle (what `ember serve` runs).

It serves one directory and nothing outside it: the request path is percent-decoded
once, any `..`, backslash, NUL, drive-like or hidden (dot) segment is refused, and the
resolved real path (symlinks followed) must still lie inside the bundle and name no
dotfile (.ember-bundle, .git/). Pages get the cross-origin isolation headers, which give
the worker precise timers and SharedArrayBuffer.

Slow or idle clients cannot hold it: at most `workers` connections are handled at once
(the rest wait in the listen backlog, not in threads), a request's line and headers must
arrive within `header_timeout` seconds however slowly they trickle in (slowloris), a
kept-alive connection is closed after `idle_timeout` seconds without a new request, and a
client that stops reading is dropped after `send_timeout` seconds per 1 MiB written.
"""

import email.utils
import http.server
import io
import os
import posixpath
import sys
import threading
import time
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
    # ".." climbs out; any other dot segment is a hidden file (.ember-bundle, .git/).
    if any(p.startswith(".") or ":" in p for p in parts):
        return None
    root_real = os.path.realpath(root)
    candidate = os.path.join(root_real, *parts) if parts else root_real
    real = os.path.realpath(candidate)
    if not _inside_and_visible(real, root_real):
        return None
    if os.path.isdir(real):
        real = os.path.realpath(os.path.join(real, "index.html"))
        if not _inside_and_visible(real, root_real):
            return None
    return real if os.path.isfile(real) else None


def _inside_and_visible(real, root_real):
    """`real` lies under `root_real` and no part of it below the root is hidden (a symlink
    in the bundle may point at a dotfile)."""
    if os.path.commonpath([real, root_real]) != root_real:
        return False
    rel = os.path.relpath(real, root_real)
    return rel == "." or not any(p.startswith(".") for p in rel.split(os.sep))


class _HeadReader(io.RawIOBase):
    """The socket's read side under one deadline for a whole request head: a timeout per
    recv alone lets a client that sends a byte every few seconds hold a worker forever."""

    def __init__(self, sock):
        self._sock = sock
        self.deadline = time.monotonic()

    def readable(self):
        return True

    def readinto(self, buffer):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the client did not send its request in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class BundleHandler(http.server.BaseHTTPRequestHandler):
    root = None  # set on the subclass made by make_server
    quiet = True
    server_version = "ember-serve"
    # Keep-alive: a page's few dozen files load over a handful of connections.
    protocol_version = "HTTP/1.1"

    def version_string(self):
        return self.server_version  # the Server header names no Python version

    def setup(self):
        super().setup()
        self._head = _HeadReader(self.connection)
        self.rfile = io.BufferedReader(self._head)

    def handle(self):
        limits = self.server
        self.close_connection = True
        self._head.deadline = time.monotonic() + limits.header_timeout
        self.handle_one_request()
        while not self.close_connection:
            # Wait idle_timeout for the next request to start, then header_timeout more
            # for the rest of its head.
            self._head.deadline = time.monotonic() + limits.idle_timeout
            try:
                if not self.rfile.peek(1):
                    return  # the client closed the connection
            except OSError:  # TimeoutError included: idle too long
                return
            self._head.deadline = time.monotonic() + limits.header_timeout
            self.handle_one_request()

    def do_GET(self):
        self._serve(send_body=True)

    def do_HEAD(self):
        self._serve(send_body=False)

    def _serve(self, send_body):
        self.connection.settimeout(self.server.send_timeout)
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


class _Server(http.server.HTTPServer):
    """One thread per connection, at most `workers` at once: a connection is accepted
    only when a worker is free, so the rest wait in the listen backlog."""

    allow_reuse_address = True
    request_queue_size = 128  # the listen backlog (5 dropped clients under a burst of 200)
    slot_wait = 0.2  # seconds; then serve_forever looks for shutdown() again

    def __init__(self, address, handler, workers, header_timeout, idle_timeout, send_timeout):
        for name, value in (
            ("workers", workers),
            ("header_timeout", header_timeout),
            ("idle_timeout", idle_timeout),
            ("send_timeout", send_timeout),
        ):
            if not value > 0:
                raise ValueError(f"ember serve: {name} must be positive, got {value!r}")
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.send_timeout = send_timeout
        self._slots = threading.BoundedSemaphore(workers)
        super().__init__(address, handler)

    def get_request(self):
        if not self._slots.acquire(timeout=self.slot_wait):
            # serve_forever ignores an OSError here and polls again: the connection stays
            # queued in the kernel until a worker frees up.
            raise OSError("every worker is busy")
        try:
            return super().get_request()
        except BaseException:
            self._slots.release()
            raise

    def process_request(self, request, client_address):
        try:
            threading.Thread(
                target=self._work,
                args=(request, client_address),
                name="ember-serve-worker",
                daemon=True,
            ).start()
        except BaseException:
            self._slots.release()
            raise

    def _work(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that hung up or timed out: nothing to report
        super().handle_error(request, client_address)


def make_server(
    root,
    host="127.0.0.1",
    port=8000,
    quiet=True,
    *,
    workers=32,
    header_timeout=10.0,
    idle_timeout=5.0,
    send_timeout=30.0,
):
    """An HTTP server for `root` (not yet serving); port 0 picks a free port. The limits
    (see the module docstring) are in connections and seconds."""
    root = Path(root)
    if not (root / "index.html").is_file():
        raise FileNotFoundError(f"ember serve: no index.html in bundle directory {root}")
    handler = type("Handler", (BundleHandler,), {"root": str(root), "quiet": quiet})
    return _Server((host, port), handler, workers, header_timeout, idle_timeout, send_timeout)


def serve_in_thread(root, host="127.0.0.1", port=0, **limits):
    """Start serving `root` on a daemon thread; returns (server, base_url). Used by tests
    and benchmarks; call server.shutdown() to stop. `limits` go to make_server."""
    server = make_server(root, host, port, **limits)
    thread = threading.Thread(target=server.serve_forever, name="ember-serve", daemon=True)
    thread.start()
    h, p = server.server_address[:2]
    return server, f"http://{h}:{p}/"


def bundle_dir():
    """Where `make web` puts the bundle: web/bundle next to this file."""
    return Path(__file__).resolve().parent / "bundle"
