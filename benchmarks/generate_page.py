"""The generation page with SmolLM2-135M-Instruct (its Q4_1 GGUF, weights quantized on the
device): page open -> model ready, and the prompt and decode tokens/s of one chat turn
as the page streams it. Figures only, not pass/fail.

    .venv/bin/python benchmarks/generate_page.py [--tokens 8] [--rounds 1]

The page is web/static/generate.html served by ember's own server in Debian's Chromium
with --enable-unsafe-webgpu (SwiftShader: a CPU rasterizer, so expect a few tokens per
minute on a busy 2-core machine). Each round sends the same question, greedy, in a new
chat. "prompt" is the templated prompt's tokens over the time to the first token (the
prompt's pass and one step); "decode" counts the tokens after the first over the time
after it.
"""

import argparse
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from browser_common import CHROMIUM, BrowserUnavailable, EmberPage, open_browser

QUESTION = "What is the capital of France?"
MODEL = "smollm2-135m-instruct"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        try:
            session = stack.enter_context(open_browser())
        except BrowserUnavailable as exc:
            print(f"generate_page: cannot run: {exc}")
            return 1
        manifest = os.path.join(str(session.bundle), "models", MODEL, "page-model.json")
        if not os.path.isfile(manifest):
            print(f"generate_page: the bundle has no {MODEL} (build_web fetches it)")
            return 1
        browser, url = session.browser, session.url
        page = EmberPage(browser.new_page(), url + "generate.html")
        t0 = time.perf_counter()
        page.boot()
        booted = time.perf_counter() - t0
        loaded = page.evaluate("() => window.demoReady")
        ready = time.perf_counter() - t0
        adapter = page.info["adapter"]
        s = loaded["seconds"]
        print(
            f"browser: {CHROMIUM} ({browser.version}), adapter "
            f"{adapter.get('description') or adapter.get('vendor')} "
            f"[{adapter.get('architecture')}]"
        )
        print(
            f"model {MODEL}: {loaded['parameters'] / 1e6:.1f}M parameters, "
            f"{loaded['bytes'] / 1e6:.1f} MB in the bundle"
        )
        print(
            f"page open -> worker ready {booted:.1f} s -> model ready {ready:.1f} s "
            f"(GGUF download {s['download']:.1f} s, quantized upload {s['load']:.1f} s, "
            f"warm-up {s['warm_up']:.1f} s)"
        )
        runs = []
        for _ in range(args.rounds):
            page.evaluate("() => document.getElementById('clear').click()")
            runs.append(
                page.evaluate(
                    "(a) => window.sendChat(a)",
                    {"text": QUESTION, "max_new_tokens": args.tokens},
                )
            )

    print(f"\none chat turn, greedy, max {args.tokens} new tokens, best of {args.rounds}")
    for r in runs:
        n_prompt, n_new = len(r["prompt_ids"]), len(r["token_ids"])
        first = r["first_delta_seconds"]
        decode = r["decode_tokens_per_second"]
        print(
            f"prompt {n_prompt} tokens in {first:.1f} s: {n_prompt / first:.2f} tokens/s; "
            f"decode {n_new - 1} tokens: {decode:.3f} tokens/s; answer {r['text']!r}"
        )
    best_prompt = max(len(r["prompt_ids"]) / r["first_delta_seconds"] for r in runs)
    best_decode = max(r["decode_tokens_per_second"] for r in runs)
    print(
        f"page (Pyodide + SwiftShader): prompt {best_prompt:.2f} tokens/s, "
        f"decode {best_decode:.3f} tokens/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
