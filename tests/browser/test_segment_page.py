"""The segmentation page (segment.html): a tiny random SAM picked with the page's file
picker and an image picked with its image picker, run on the page's WebGPU device
(SwiftShader) with no numpy, gives native ember's masks and IoU scores on the CPU for the
same image and points; a click on the canvas is a prompt; the image is embedded once;
a browser without WebGPU is told so.

Tolerance: IoU scores within 1e-3 (the wgpu parity bound of the SAM model tests). Masks
are thresholded logits, so float rounding between WGSL and numpy can flip a pixel whose
logit is ~0: each mask may differ from native ember's in at most 4 of its 10,800 pixels,
and only where native ember's upsampled logit is within 1e-3 of the threshold (a pixel
the 1e-3 parity bound cannot decide); any other difference fails."""
import base64
import json
import os

import numpy as np
import pytest

from demo_pages import open_demo_page, assert_explains_missing_webgpu
from helpers import missing, require
from sam_page_fixtures import native_segment, sample_image, save_tiny_sam

MAX_FLIPPED = 4          # pixels per mask
BOUNDARY_LOGIT = 1e-3    # a flipped pixel's native logit must be this close to 0
IOU_TOL = 1e-3


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    pil = require("PIL.Image")
    root = tmp_path_factory.mktemp("segment-page")
    model_dir = save_tiny_sam(root / "tiny-sam")
    rgb = sample_image()
    png = root / "image.png"
    pil.fromarray(rgb).save(png)
    flipped = np.ascontiguousarray(rgb[:, ::-1])
    png2 = root / "flipped.png"
    pil.fromarray(flipped).save(png2)
    return {"model_dir": model_dir, "png": png, "rgb": rgb, "png2": png2, "rgb2": flipped}


@pytest.fixture(scope="module")
def sam1024_dir(tmp_path_factory):
    """A tiny random SAM with SamProcessor's own 1024 input (one encoder layer, windows of
    8), which ember's native pipeline (ember.vision.sam_predict) runs as it is."""
    from sam_torch_adapter import tiny_sam
    path = tmp_path_factory.mktemp("segment-page-1024") / "tiny-sam-1024"
    tiny_sam(seed=2, pe_scale=1.0).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def native_model(files):
    import ember
    from ember.models.sam import SamModel
    return SamModel.from_pretrained(files["model_dir"], device=ember.Device.cpu())


def _wait_idle(page):
    page.wait_for_function("() => document.getElementById('status').dataset.state !== 'busy'")
    return page.eval_on_selector("#status", "e => [e.dataset.state, e.textContent]")


@pytest.fixture(scope="module")
def segment_page(chromium, server_url, files):
    with open_demo_page(chromium, server_url + "segment.html", 900, "segmentation") as page:
        model_dir = files["model_dir"]

        def pick():
            p = page.page
            p.set_input_files("#model-files", [str(model_dir / "model.safetensors"),
                                               str(model_dir / "config.json")])
            model_state = _wait_idle(p)
            p.set_input_files("#image-file", str(files["png"]))
            return model_state, _wait_idle(p)
        model_state, image_state = page.do(pick)
        assert model_state[0] == "ready", model_state
        assert image_state[0] == "done", image_state
        yield page


def _masks(out):
    h, w = out["height"], out["width"]
    return np.stack([np.frombuffer(base64.b64decode(m), np.uint8).reshape(h, w)
                     for m in out["masks"]]).astype(bool)


def _assert_matches_native(out, native_model, rgb):
    masks, scores, logits = native_segment(native_model, rgb, out["points"])
    np.testing.assert_allclose(out["scores"], scores, rtol=0, atol=IOU_TOL)
    got = _masks(out)
    assert got.shape == masks.shape
    for i in range(len(masks)):
        flipped = np.argwhere(got[i] != masks[i])
        assert len(flipped) <= MAX_FLIPPED, f"mask {i}: {len(flipped)} pixels differ"
        for y, x in flipped:
            assert abs(logits[i, y, x]) < BOUNDARY_LOGIT, (i, y, x, logits[i, y, x])
    worst = np.abs(np.asarray(out["scores"]) - scores).max()
    print(f"\n[segment page] {len(out['points'])} points: IoU max |page - native| {worst:.2e}, "
          f"pixels differing per mask {[int((got[i] != masks[i]).sum()) for i in range(len(masks))]}")
    return masks


