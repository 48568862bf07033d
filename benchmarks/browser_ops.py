"""ember in the browser: time from page open to ready, and the per-op cost in the page
next to native wgpu-py for the same ops, as ratios. Figures, not pass/fail.

    .venv/bin/python benchmarks/browser_ops.py [--repeats 200]

The page is the playground served by ember's own server, in Debian's Chromium with
--enable-unsafe-webgpu (SwiftShader); native is wgpu-py on whatever adapter opens here
(lavapipe on a machine without a GPU). Both run the same snippet text:
- "record": the Python + driver cost of recording one op (no waiting for the GPU);
- "batched": N ops recorded back to back and one readback at the end (dispatch overhead
  plus GPU time, amortised), per op;
- "round trip": one op and its readback, N times, per op (latency of a result).
"""

import argparse
import ast
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from browser_common import CHROMIUM, BrowserUnavailable, EmberPage, open_browser

SETUP = """
import time
import ember
a = ember.rand(1024, device=dev)
b = ember.rand(1024, device=dev)
m = ember.rand(64, 64, device=dev)
x = ember.rand(64, 256, device=dev)
w = ember.rand(256, device=dev)
"""

OPS = {
    "add 1024": "a + b",
    "exp 1024": "a.exp()",
    "matmul 64x64": "m @ m",
    "sum rows 64x256": "x.sum(-1)",
    "softmax 64x256": "x.softmax(-1)",
    "layer_norm 64x256": "x.layer_norm(w, w)",
}


def timing_snippet(expr, repeats):
    return f"""
_r = ({expr}); _r.tolist()          # warm: pipeline compiled, buffers pooled
_t0 = time.perf_counter()
for _ in range({repeats}):
    _r = ({expr})
_record = (time.perf_counter() - _t0) / {repeats}
_r.tolist()
_batched = (time.perf_counter() - _t0) / {repeats}
_t0 = time.perf_counter()
for _ in range({max(1, repeats // 4)}):
    ({expr}).tolist()
_round = (time.perf_counter() - _t0) / {max(1, repeats // 4)}
[_record, _batched, _round]
"""


def run_native(code, namespace):
    """Run a snippet here; the value of its last line when that is an expression."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<bench>", "exec"), namespace)
    if last is not None:
        return eval(compile(ast.Expression(last.value), "<bench>", "eval"), namespace)


SENTENCES = [
    f"Sentence number {i} talks about {topic} in a few more words than needed."
    for i, topic in enumerate(
        [
            "cats",
            "the weather",
            "stock markets",
            "guitars",
            "compilers",
            "football",
            "bread",
            "rivers",
        ]
        * 4
    )
]


def embed_figures(browser, url, native):
    """The embedding demo: open -> model ready, and sentences/s in the page vs native."""
    import json

    from ember.pipelines.sentence_embedder import SentenceEmbedder

    demo = EmberPage(browser.new_page(), url + "embed.html")
    t0 = time.perf_counter()
    demo.boot()
    demo.evaluate("() => window.demoReady")
    ready = time.perf_counter() - t0
    texts = json.dumps(json.dumps(SENTENCES))
    demo.run(f"from ember.web import demo_embed\ndemo_embed.embed({texts})")  # warm
    page_s = json.loads(demo.run(f"demo_embed.embed({texts})"))["seconds"]
    print(f"\nembedding demo (all-MiniLM-L6-v2): page open -> model ready {ready:.2f} s")
    line = (
        f"  {len(SENTENCES)} sentences + similarity: page {page_s:.2f} s "
        f"({len(SENTENCES) / page_s:.1f} sentences/s)"
    )
    if native is not None:
        from ember.hub import default_model_dir

        emb = SentenceEmbedder.from_pretrained(default_model_dir(), device=native)
        emb.similarity(emb.encode(SENTENCES)).tolist()  # warm
        t0 = time.perf_counter()
        emb.similarity(emb.encode(SENTENCES)).tolist()
        native_s = time.perf_counter() - t0
        line += (
            f"; native wgpu {native_s:.2f} s ({len(SENTENCES) / native_s:.1f} sentences/s);"
            f" ratio page / native {page_s / native_s:.2f}"
        )
    print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()

    import ember

    try:
        native = ember.Device.wgpu()
        native_name = native.backend.adapter_info.get("device") or "wgpu"
    except ember.DeviceError as exc:
        native, native_name = None, f"unavailable ({exc})"

    with contextlib.ExitStack() as stack:
        try:
            session = stack.enter_context(open_browser())
        except BrowserUnavailable as exc:
            print(f"browser_ops: cannot run: {exc}")
            return 1
        browser, url = session.browser, session.url
        page = EmberPage(browser.new_page(), url)
        t0 = time.perf_counter()
        page.boot()
        open_to_ready = time.perf_counter() - t0
        info = page.info
        t = info["timings_ms"]
        adapter = info["adapter"]
        print(
            f"browser: {CHROMIUM} ({browser.version}), adapter "
            f"{adapter.get('description') or adapter.get('vendor')} "
            f"[{adapter.get('architecture')}]; native: {native_name}"
        )
        print(
            f"page open -> ready: {open_to_ready:.2f} s  (in the worker: Pyodide "
            f"{t['pyodide'] / 1000:.2f} s, ember wheel + import {t['ember_import'] / 1000:.2f} s, "
            f"device {t['device'] / 1000:.2f} s; total {t['total'] / 1000:.2f} s)"
        )

        t0 = time.perf_counter()
        page.boot()  # the same page again: files revalidate (304) and compiled wasm is cached
        reload_to_ready = time.perf_counter() - t0
        t = page.info["timings_ms"]
        print(
            f"page reload -> ready: {reload_to_ready:.2f} s  (Pyodide {t['pyodide'] / 1000:.2f} s, "
            f"ember {t['ember_import'] / 1000:.2f} s, device {t['device'] / 1000:.2f} s)"
        )

        page.run(SETUP)
        ns = {"ember": ember, "dev": native}
        if native is not None:
            run_native(SETUP, ns)
        print(f"\nper-op time, {args.repeats} repeats, in µs; ratio = page / native")
        print("  record: Python + driver cost of recording one op (no GPU wait)")
        print("  batched: N ops then one readback, per op;  round trip: op + readback, per op")
        header = "".join(
            f"{col:>{w}}"
            for col, w in (
                ("record", 9),
                ("native", 8),
                ("ratio", 7),
                ("batched", 10),
                ("native", 8),
                ("ratio", 7),
                ("round trip", 12),
                ("native", 8),
                ("ratio", 7),
            )
        )
        print(f"{'op':<20}{header}")
        for name, expr in OPS.items():
            code = timing_snippet(expr, args.repeats)
            page_t = page.run(code)
            native_t = run_native(code, ns) if native is not None else [float("nan")] * 3
            cells = ""
            for p_, n_, w in zip(page_t, native_t, (9, 10, 12), strict=True):
                cells += f"{p_ * 1e6:>{w}.1f}{n_ * 1e6:>8.1f}{p_ / n_:>7.2f}"
            print(f"{name:<20}{cells}")
        if page.info["manifest"].get("models", {}).get("all-MiniLM-L6-v2"):
            embed_figures(browser, url, native)
    return 0


if __name__ == "__main__":
    sys.exit(main())
