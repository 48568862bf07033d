"""`ember serve` under slow, idle and many clients, on loopback only (issue 10 point 10:
300 slowloris connections once held 300 threads forever, idle connections were never
closed, and a listen backlog of 5 dropped clients under a burst).

Every loop here is bounded in count and in time; nothing asserts a speed. "Closed" means
closed within a generous bounded wait, far above the short timeouts the server is given.
"""
import http.client
import socket
import threading
import time

import pytest

from ember.web.server import serve_in_thread

WORKERS = 8
HEADER_TIMEOUT = 1.0   # seconds the server allows for a request's line and headers
IDLE_TIMEOUT = 0.5     # seconds a kept-alive connection may wait for its next request
GENEROUS = 30.0        # the bounded wait for anything the server should do "eventually"
BODY = b"<!doctype html><title>load</title>" + b"x" * 4000


@pytest.fixture
def server(tmp_path):
    (tmp_path / "index.html").write_bytes(BODY)
    srv, _ = serve_in_thread(tmp_path, "127.0.0.1", 0, workers=WORKERS,
                             header_timeout=HEADER_TIMEOUT, idle_timeout=IDLE_TIMEOUT,
                             send_timeout=GENEROUS)
    yield srv
    srv.shutdown()
    srv.server_close()


def _address(srv):
    return srv.server_address[:2]


def _get(srv, path="/"):
    conn = http.client.HTTPConnection(*_address(srv), timeout=GENEROUS)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _closed_by_server(sock, limit=GENEROUS):
    """True once the server closes `sock` (EOF or reset) within `limit` seconds."""
    sock.settimeout(limit)
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            if sock.recv(65536) == b"":
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
    return False


class Slowloris:
    """A client that sends a partial request head and then one more header byte every
    `interval` seconds (each recv on the server gets data before any per-read timeout),
    for at most `limit` seconds or until the server hangs up."""

    def __init__(self, srv, interval=0.2, limit=GENEROUS):
        self.sock = socket.create_connection(_address(srv), timeout=GENEROUS)
        self.sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, args=(interval, limit), daemon=True)
        self._thread.start()

    def _drip(self, interval, limit):
        end = time.monotonic() + limit
        while time.monotonic() < end and not self._stop.wait(interval):
            try:
                self.sock.sendall(b"a")
            except OSError:
                return  # the server hung up

    def wait_closed(self):
        """True when the server closed this connection within the generous wait."""
        closed = _closed_by_server(self.sock)
        self._stop.set()
        self._thread.join(GENEROUS)
        self.sock.close()
        return closed


def _worker_threads():
    return sum(1 for t in threading.enumerate() if t.name == "ember-serve-worker")


def test_slowloris_clients_are_closed_however_slowly_they_trickle(server):
    slow = [Slowloris(server) for _ in range(WORKERS + 4)]  # more than the workers
    assert all(s.wait_closed() for s in slow)
    assert _get(server) == (200, BODY)  # the server survived and still answers


def test_idle_connections_are_closed(server):
    silent = [socket.create_connection(_address(server), timeout=GENEROUS) for _ in range(5)]
    kept = http.client.HTTPConnection(*_address(server), timeout=GENEROUS)
    kept.request("GET", "/")
    resp = kept.getresponse()
    assert resp.status == 200 and resp.read() == BODY
    assert resp.getheader("Connection") != "close"  # HTTP/1.1 keep-alive was offered
    try:
        # A connection that never sends a byte, and one idle after a request: both closed.
        assert all(_closed_by_server(s) for s in silent)
        assert _closed_by_server(kept.sock)
    finally:
        for s in silent:
            s.close()
        kept.close()


def test_keep_alive_serves_several_requests_on_one_connection(server):
    conn = http.client.HTTPConnection(*_address(server), timeout=GENEROUS)
    try:
        conn.request("GET", "/")
        first = conn.getresponse()
        assert first.read() == BODY
        sock = conn.sock
        conn.request("GET", "/index.html")
        second = conn.getresponse()
        assert second.status == 200 and second.read() == BODY
        assert conn.sock is sock  # the same connection, not a reconnect
    finally:
        conn.close()


def test_many_clients_are_all_served_while_slow_clients_hold_connections(server):
    """200 requests from 50 threads, with slow clients connected all along: every request
    gets its page, and the server never runs more handler threads than its workers."""
    slow = [Slowloris(server, limit=GENEROUS) for _ in range(WORKERS // 2)]
    results, errors, peak = [], [], [0]
    lock = threading.Lock()
    done = threading.Event()

    def client():
        for _ in range(4):
            try:
                got = _get(server)
            except OSError as exc:
                got = exc
            with lock:
                (results if got == (200, BODY) else errors).append(got)

    def watch():
        while not done.wait(0.01):
            peak[0] = max(peak[0], _worker_threads())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    clients = [threading.Thread(target=client, daemon=True) for _ in range(50)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(GENEROUS * 4)
    done.set()
    watcher.join(GENEROUS)
    assert not any(t.is_alive() for t in clients), "a client never finished"
    assert errors == [] and len(results) == 200
    assert 1 <= peak[0] <= WORKERS
    assert all(s.wait_closed() for s in slow)
    assert _get(server) == (200, BODY)


def test_a_full_backlog_waits_instead_of_failing(server):
    """More simultaneous connections than workers: the excess wait in the listen backlog
    (128 deep) and are served once a worker frees up; none is refused."""
    socks = [socket.create_connection(_address(server), timeout=GENEROUS) for _ in range(60)]
    try:
        for s in socks:
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        for s in socks:
            data = b""
            end = time.monotonic() + GENEROUS
            while time.monotonic() < end:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            assert data.startswith(b"HTTP/1.1 200") and data.endswith(BODY)
    finally:
        for s in socks:
            s.close()


def test_limits_must_be_positive(tmp_path):
    (tmp_path / "index.html").write_bytes(BODY)
    from ember.web.server import make_server
    for bad in ({"workers": 0}, {"header_timeout": 0}, {"idle_timeout": -1}):
        with pytest.raises(ValueError, match="must be positive"):
            make_server(tmp_path, port=0, **bad)
