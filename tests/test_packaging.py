"""The wheel is pure Python, carries the shaders and web files, and installs into a fresh
virtual environment (no system site-packages) where `import ember` works."""
import glob
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from helpers import missing, require

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.slow


def _package_dirs():
    """Every folder under core/ that holds Python files, as an import name."""
    names = set()
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, "core")):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        if any(f.endswith(".py") for f in filenames):
            rel = os.path.relpath(dirpath, os.path.join(ROOT, "core"))
            names.add("ember" if rel == "." else "ember." + rel.replace(os.sep, "."))
    return names


def test_every_core_package_is_listed_in_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        config = tomllib.load(f)
    listed = set(config["tool"]["setuptools"]["packages"])
    unlisted = _package_dirs() - listed
    assert not unlisted, f"add these to [tool.setuptools] packages in pyproject.toml: {unlisted}"
    for name in _package_dirs():
        init = os.path.join(ROOT, "core", *name.split(".")[1:], "__init__.py")
        assert os.path.exists(init), f"{name} has no __init__.py"


def _copy_sources(dst):
    """The files a build reads, copied, so the build never touches the working tree."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules", "bundle", "*.egg-info")
    for folder in ("core", "shaders", "web"):
        shutil.copytree(os.path.join(ROOT, folder), os.path.join(dst, folder), ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if os.path.exists(os.path.join(ROOT, name)):
            shutil.copy(os.path.join(ROOT, name), dst)


def _has_setuptools(major):
    try:
        from importlib.metadata import version
        return int(version("setuptools").split(".")[0]) >= major
    except Exception:
        return False


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    require("build")
    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("dist")
    _copy_sources(src)
    # With a recent enough setuptools here, --no-isolation builds without a download;
    # otherwise build fetches the build requirements from the package index.
    isolation = ["--no-isolation"] if _has_setuptools(77) else []
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", *isolation,
                           "--outdir", str(out), str(src)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = glob.glob(str(out / "*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_is_pure_python(wheel):
    assert os.path.basename(wheel).endswith("-py3-none-any.whl"), wheel


def test_wheel_carries_sources_shaders_and_web_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in _package_dirs():
        folder = os.path.join(ROOT, "core", *package.split(".")[1:])
        for py in glob.glob(os.path.join(folder, "*.py")):
            inside = "/".join(package.split(".")) + "/" + os.path.basename(py)
            assert inside in names, f"{inside} missing from the wheel"
    shaders = glob.glob(os.path.join(ROOT, "shaders", "*.wgsl"))
    assert shaders, "shaders/ holds no .wgsl files"
    for path in shaders:
        assert f"ember/shaders/{os.path.basename(path)}" in names
    static = [p for p in glob.glob(os.path.join(ROOT, "web", "static", "**", "*"), recursive=True)
              if os.path.isfile(p)]
    assert static, "web/static holds no files"
    for path in static:
        rel = os.path.relpath(path, os.path.join(ROOT, "web")).replace(os.sep, "/")
        assert f"ember/web/{rel}" in names, f"ember/web/{rel} missing from the wheel"
    metadata = [n for n in names if n.endswith(".dist-info/METADATA")]
    text = zipfile.ZipFile(wheel).read(metadata[0]).decode()
    assert "Requires-Python: >=3.11" in text
    assert "numpy" in text and 'sys_platform != "emscripten"' in text


def test_wheel_installs_into_a_fresh_venv_and_imports(wheel, tmp_path):
    env = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    py = str(env / ("Scripts" if os.name == "nt" else "bin") / "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["install", "--no-deps", wheel], check=True, timeout=300)
    # Without numpy (not installed yet) ember imports and finds its shaders.
    check = subprocess.run([py, "-c", (
        "import importlib.resources as r, ember, sys\n"
        "assert 'numpy' not in sys.modules\n"
        "print(ember.__file__)\n"
        "names = [p.name for p in r.files('ember.shaders').iterdir()]\n"
        "print(sum(n.endswith('.wgsl') for n in names))\n"
        "print(r.files('ember.web').joinpath('static', 'index.html').is_file())\n")],
        capture_output=True, text=True, cwd=str(tmp_path), timeout=300)
    assert check.returncode == 0, check.stderr
    location, count, has_index = check.stdout.split()
    assert str(env) in location, "ember was imported from outside the fresh venv"
    assert int(count) == len(glob.glob(os.path.join(ROOT, "shaders", "*.wgsl")))
    assert has_index == "True"
    # With numpy from the package index (or pip's cache), the CPU device works.
    got = subprocess.run(pip + ["install", "numpy"], capture_output=True, text=True, timeout=600)
    if got.returncode != 0:
        missing("numpy from the package index", got.stderr[-500:])
    run = subprocess.run([py, "-c", "import ember; print((ember.ones(2, 3) * 2).sum().item())"],
                         capture_output=True, text=True, cwd=str(tmp_path), timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "12.0"
