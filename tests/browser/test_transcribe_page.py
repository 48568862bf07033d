"""The transcription page (transcribe.html) with the bundle's real Whisper tiny.en on the
page's WebGPU device (SwiftShader), no numpy: jfk.wav picked with the page's file input
gives native ember's transcript, segment by segment as each one is decoded; an
undecodable file and a denied microphone are explained in the page; a recording from
Chromium's fake microphone is transcribed; a browser without WebGPU is told so.

What is compared with native ember (WhisperTranscriber on the CPU, greedy without
temperature fallback, timestamps on: the options the page uses): every segment's token
ids, its text and its start and end times, exactly. The fake microphone plays beeps, so
only that a recording of the right length went through the model is checked, not its
text.

One jfk.wav transcription serves every assertion about it (SwiftShader needs seconds for
one 30 s window of the encoder)."""
import json
import os
import re

import pytest

from demo_pages import open_demo_page, assert_explains_missing_webgpu
from packaged_fixtures import jfk_wav, whisper_tiny_en_dir  # noqa: F401

MODEL = "whisper-tiny.en"
RECORD_SECONDS = 1.5


@pytest.fixture(scope="module")
def page(chromium, server_url, bundle_dir):
    manifest = json.loads(open(os.path.join(str(bundle_dir), "manifest.json")).read())
    if MODEL not in manifest.get("models", {}):
        pytest.fail(f"the bundle has no {MODEL}: build_web fetches it with ember.packaged "
                    f"(see the build's output for why it could not)")
    with open_demo_page(chromium, server_url + "transcribe.html", 900, "transcription") as page:
        yield page


@pytest.fixture(scope="module")
def native_segments(whisper_tiny_en_dir, jfk_wav):  # noqa: F811
    import ember
    from ember.models.whisper_transcriber import WhisperTranscriber
    t = WhisperTranscriber.from_dir(whisper_tiny_en_dir, device=ember.Device.cpu())
    return list(t.transcribe(jfk_wav, fallback=False))


def _run(page, start):
    """Start a run with `start(playwright page)` and wait for window.lastRun's answer."""
    def go():
        page.page.evaluate("() => { window.lastRun = null; }")
        start(page.page)
        page.page.wait_for_function("() => window.lastRun !== null")
        return page.page.evaluate("() => window.lastRun")
    return page.do(go)


@pytest.fixture(scope="module")
def jfk_run(page, jfk_wav):  # noqa: F811
    return _run(page, lambda p: p.set_input_files("#file", jfk_wav))


def test_the_model_loads_from_the_bundle_with_progress_in_megabytes(page, whisper_tiny_en_dir):  # noqa: F811
    from ember.io.ctranslate2 import CTranslate2File, whisper_hf_tensors
    with CTranslate2File(os.path.join(whisper_tiny_en_dir, "model.bin")) as f:
        weights = sum(v.size for v in whisper_hf_tensors(f).values())
    log = page.evaluate("() => window.ember.progressLog")
    downloads = [m["text"] for m in log if m["stage"] == "model" and "MB)" in m["text"]]
    assert len(downloads) >= 2, downloads
    assert downloads[-1].endswith("(75.5 / 75.5 MB)"), downloads[-1]   # the whole model.bin
    loaded = page.evaluate("() => window.demoLoaded")
    assert loaded["model"] == MODEL and loaded["mel_bins"] == 80 and loaded["layers"] == [4, 4]
    assert loaded["multilingual"] is False
    assert loaded["dtype"] == "f32"     # SwiftShader has no shader-f16: widened, as natively
    assert loaded["parameters"] == weights and 37e6 < weights < 38e6, (loaded["parameters"], weights)
    print(f"\n[transcribe page] page open -> model ready {loaded['page_ready_ms'] / 1000:.1f} s "
          f"(boot {loaded['boot_ms']['total'] / 1000:.1f} s; download "
          f"{loaded['seconds']['download']:.1f} s, load {loaded['seconds']['load']:.1f} s)")


