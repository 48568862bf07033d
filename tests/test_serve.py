"""`ember serve`: MIME types, isolation headers, localhost binding, and no file outside the
bundle however the path is spelled (encoded `..`, backslashes, absolute paths, symlinks)."""
import http.client
import os
import subprocess
import sys

import pytest

from serve_process import start_ember_serve

from ember.web.server import resolve_request_path, serve_in_thread

SECRET = "the-secret-outside-the-bundle"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    (base / "secret.txt").write_text(SECRET)
    root = base / "bundle"
    (root / "pyodide").mkdir(parents=True)
    (root / "sub").mkdir()
    (root / "index.html").write_text("<!doctype html><title>t</title>")
    (root / "pyodide" / "pyodide.asm.wasm").write_bytes(b"\0asm\1\0\0\0")
    (root / "pyodide" / "pyodide.mjs").write_text("export const x = 1;")
    (root / "worker.js").write_text("self.x = 1;")
    (root / "manifest.json").write_text('{"wheel": "w.whl"}')
    (root / "ember-0.1.0-py3-none-any.whl").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    (root / "sub" / "index.html").write_text("sub index")
    os.symlink(base / "secret.txt", root / "link-out.txt")
    os.symlink(base, root / "dir-out")
    os.symlink(root / "worker.js", root / "link-in.js")
    (root / ".ember-bundle").write_text("ember bundle marker")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text(SECRET)
    (root / "sub" / ".env").write_text(SECRET)
    os.symlink(root / ".git" / "config", root / "link-to-dotfile.txt")
    server, url = serve_in_thread(root)
    host, port = server.server_address[:2]
    yield {"root": root, "host": host, "port": port}
    server.shutdown()
    server.server_close()


def get(site, path, method="GET"):
    conn = http.client.HTTPConnection(site["host"], site["port"], timeout=30)
    conn.putrequest(method, path, skip_host=False, skip_accept_encoding=True)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, dict((k.lower(), v) for k, v in resp.getheaders()), body


@pytest.mark.parametrize("path, mime", [
    ("/pyodide/pyodide.asm.wasm", "application/wasm"),
    ("/pyodide/pyodide.mjs", "text/javascript"),
    ("/worker.js", "text/javascript"),
    ("/manifest.json", "application/json"),
    ("/ember-0.1.0-py3-none-any.whl", "application/zip"),
    ("/index.html", "text/html"),
])
def test_mime_types(site, path, mime):
    status, headers, body = get(site, path)
    assert status == 200
    assert headers["content-type"].split(";")[0] == mime
    assert body == (site["root"] / path.lstrip("/")).read_bytes()


def test_root_and_directories_serve_their_index(site):
    assert get(site, "/")[2] == (site["root"] / "index.html").read_bytes()
    assert get(site, "/sub/")[2] == b"sub index"


def test_cross_origin_isolation_headers(site):
    _, headers, _ = get(site, "/index.html")
    assert headers["cross-origin-opener-policy"] == "same-origin"
    assert headers["cross-origin-embedder-policy"] == "require-corp"


def test_head_sends_no_body(site):
    status, headers, body = get(site, "/worker.js", method="HEAD")
    assert status == 200 and body == b""
    assert int(headers["content-length"]) == len((site["root"] / "worker.js").read_bytes())


def test_symlink_inside_the_bundle_is_served(site):
    status, _, body = get(site, "/link-in.js")
    assert status == 200 and body == b"self.x = 1;"


@pytest.mark.parametrize("path", [
    "/../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E/secret.txt",
    "/..%2fsecret.txt",
    "/%2e%2e%2fsecret.txt",
    "/sub/..%2f..%2fsecret.txt",
    "/sub/%2e%2e/%2e%2e/secret.txt",
    "/..%5csecret.txt",
    "/..\\secret.txt",
    "/%252e%252e/secret.txt",          # double-encoded: decoded once, stays a literal name
    "//../secret.txt",
    "/./../secret.txt",
    "/link-out.txt",                   # a symlink in the bundle pointing out of it
    "/dir-out/secret.txt",             # a directory symlink pointing out of it
    "/dir-out/",
    "/secret.txt%00.html",
    "/C:/secret.txt",
    "/no-such-file.js",
])
def test_nothing_outside_the_bundle(site, path):
    status, _, body = get(site, path)
    assert status == 404
    assert SECRET.encode() not in body


def test_absolute_paths_stay_inside_the_bundle(site):
    # "/etc/passwd" means bundle/etc/passwd, which does not exist; an encoded leading
    # slash must not turn it into the real /etc/passwd.
    for path in ("/etc/passwd", "/%2fetc%2fpasswd", "//etc/passwd", "/%2F%2Fetc/passwd"):
        status, _, body = get(site, path)
        assert status == 404, path
        assert b"root:" not in body


