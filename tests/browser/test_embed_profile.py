"""The semantic-search page's "profile the next search" box: the search runs under ember's
profiler and the page shows its table (GPU kernels, then host ops, each longest first)."""
import os

import pytest

from minilm_fixtures import minilm_dir  # noqa: F401 (fixture)
from demo_pages import open_demo_page
from page_harness import load_build_web

QUERY = "a feline resting on furniture"
DOCUMENTS = ["A man is playing a guitar.", "The cat sleeps on the sofa.",
             "Heavy rain is expected this weekend."]
LAYERS = 6  # all-MiniLM-L6-v2


@pytest.fixture(scope="module")
def embed_page(chromium, server_url, minilm_dir):
    load_build_web().ensure_bundle()   # the model arrived after the bundle was built?
    with open_demo_page(chromium, server_url + "embed.html", 1400, "semantic search") as page:
        yield page


def search(page, profile):
    """One search with the profile box set to `profile`; (state, status, lastSearch)."""
    page.fill("#query", QUERY)
    page.fill("#texts", "\n".join(DOCUMENTS))
    page.set_checked("#profile", profile)
    page.click("#search")
    page.wait_for_function("() => document.getElementById('status').dataset.state !== 'busy'")
    return (page.eval_on_selector("#status", "e => e.dataset.state"),
            page.inner_text("#status"), page.evaluate("() => window.lastSearch"))


def table_rows(page):
    """The profile table on screen: [kind, name, calls, ms, %, us/call, bytes] per row."""
    return page.eval_on_selector_all(
        "#profile-table tbody tr",
        "rows => rows.map(tr => [...tr.cells].map(td => td.textContent))")


def timestamp_queries(embed_page):
    return embed_page.run(
        "from ember.web import demo_embed\n"
        "'timestamp-query' in demo_embed._loaded_embedder().device.backend.driver.features")


def test_profile_box_shows_the_kernel_table(embed_page, artifacts_dir):
    page = embed_page.page
    assert embed_page.do(page.is_hidden, "#profile-panel")   # nothing profiled yet
    state, status, out = embed_page.do(search, page, True)
    assert state == "done", status
    assert out["ranking"][0]["text"] == "The cat sleeps on the sofa."   # the search still works
    assert embed_page.do(page.is_visible, "#profile-table")
    assert not embed_page.do(page.is_checked, "#profile")   # only the next search is profiled
    rows = embed_page.do(table_rows, page)
    ops = [r for r in rows if r[0] == "host op"]
    kernels = [r for r in rows if r[0] == "GPU kernel"]
    assert len(ops) + len(kernels) == len(rows)
    # Host ops: the model's contract calls, with the bytes they moved.
    assert {r[1] for r in ops} >= {"linear", "layer_norm"}, sorted(r[1] for r in ops)
    assert all(int(r[2]) >= 1 and r[6] != "0 B" for r in ops if r[1] == "linear")
    profile = out["profile"]
    if not timestamp_queries(embed_page):
        assert kernels == [] and "no timestamp queries" in embed_page.do(
            page.inner_text, "#profile-summary")
        return
    # GPU kernels: one row per kernel, longest first; every row ran and took time.
    assert kernels, "the adapter has timestamp queries but the table shows no kernel"
    ms = [float(r[3]) for r in kernels]
    assert ms == sorted(ms, reverse=True)
    assert all(int(r[2]) >= 1 for r in kernels) and ms[0] > 0
    # Each of the 6 layers runs at least its q, k, v, output, and two FFN matmuls.
    assert sum(int(r[2]) for r in kernels) >= 6 * LAYERS
    # The times add up: the rows (shown to 3 decimals) sum to the kernels' total, which
    # lies within the GPU time of the run's submissions, itself within the search's time.
    kernel_ms = profile["kernel_ns"] / 1e6
    assert sum(ms) == pytest.approx(kernel_ms, abs=5e-4 * len(ms))
    assert 0 < profile["kernel_ns"] <= profile["gpu_ns"] <= out["seconds"] * 1e9
    summary = embed_page.do(page.inner_text, "#profile-summary")
    print(f"{len(kernels)} kernels, {len(ops)} host ops; {summary}; search {out['seconds']:.3f} s")
    embed_page.do(lambda: page.screenshot(path=os.path.join(artifacts_dir, "embed-profile.png"),
                                          full_page=True))
    assert f"{kernel_ms:.3f} ms" in summary
    # The next search (box unchecked) is not profiled and leaves the table as it was.
    state, status, again = embed_page.do(search, page, False)
    assert state == "done", status
    assert "profile" not in again
    assert embed_page.do(table_rows, page) == rows
