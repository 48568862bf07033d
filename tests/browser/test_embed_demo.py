"""The sentence-similarity demo page: all-MiniLM-L6-v2 fetched from the bundle and run on
the page's WebGPU device gives the same similarities as the native backend."""
import os

import numpy as np
import pytest

from minilm_fixtures import minilm_dir  # noqa: F401 (a fixture)
from demo_pages import open_demo_page
from page_harness import load_build_web

TEXTS = ["A man is playing a guitar.", "Someone plays an instrument on stage.",
         "The cat sleeps on the sofa.", "Stock markets fell sharply today."]


@pytest.fixture(scope="module")
def embed_page(chromium, server_url, minilm_dir):
    load_build_web().ensure_bundle()   # the model arrived after the bundle was built?
    with open_demo_page(chromium, server_url + "embed.html", 900, "embedding") as page:
        yield page


def test_demo_matches_native_similarities(embed_page, minilm_dir, reference_device, artifacts_dir):
    from ember.pipelines.sentence_embedder import SentenceEmbedder
    native = SentenceEmbedder.from_pretrained(minilm_dir, device=reference_device)
    expected = native.similarity(native.encode(TEXTS)).tolist()

    def type_and_compare(page):
        page.fill("#texts", "\n".join(TEXTS))
        page.click("#embed")
        page.wait_for_function("() => /sentences in/.test(document.getElementById('status').textContent)")
        return page.evaluate("() => window.lastSimilarity")
    out = embed_page.do(type_and_compare, embed_page.page)
    np.testing.assert_allclose(np.asarray(out["similarity"]), np.asarray(expected),
                               rtol=1e-4, atol=1e-4)
    # The related pair is the closest, as the model should have it.
    sims = np.asarray(out["similarity"])
    assert sims[0, 1] > max(sims[0, 2], sims[0, 3])
    cells = embed_page.do(lambda: embed_page.page.locator("#matrix td").count())
    assert cells == len(TEXTS) ** 2
    embed_page.do(lambda: embed_page.page.screenshot(
        path=os.path.join(artifacts_dir, "embed-demo.png"), full_page=True))


def test_demo_reported_download_progress(embed_page):
    log = embed_page.evaluate("() => window.ember.progressLog")
    model = [m["fraction"] for m in log if m["stage"] == "model"]
    assert len(model) >= 3
    assert model == sorted(model)
    assert any("MB)" in m["text"] for m in log if m["stage"] == "model")
    assert log[-1]["stage"] == "ready"