def test_page_decodes_the_image_as_pillow(segment_page, files):
    rgba = np.frombuffer(base64.b64decode(segment_page.evaluate("() => window.imagePixels()")),
                         np.uint8).reshape(*files["rgb"].shape[:2], 4)
    np.testing.assert_array_equal(rgba[..., :3], files["rgb"])
    assert (rgba[..., 3] == 255).all()
    image = segment_page.evaluate("() => window.lastImage")
    assert image["resized"] == [48, 64]   # 90 x 120 with its long side scaled to 64


def test_page_masks_and_scores_equal_native_ember(segment_page, native_model, files,
                                                  artifacts_dir):
    points = [[42.0, 40.0, 1], [100.0, 70.0, 0]]   # on the disc; off it (negative)
    for prompt in (points[:1], points):
        out = segment_page.evaluate("(pts) => window.segmentPoints(pts)", prompt)
        assert out["points"] == prompt
        masks = _assert_matches_native(out, native_model, files["rgb"])
        # The masks say something: neither empty nor the whole image.
        assert any(0.02 < m.mean() < 0.98 for m in masks)
        assert set(out["ms"]) == {"decoder", "postprocess"}
    segment_page.do(lambda: segment_page.page.screenshot(
        path=os.path.join(artifacts_dir, "segment-demo.png"), full_page=True))


def test_clicks_on_the_canvas_are_prompts(segment_page, native_model, files):
    page = segment_page.page
    segment_page.do(page.click, "#clear-points")

    def click(x, y, shift):
        page.click("#view", position={"x": x, "y": y}, modifiers=["Shift"] if shift else [])
        state = _wait_idle(page)
        return state, page.evaluate("() => window.lastSegment")
    state, first = segment_page.do(click, 30, 50, False)
    assert state[0] == "done", state
    assert len(first["points"]) == 1
    x, y, label = first["points"][0]
    assert label == 1 and abs(x - 30) <= 1 and abs(y - 50) <= 1   # the canvas is not scaled
    _assert_matches_native(first, native_model, files["rgb"])
    state, second = segment_page.do(click, 95, 20, True)
    assert state[0] == "done", state
    assert [p[2] for p in second["points"]] == [1, 0]
    assert second["points"][0] == first["points"][0]
    _assert_matches_native(second, native_model, files["rgb"])
    assert not np.array_equal(_masks(first), _masks(second))   # the negative point counted
    # What the visitor sees: the scores and the timings of encoder and decoder.
    shown = segment_page.do(page.inner_text, "#timings")
    assert "encoder" in shown and "decoder" in shown and " ms" in shown
    scores = segment_page.do(page.inner_text, "#scores")
    assert f"{max(second['scores']):.3f}" in scores


def test_the_embedding_is_computed_once_per_image(segment_page, native_model, files):
    segment_page.run("""
from ember.web import page_sam
_model = page_sam._state["model"]
_embedded = []
_encode = type(_model).image_embeddings
_model.image_embeddings = lambda pixels: (_embedded.append(1), _encode(_model, pixels))[1]
""")
    try:
        for pts in ([[10, 10, 1]], [[10, 10, 1], [60, 60, 1]]):
            segment_page.evaluate("(pts) => window.segmentPoints(pts)", pts)
        assert segment_page.run("len(_embedded)") == 0
        page = segment_page.page

        def pick(png):
            page.set_input_files("#image-file", str(png))
            return _wait_idle(page)
        assert segment_page.do(pick, files["png2"])[0] == "done"
        assert segment_page.run("len(_embedded)") == 1
        # The prompts now answer for the new image (the mirrored one), not the old one.
        out = segment_page.evaluate("(pts) => window.segmentPoints(pts)", [[30, 50, 1]])
        _assert_matches_native(out, native_model, files["rgb2"])
        # The same file picked again is embedded again (the picker forgets its value).
        assert segment_page.do(pick, files["png2"])[0] == "done"
        assert segment_page.run("len(_embedded)") == 2
        assert segment_page.do(pick, files["png"])[0] == "done"
    finally:
        segment_page.run("del _model.image_embeddings")


def test_bad_prompts_are_refused_with_a_message(segment_page):
    for pts, message in (([[500, 10, 1]], "outside the 120x90 image"),
                         ([], "empty point list")):
        failed = segment_page.evaluate(
            "(pts) => window.segmentPoints(pts).then(() => null, (e) => e.message)", pts)
        assert failed is not None and message in failed
        status = segment_page.do(segment_page.page.inner_text, "#status")
        assert message in status
    # The page still answers afterwards.
    out = segment_page.evaluate("(pts) => window.segmentPoints(pts)", [[20, 20, 1]])
    assert len(out["scores"]) == 3


