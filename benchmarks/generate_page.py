"""The text-generation demo page: page open -> model ready, and tokens/s streamed in the
page next to native ember (wgpu-py, and the CPU) for the same model files, as ratios.
Figures, not pass/fail.

    .venv/bin/python benchmarks/generate_page.py [--tokens 32] [--rounds 3]

The page is web/static/generate.html served by ember's own server in Debian's Chromium
with --enable-unsafe-webgpu (SwiftShader); native wgpu is whatever adapter opens here
(lavapipe on a machine without a GPU). Each engine generates greedily from the same
prompt; the best of `rounds` runs is kept. "decode" counts the tokens after the first
(whose time also holds the prompt's pass), over the time after the first token.
"""

import argparse
import asyncio
import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from browser_common import CHROMIUM, BrowserUnavailable, EmberPage, open_browser

PROMPT = "Once upon a time"
MODEL = "tiny-llama-random"


def native_figures(model_dir, device, tokens, rounds, use_async):
    """(best total tokens/s, best decode tokens/s, token ids) for ember on `device`."""
    from ember.generation import TextGeneration
    from ember.models.llama import LlamaForCausalLM
    from ember.tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(model_dir, device=device)

    def one():
        gen = TextGeneration(model, tokenizer, PROMPT, max_new_tokens=tokens, stop_token_ids=())
        t0 = time.perf_counter()
        first = None
        if use_async:

            async def drain():
                nonlocal first
                async for _ in gen:
                    first = first or time.perf_counter() - t0

            asyncio.run(drain())
        else:
            for _ in gen:
                first = first or time.perf_counter() - t0
        total = time.perf_counter() - t0
        n = len(gen.token_ids)
        return n / total, (n - 1) / (total - first), gen.token_ids

    one()  # warm: kernels compiled, buffers pooled
    runs = [one() for _ in range(rounds)]
    return max(r[0] for r in runs), max(r[1] for r in runs), runs[0][2]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import ember

    with contextlib.ExitStack() as stack:
        try:
            session = stack.enter_context(open_browser())
        except BrowserUnavailable as exc:
            print(f"generate_page: cannot run: {exc}")
            return 1
        model_dir = os.path.join(str(session.bundle), "models", MODEL)
        if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
            print(
                f"generate_page: the bundle has no {MODEL} "
                "(needs torch + transformers at build time)"
            )
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
        print(f"model {MODEL}: {loaded['parameters']} parameters, {loaded['bytes'] / 1e6:.2f} MB")
        print(
            f"page open -> worker ready {booted:.2f} s -> model ready {ready:.2f} s "
            f"(model download {s['download']:.2f} s, load onto the device {s['load']:.2f} s, "
            f"warm-up {s['warm_up']:.2f} s)"
        )
        runs = [
            page.evaluate(
                "(a) => window.generateText(a)",
                {"prompt": PROMPT, "max_new_tokens": args.tokens, "ignore_eos": True},
            )
            for _ in range(args.rounds + 1)
        ][1:]  # the first run warms up
        page_total = max(r["tokens_per_second"] for r in runs)
        page_decode = max(r["decode_tokens_per_second"] for r in runs)
        page_ids = runs[0]["token_ids"]
        deltas = runs[0]["deltas"]

    print(
        f"\n{args.tokens} new tokens, greedy, best of {args.rounds}; tokens/s "
        f"(ratio = page / engine)"
    )
    print(f"{'engine':<34}{'total':>9}{'decode':>9}{'ratio':>8}  same tokens")
    print(
        f"{'page (Pyodide + SwiftShader)':<34}{page_total:>9.1f}{page_decode:>9.1f}{'':>8}  "
        f"({deltas} deltas streamed)"
    )
    engines = []
    try:
        engines.append(("native wgpu, sync readback", ember.Device.wgpu(), False))
        engines.append(("native wgpu, async readback", ember.Device.wgpu(), True))
    except ember.DeviceError as exc:
        print(f"native wgpu unavailable: {exc}")
    engines.append(("native cpu (numpy)", ember.Device.cpu(), False))
    for name, device, use_async in engines:
        total, decode, ids = native_figures(model_dir, device, args.tokens, args.rounds, use_async)
        print(
            f"{name:<34}{total:>9.1f}{decode:>9.1f}{page_decode / decode:>8.2f}  "
            f"{'yes' if ids == page_ids else 'NO'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
