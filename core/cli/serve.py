"""`ember serve`: serve the browser bundle (the playground and demos) on localhost.

    ember serve [--host 127.0.0.1] [--port 8000] [--bundle DIR] [--rebuild]

The bundle is built first (`make web` does the same) when it is missing, or when
--rebuild is given; building needs a source checkout, npm and the `build` package. A
directory given with --bundle that has an index.html is served as it is; ember builds
only into an absent or empty directory or a bundle it built, and refuses anything else.
Hidden files are never served, and slow or idle clients are closed after a timeout (see
ember.web.server for the limits).
"""

import sys
from pathlib import Path

from . import args as argtypes


def add_parser(subparsers):
    p = subparsers.add_parser(
        "serve",
        help="serve the browser playground on localhost",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    p.add_argument(
        "--port", type=argtypes.port, default=8000, help="port 0..65535 (default 8000; 0 picks one)"
    )
    p.add_argument(
        "--bundle", default=None, help="bundle directory (default: web/bundle, built if missing)"
    )
    p.add_argument("--rebuild", action="store_true", help="rebuild the bundle before serving")
    p.set_defaults(func=run)
    return p


def _build_script():
    """build_scripts/build_web.py of the checkout this ember runs from, or None."""
    from ember.web.server import bundle_dir

    script = bundle_dir().parent.parent / "build_scripts" / "build_web.py"
    return script if script.is_file() else None


def ensure_bundle(bundle=None, rebuild=False):
    """The directory to serve. An existing directory with an index.html is served as it is
    (someone's own site too) and never built into; a bundle is built only where
    build_web may build (an absent or empty directory, or one ember built: see
    ember.web.bundle_place), else this refuses, saying why."""
    from ember.errors import EmberError
    from ember.web import bundle_place
    from ember.web.server import bundle_dir

    default = bundle_dir()
    path = Path(bundle) if bundle else default
    script = _build_script()
    if (
        (path / "index.html").is_file()
        and not rebuild
        and (bundle is not None or (path / "manifest.json").is_file())
    ):
        if bundle is None and script is not None and _load(script).is_stale(path):
            print(
                "ember serve: note: the bundle is older than the sources; `ember serve "
                "--rebuild` or `make web` refreshes it",
                file=sys.stderr,
                flush=True,
            )
        return path
    why = bundle_place.refusal(path, default)
    if why is not None:
        raise EmberError(f"will not build a bundle here: {why}", op="serve")
    if script is None:
        raise EmberError(
            f"no bundle at {path}, and no build_scripts/build_web.py "
            "to build one (run `make web` in an ember source checkout, or pass "
            "--bundle DIR)"
        )
    print(f"ember serve: building the bundle into {path}", file=sys.stderr, flush=True)
    try:
        return _load(script).build(path)
    except bundle_place.BundlePlaceError as exc:  # the place changed while building
        raise EmberError(f"will not build a bundle here: {exc}", op="serve") from None


def _load(script):
    import importlib.util

    spec = importlib.util.spec_from_file_location("ember_build_web", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(args):
    from ember.web.server import make_server

    path = ensure_bundle(args.bundle, args.rebuild)
    try:
        server = make_server(path, args.host, args.port, quiet=False)
    except OSError as exc:
        print(
            f"ember serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
            flush=True,
        )
        return 1
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"ember serve: {path} on http://{shown}:{port}/  (Ctrl+C stops)", flush=True)
    if host not in ("127.0.0.1", "::1", "localhost"):
        print(
            f"ember serve: note: listening on {host}, so other machines can load these pages too",
            file=sys.stderr,
            flush=True,
        )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