def test_a_model_folder_can_be_picked(segment_page, native_model, files):
    """The folder picker (config.json + model.safetensors): the model is loaded again and
    the picked image embedded again by it."""
    page = segment_page.page

    def pick_folder():
        page.set_input_files("#model-dir", str(files["model_dir"]))
        return _wait_idle(page)
    state = segment_page.do(pick_folder)
    assert state[0] == "done", state   # the model, then the image embedded by it
    assert segment_page.evaluate("() => window.lastModel.image_size") == 64
    out = segment_page.evaluate("(pts) => window.segmentPoints(pts)", [[70, 30, 1]])
    _assert_matches_native(out, native_model, files["rgb"])


def test_a_1024_model_equals_native_embers_pipeline(segment_page, sam1024_dir, files):
    """With a model at SamProcessor's default 1024 input, the page's masks and scores
    equal native ember's own pipeline (ember.vision.sam_predict.embed_image + predict,
    best first) on the cpu, to the same tolerance."""
    import ember
    from ember.models.sam import SamModel
    from ember.vision.sam_predict import embed_image, predict
    page = segment_page.page

    def pick():
        page.set_input_files("#model-files", [str(sam1024_dir / "model.safetensors"),
                                              str(sam1024_dir / "config.json")])
        return _wait_idle(page)
    state = segment_page.do(pick)
    assert state[0] == "done", state
    assert segment_page.evaluate("() => window.lastImage.resized") == [768, 1024]
    points = [[30.0, 50.0, 1], [95.0, 20.0, 0]]
    out = segment_page.evaluate("(pts) => window.segmentPoints(pts)", points)
    model = SamModel.from_pretrained(sam1024_dir, device=ember.Device.cpu())
    native = predict(model, embed_image(model, files["rgb"]), [p[:2] for p in points],
                     [p[2] for p in points], multimask_output=True)
    order = np.argsort(-np.asarray(out["scores"]), kind="stable")
    got = _masks(out)[order]
    np.testing.assert_allclose(np.asarray(out["scores"])[order], [m.score for m in native],
                               rtol=0, atol=IOU_TOL)
    flipped = [int((g != m.mask).sum()) for g, m in zip(got, native, strict=True)]
    print(f"\n[segment page, 1024 input] IoU {[round(m.score, 4) for m in native]}, "
          f"pixels differing per mask {flipped}, ms {out['ms']}, image ms "
          f"{segment_page.evaluate('() => window.lastImage.ms')}")
    assert max(flipped) <= MAX_FLIPPED
    assert any(0.02 < m.mask.mean() < 0.98 for m in native)


def test_the_bundled_sam_loads_and_segments(segment_page, bundle_dir, files):
    """The bundle's own SAM (build_scripts/make_tiny_sam.py: random weights, or the
    user's EMBER_SAM_MODEL), listed with kind "sam" in the manifest, is offered by the
    page's bundle picker, loads, embeds the picked image and segments it as native
    ember does with the bundle's files."""
    import ember
    from ember.models.sam import SamModel
    models = json.loads((bundle_dir / "manifest.json").read_text())["models"]
    sams = [name for name, entry in models.items() if entry.get("kind") == "sam"]
    if not sams:
        missing("a SAM in the bundle", "build_web makes it with torch and transformers")
    name = sams[0]
    page = segment_page.page
    offered = segment_page.do(page.eval_on_selector_all, "#bundle-model option",
                              "options => options.map((o) => o.value)")
    assert name in offered

    def choose():
        page.select_option("#bundle-model", name)
        return _wait_idle(page)
    state = segment_page.do(choose)
    assert state[0] == "done", state   # the model, then the picked image embedded by it
    assert segment_page.evaluate("() => window.lastModel.model") == name
    out = segment_page.evaluate("(pts) => window.segmentPoints(pts)", [[42.0, 40.0, 1]])
    model = SamModel.from_pretrained(bundle_dir / "models" / name, device=ember.Device.cpu())
    masks = _assert_matches_native(out, model, files["rgb"])
    assert any(0.02 < m.mean() < 0.98 for m in masks)


def test_a_browser_without_webgpu_gets_a_clear_message(chromium, server_url):
    assert_explains_missing_webgpu(chromium, server_url + "segment.html", hidden=("#controls",))


def test_the_bundle_ships_the_page(bundle_dir):
    import zipfile
    for name in ("segment.html", "segment.js", "segment.css"):
        assert (bundle_dir / name).is_file(), name
    assert 'href="segment.html"' in (bundle_dir / "index.html").read_text()
    wheel = bundle_dir / json.loads((bundle_dir / "manifest.json").read_text())["wheel"]
    names = zipfile.ZipFile(wheel).namelist()
    assert {"ember/web/page_sam.py", "ember/web/page_sam_resize.py"} <= set(names)