@pytest.mark.acceptance
def test_jfk_gives_native_embers_segments(jfk_run, native_segments):
    assert "error" not in jfk_run, jfk_run
    got = [(s["tokens"], s["text"], s["start"], s["end"]) for s in jfk_run["segments"]]
    want = [(s.tokens, s.text, s.start, s.end) for s in native_segments]
    assert got == want
    words = re.sub(r"[^a-z ]", "", jfk_run["text"].lower()).split()
    assert words == ("and so my fellow americans ask not what your country can do for you "
                     "ask what you can do for your country").split()
    assert abs(jfk_run["audio_seconds"] - 11.0) < 0.01
    print(f"\n[transcribe page] jfk.wav ({jfk_run['audio_seconds']:.1f} s): "
          f"{jfk_run['seconds']:.1f} s in the worker, first segment after "
          f"{jfk_run['first_segment_seconds']:.1f} s, real-time factor "
          f"{jfk_run['real_time_factor']:.2f}")


@pytest.mark.acceptance
def test_segments_appear_one_by_one_with_their_times(jfk_run, page):
    events = jfk_run["page_events"]
    assert [e["text"] for e in events] == [s["text"] for s in jfk_run["segments"]]
    assert len(events) >= 2
    # the first segment reached the page while the model was still decoding the rest
    assert events[0]["at_ms"] < events[-1]["at_ms"] <= jfk_run["page_ms"]
    assert events[0]["seconds"] < jfk_run["seconds"]
    rows = page.evaluate("() => [...document.querySelectorAll('#segments li')].map((li) => "
                         "[li.querySelector('.time').textContent, li.querySelector('.text').textContent])")
    first = jfk_run["segments"][0]
    assert len(rows) == len(events)
    assert rows[0] == [f"0:{first['start']:05.2f} → 0:{first['end']:05.2f}", first["text"].strip()]
    assert page.evaluate("() => document.getElementById('status').dataset.state") == "done"


def test_an_undecodable_file_is_explained_in_the_page(page):
    fake = {"name": "notes.wav", "mimeType": "audio/wav", "buffer": b"these are not audio bytes " * 40}
    answer = _run(page, lambda p: p.set_input_files("#file", fake))
    assert answer["error"].startswith("notes.wav could not be decoded as audio"), answer
    shown = page.evaluate("() => [document.getElementById('error').hidden, "
                          "document.getElementById('error').textContent]")
    assert shown == [False, answer["error"]]
    assert not page.evaluate("() => document.getElementById('file').disabled")   # usable again


def test_a_denied_microphone_is_explained_in_the_page(page):
    page.do(lambda: page.page.context.clear_permissions())
    answer = _run(page, lambda p: p.click("#record"))
    assert answer["error"].startswith("Microphone permission was denied"), answer
    assert page.evaluate("() => document.getElementById('error').textContent") == answer["error"]
    assert not page.evaluate("() => document.getElementById('record').disabled")


@pytest.mark.acceptance
def test_a_recording_from_the_microphone_is_transcribed(page, server_url):
    def record(p):
        p.context.grant_permissions(["microphone"], origin=server_url.rstrip("/"))
        p.click("#record")
        p.wait_for_function("() => document.getElementById('status').dataset.state === 'recording'")
        p.wait_for_timeout(RECORD_SECONDS * 1000)
        p.click("#stop-recording")
    answer = _run(page, record)
    assert "error" not in answer, answer
    assert answer["label"] == "the recording"
    # what was recorded reached the model: about as long as the recording ran
    assert RECORD_SECONDS - 0.3 < answer["audio_seconds"] < RECORD_SECONDS + 3, answer
    assert answer["seconds"] > 0 and isinstance(answer["segments"], list)
    assert [e["text"] for e in answer["page_events"]] == [s["text"] for s in answer["segments"]]
    print(f"\n[transcribe page] a {answer['audio_seconds']:.1f} s recording: "
          f"{len(answer['segments'])} segments in {answer['seconds']:.1f} s")


def test_a_browser_without_webgpu_gets_a_clear_message(chromium, server_url):
    assert_explains_missing_webgpu(chromium, server_url + "transcribe.html",
                                   hidden=("#loading", "#controls", "#output"))
