"""sam.py's page row: the segmentation page (web/static/segment.html) in Chromium on
WebGPU, driven as a visitor uses it: the model's two files through its file picker, one
image through its image picker, then a click's prompt. Run by sam.py in a process of
its own; prints one JSON line.

    python benchmarks/sam_page.py --model DIR --size S [--rounds 1] [--decoder-rounds 3]
                                  [--timeout 3600] [--work DIR]

The figures are the page's own timings (ember.web.page_sam): the encoder from the
pixels on the device to the embedding's sum read back, the decoder from the prompt to
the IoU scores read back (the masks' upsampling to the image is timed apart, as
"postprocess"). The image is a seeded random RGB picture of S x S pixels (so the page's
resize keeps its size); random weights make any picture as costly as any other. One
warm-up image and prompt first (the page compiles its kernels there), then the median
of --rounds images (each picked again: the page embeds every pick) and --decoder-rounds
prompts. The page runs the same model as the other rows, but on this picture rather than
their random pixel values, so its outputs are not compared here:
tests/browser/test_segment_page.py checks the page's masks against native ember's.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def picture(path, size, seed=0):
    import numpy as np
    from PIL import Image

    rgb = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(path)
    return path


def measure(args):
    sys.path.insert(0, HERE)
    from browser_common import BrowserUnavailable, open_browser

    png = picture(os.path.join(args.work, f"page-image-{args.size}.png"), args.size)
    files = [os.path.join(args.model, n) for n in ("model.safetensors", "config.json")]
    limit_ms = args.timeout * 1000
    try:
        with open_browser() as session:
            page = session.page("segment.html")
            t0 = time.perf_counter()
            page.boot()
            if "no_webgpu" in (page.evaluate("() => window.demoReady") or {}):
                return {"error": "the page found no WebGPU"}
            boot_s = time.perf_counter() - t0
            p = page.page

            def settle():
                p.wait_for_function(
                    "() => document.getElementById('status').dataset.state !== 'busy'",
                    timeout=limit_ms,
                )
                state, text = p.eval_on_selector("#status", "e => [e.dataset.state, e.textContent]")
                if state == "error":
                    raise RuntimeError(f"the page says: {text}")

            p.set_input_files("#model-files", files)
            settle()
            model = page.evaluate("() => window.lastModel")
            encoder = []
            for _ in range(args.rounds + 1):  # the first is the warm-up
                p.set_input_files("#image-file", png)
                settle()
                encoder.append(page.evaluate("() => window.lastImage.ms.encoder") / 1000)
            c = args.size / 2
            decoder, post = [], []
            for _ in range(args.decoder_rounds + 1):
                out = page.evaluate("(pts) => window.segmentPoints(pts)", [[c, c, 1]])
                decoder.append(out["ms"]["decoder"] / 1000)
                post.append(out["ms"]["postprocess"] / 1000)
            return {
                "boot_s": boot_s,
                "load_s": model["seconds"]["read"] + model["seconds"]["load"],
                "encoder_s": encoder[1:],
                "warmup_encoder_s": encoder[0],
                "encoder": statistics.median(encoder[1:]),
                "point": statistics.median(decoder[1:]),
                "postprocess": statistics.median(post[1:]),
                "browser": session.describe(page.info),
            }
    except BrowserUnavailable as exc:
        return {"skipped": str(exc)}
    except Exception as exc:  # a page that failed: say so, the other rows stand
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--model", required=True, help="a SAM directory (config.json, model.safetensors)"
    )
    p.add_argument("--size", type=int, required=True, help="the model's input side")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--decoder-rounds", type=int, default=3)
    p.add_argument("--timeout", type=int, default=3600, help="seconds one page step may take")
    p.add_argument("--work", default=".", help="folder for the picture")
    args = p.parse_args()
    print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()