def test_resolver_refuses_outside_paths_directly(site):
    root = str(site["root"])
    assert resolve_request_path(root, "/index.html") == os.path.realpath(
        os.path.join(root, "index.html"))
    for bad in ("/../secret.txt", "/%2e%2e/secret.txt", "/link-out.txt", "/a/../../x"):
        assert resolve_request_path(root, bad) is None


def _start_cli(*args):
    proc, match = start_ember_serve(*args)
    return proc, match.group(1), int(match.group(2))


def test_cli_serves_the_bundle_on_localhost_by_default(site):
    proc, host, port = _start_cli("--port", "0", "--bundle", str(site["root"]))
    try:
        assert host == "127.0.0.1"
        status, headers, body = get({"host": host, "port": port}, "/pyodide/pyodide.asm.wasm")
        assert status == 200 and headers["content-type"] == "application/wasm"
        assert get({"host": host, "port": port}, "/%2e%2e/secret.txt")[0] == 404
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_without_a_bundle_or_build_script_says_so(tmp_path, monkeypatch):
    from ember.cli import serve
    from ember.errors import EmberError
    monkeypatch.setattr(serve, "_build_script", lambda: None)
    with pytest.raises(EmberError, match="no bundle at .*make web"):
        serve.ensure_bundle(tmp_path / "missing")


def test_cli_refuses_a_busy_port(site):
    proc, host, port = _start_cli("--port", "0", "--bundle", str(site["root"]))
    try:
        second = subprocess.run(
            [sys.executable, "-m", "ember.cli", "serve", "--port", str(port),
             "--bundle", str(site["root"])], capture_output=True, text=True, timeout=120)
        assert second.returncode != 0
        assert f"cannot listen on 127.0.0.1:{port}" in second.stderr
        assert "Address already in use" in second.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_builds_a_missing_bundle(tmp_path):
    """The bundle `ember serve` builds when none exists: pages, Pyodide core, and a pure
    wheel whose numpy/wgpu requirements are skipped under Pyodide."""
    import json
    import zipfile
    from ember.cli import serve
    if serve._build_script() is None:
        pytest.skip("not a source checkout: no build_scripts/build_web.py")
    try:
        bundle = serve.ensure_bundle(tmp_path / "bundle")
    except SystemExit as exc:  # build_web names what is missing (npm, the build package)
        from helpers import missing
        missing("the bundle's build tools", str(exc))
    for name in ("index.html", "worker.js", "ember-client.js", "playground.js",
                 "pyodide/pyodide.mjs", "pyodide/pyodide.asm.wasm", "pyodide/python_stdlib.zip"):
        assert (bundle / name).is_file(), name
    assert (bundle / ".ember-bundle").is_file()   # what lets a later build replace it
    manifest = json.loads((bundle / "manifest.json").read_text())
    wheel = bundle / manifest["wheel"]
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert {"ember/__init__.py", "ember/web/page_runtime.py", "ember/shaders/prelude.wgsl",
            "ember/backends/webgpu/browser.py"} <= names
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")
                and "extra ==" not in line]
    assert requires, "the wheel declares no runtime requirements"
    for line in requires:
        assert "sys_platform != \"emscripten\"" in line, line


def test_unchanged_files_revalidate_with_304(site):
    _, headers, body = get(site, "/pyodide/pyodide.asm.wasm")
    conn = http.client.HTTPConnection(site["host"], site["port"], timeout=30)
    conn.request("GET", "/pyodide/pyodide.asm.wasm",
                 headers={"If-Modified-Since": headers["last-modified"]})
    resp = conn.getresponse()
    assert resp.status == 304 and resp.read() == b""
    assert resp.getheader("Cross-Origin-Embedder-Policy") == "require-corp"
    conn.request("GET", "/pyodide/pyodide.asm.wasm",
                 headers={"If-Modified-Since": "Thu, 01 Jan 1998 00:00:00 GMT"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read() == body
    conn.close()


@pytest.mark.parametrize("path", [
    "/.ember-bundle", "/.git/config", "/.git/", "/%2egit/config", "/%2Eember-bundle",
    "/sub/.env", "/sub/%2eenv", "/./.git/config", "/link-to-dotfile.txt",
])
def test_dotfiles_are_not_served(site, path):
    """Hidden files (the bundle marker, a .git directory, a .env) are 404, however the
    path is spelled, and so is a visible symlink pointing at one."""
    status, _, body = get(site, path)
    assert status == 404
    assert SECRET.encode() not in body and b"marker" not in body


def test_server_header_names_no_python_version(site):
    for path in ("/index.html", "/no-such-file"):
        _, headers, _ = get(site, path)
        assert headers["server"] == "ember-serve"
        assert "python" not in headers["server"].lower()


@pytest.mark.parametrize("port", ["70000", "-1", "eighty"])
def test_cli_refuses_a_port_out_of_range_without_a_traceback(site, port):
    proc = subprocess.run([sys.executable, "-m", "ember.cli", "serve", "--port", port,
                           "--bundle", str(site["root"])], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "argument --port: must be a port number 0..65535" in proc.stderr
    assert "Traceback" not in proc.stderr
