"""Segment Anything ViT-B: ember (cpu, wgpu) next to transformers' SamModel on torch CPU.

    python benchmarks/sam.py [--size 1024] [--rounds 1] [--decoder-rounds 10]
                             [--threads N] [--wgpu-size 256[,1024...]] [--skip-wgpu]
                             [--skip-torch] [--page-size S] [--no-page] [--work DIR]

The model is transformers' SamConfig() (ViT-B: 12 layers, width 768, windows of 14, global
attention in layers 2, 5, 8, 11; 93.7M parameters) with random weights spread to a useful
size as tests/test_sam_model.py spreads them (transformers' init makes the image encoder
about 1e-10 wide, which would time arithmetic on near-zeros). No SAM weights can be had
offline here. It is built once per input size by transformers and saved under --work
(vit-b-SIZE/config.json + model.safetensors); later runs reuse it.

Each contender runs in a fresh subprocess, so every figure includes what it costs a real
program:
  encoder      seconds per image for the image embeddings of one random [1, 3, S, S] input
               (ember: read back to the host)
  decoder      seconds per prompt for the prompt encoder + mask decoder on those
               embeddings, multimask output (3 masks and their IoU scores, read back):
               one positive point at the centre, and one box around the middle half
               (ember: on the embedding prepared once, SamModel.prepare_image, as its
               predictor does; that per-image work is timed in ember's encoder figure)
  peak RSS     VmHWM from /proc/self/status at the end of the subprocess (weights, one
               image's activations, the outputs)
  load         importing the engine and loading the weights, in the worker
Each process makes one warm-up pass of everything, then --rounds encoder passes and
--decoder-rounds passes of each prompt; the figure is the median. Every engine gets the
same thread count (--threads, default the cores): torch.set_num_threads, ember's
EMBER_CPU_THREADS, and OMP/OpenBLAS for both.

ember wgpu runs at --wgpu-size (default 256: on lavapipe, the CPU's Vulkan, the encoder
at 1024 takes over 10 minutes; a comma list runs each size, in that order); its figures
are for that smaller input, which is why transformers is run at that size too, as the
reference for its outputs.
The page row (benchmarks/sam_page.py, in a process of its own) drives segment.html in
Chromium on WebGPU (SwiftShader here) with the same model at --page-size (default the
first --wgpu-size): the page's own encoder and decoder timings, as ratios to ember wgpu
at that size in the same run (--no-page leaves it out).
Agreement: the max abs difference of the image embeddings, the masks and the IoU
scores between each ember row and transformers at the same size, so the timings never
compare different work.
Figures, not pass/fail: on a shared machine compare the ratios, measured in one run.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0
TARGETS = "targets: ember cpu >= 1.0x torch's speed, <= 0.5x its peak RSS"


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def prompts(size):
    """One positive point at the centre; one box around the middle half (input pixels)."""
    c = size / 2
    return {
        "point": {"input_points": [[[[c, c]]]], "input_labels": [[[1]]]},
        "box": {"input_boxes": [[[size / 4, size / 4, 3 * size / 4, 3 * size / 4]]]},
    }


def pixels(size):
    import numpy as np

    rng = np.random.default_rng(SEED)
    return rng.standard_normal((1, 3, size, size), dtype=np.float32)


# --- the model, built once (in its own process) ------------------------------------------------
def spread_weights(model, torch):
    """Weights of a useful size everywhere, as tests/test_sam_model.py makes them."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "positional_embedding" in name:
                p.normal_(0, 1.0)
            elif "layer_norm" in name and name.endswith("weight"):
                p.normal_(1.0, 0.1)
            elif p.ndim == 1:
                p.normal_(0, 0.1)
            else:
                fan_in = p.shape[0] if "upscale_conv" in name else p[0].numel()
                p.normal_(0, fan_in**-0.5)


def build_model(size, out_dir):
    """transformers' SamConfig() at image_size `size`, random weights, saved to out_dir."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    cfg = transformers.SamConfig(
        vision_config={"image_size": size}, prompt_encoder_config={"image_size": size}
    )
    model = transformers.SamModel(cfg).eval()
    spread_weights(model, torch)
    model.save_pretrained(out_dir)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"parameters": n}))


def model_dir(work, size, timeout):
    path = os.path.join(work, f"vit-b-{size}")
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return path, None
    os.makedirs(work, exist_ok=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "build", "--size", str(size)]
    # written beside the cache entry and renamed, so a killed run leaves no half model
    partial = f"{path}.partial-{os.getpid()}"
    cmd += ["--out", partial]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError((done.stderr.strip().splitlines() or ["build failed"])[-1])
        os.rename(partial, path)
    finally:
        shutil.rmtree(partial, ignore_errors=True)  # this run's own temporary folder
    n = json.loads(done.stdout.strip().splitlines()[-1])["parameters"]
    return path, f"built {path} ({n / 1e6:.1f}M parameters) in {time.perf_counter() - start:.0f} s"


# --- workers (run in their own process) ------------------------------------------------------------
def engine_ember(args):
    import ember
    from ember.device import Device
    from ember.models.sam import SamModel

    dev = Device.parse(args.device)
    model = SamModel.from_pretrained(args.model, device=dev)
    x = pixels(args.size)

    def encode():
        emb = model.image_embeddings(ember.tensor(x, device=dev))
        return model.prepare_image(emb), emb.numpy()

    def decode(prepared, prompt):
        masks, iou = model.predict_masks(prepared, **prompt)
        return masks.numpy(), iou.numpy()

    return encode, decode


def engine_torch(args):
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    model = transformers.SamModel.from_pretrained(args.model).eval()
    x = torch.from_numpy(pixels(args.size))

    def encode():
        with torch.inference_mode():
            emb = model.get_image_embeddings(x)
        return emb, emb.numpy()

    def decode(emb, prompt):
        with torch.inference_mode():
            out = model(image_embeddings=emb, **{k: torch.tensor(v) for k, v in prompt.items()})
        return out.pred_masks.numpy(), out.iou_scores.numpy()

    return encode, decode


def threads_used(worker):
    if worker == "torch":
        import torch

        return f"{torch.get_num_threads()} intra-op threads"
    from ember.backends import row_parallel

    return f"{row_parallel.workers()} threads for the work around GEMMs"


def timed(fn, *a):
    start = time.perf_counter()
    out = fn(*a)
    return time.perf_counter() - start, out


def run_worker(args):
    os.environ["EMBER_CPU_THREADS"] = str(args.threads)
    if args.worker != "torch":
        # ember before numpy, as the README's Devices section says: ember sets
        # OPENBLAS_THREAD_TIMEOUT before OpenBLAS loads (numpy first: ~5% slower decoder)
        import ember  # noqa: F401
    import numpy as np

    start = time.perf_counter()
    encode, decode = (engine_torch if args.worker == "torch" else engine_ember)(args)
    load_s = time.perf_counter() - start
    todo = prompts(args.size)
    emb, _ = encode()  # warm-up: kernels, buffer pools, first-touch pages
    for prompt in todo.values():
        decode(emb, prompt)
    enc_s = []
    for _ in range(args.rounds):
        s, (emb, emb_host) = timed(encode)
        enc_s.append(s)
    dec_s, outputs = {}, {"embeddings": emb_host}
    for name, prompt in todo.items():
        dec_s[name] = []
        for _ in range(args.decoder_rounds):
            s, (masks, iou) = timed(decode, emb, prompt)
            dec_s[name].append(s)
        outputs[f"{name}_masks"], outputs[f"{name}_iou"] = masks, iou
    np.savez(args.out, **outputs)
    print(
        json.dumps(
            {
                "load_s": load_s,
                "encoder_s": enc_s,
                "decoder_s": dec_s,
                "peak_rss_mb": peak_rss_mb(),
                "threads": threads_used(args.worker),
            }
        )
    )


# --- the parent -----------------------------------------------------------------------------------
def measure(worker, device, path, size, args, out):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", worker, "--device", device]
    cmd += ["--model", path, "--size", str(size), "--threads", str(args.threads)]
    cmd += ["--rounds", str(args.rounds if device == "cpu" else 1)]
    cmd += ["--decoder-rounds", str(args.decoder_rounds if device == "cpu" else 3)]
    cmd += ["--out", out]
    n = str(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    r = json.loads(done.stdout.strip().splitlines()[-1])
    r["encoder"] = statistics.median(r["encoder_s"])
    r["point"] = statistics.median(r["decoder_s"]["point"])
    r["box"] = statistics.median(r["decoder_s"]["box"])
    r["out"] = out
    return r


def agreement(a, b):
    """Max abs differences of every output between two workers' saved .npz files."""
    import numpy as np

    x, y = np.load(a["out"]), np.load(b["out"])
    parts = []
    for key, label in (
        ("embeddings", "embeddings"),
        ("point_masks", "point masks"),
        ("point_iou", "point IoU"),
        ("box_masks", "box masks"),
        ("box_iou", "box IoU"),
    ):
        if x[key].shape != y[key].shape:
            parts.append(f"{label} shapes differ {x[key].shape} vs {y[key].shape}")
            continue
        diff = float(np.abs(x[key] - y[key]).max())
        parts.append(f"{label} {diff:.1e} (of max |x| {float(np.abs(y[key]).max()):.2f})")
    return ", ".join(parts)


def row(label, r):
    if "error" in r:
        return f"{label:<50}  unavailable: {r['error']}"
    return (
        f"{label:<50}{r['encoder']:>9.2f} s{r['point'] * 1e3:>10.1f} ms{r['box'] * 1e3:>10.1f} ms"
        f"{r['peak_rss_mb']:>9.0f} MB{r['load_s']:>8.1f} s"
    )


def measure_page(path, size, args):
    cmd = [sys.executable, os.path.join(HERE, "sam_page.py"), "--model", path]
    cmd += ["--size", str(size), "--rounds", str(args.rounds), "--decoder-rounds", "3"]
    cmd += ["--timeout", str(args.timeout), "--work", args.work]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def page_rows(r, size, wgpu):
    """The page row's lines: its figures, and its speed as a ratio to ember wgpu's."""
    head = f"page (segment.html in Chromium, WebGPU), {size}x{size}"
    if "encoder" not in r:
        return [f"{head}: not measured: {r.get('skipped') or r.get('error')}"]
    lines = [
        f"{head}: encoder {r['encoder']:.2f} s per image (warm-up image "
        f"{r['warmup_encoder_s']:.2f} s), point {r['point'] * 1e3:.1f} ms per prompt "
        f"(+ {r['postprocess'] * 1e3:.1f} ms upsampling the masks to the image), model "
        f"load {r['load_s']:.1f} s, page boot {r['boot_s']:.1f} s",
        f"  {r['browser']}",
    ]
    if "encoder" in wgpu:
        lines.append(
            f"  page / ember wgpu at {size}x{size}, speed (wgpu time / page time): encoder "
            f"{wgpu['encoder'] / r['encoder']:.2f}x, point {wgpu['point'] / r['point']:.2f}x"
        )
    else:
        lines.append(f"  no ember wgpu row at {size}x{size} in this run to compare with")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=1024, help="input side for cpu (SAM's is 1024)")
    p.add_argument("--rounds", type=int, default=1, help="timed encoder passes per process")
    p.add_argument(
        "--decoder-rounds", type=int, default=10, help="timed passes of each prompt per process"
    )
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads for all")
    p.add_argument(
        "--wgpu-size",
        default="256",
        help="input side(s) for ember wgpu, comma-separated (lavapipe is slow)",
    )
    p.add_argument("--skip-wgpu", action="store_true")
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument(
        "--page-size", type=int, help="input side for the page (default: the first --wgpu-size)"
    )
    p.add_argument("--no-page", action="store_true", help="leave the page row out")
    p.add_argument(
        "--work",
        default=os.path.join(os.path.expanduser("~"), ".cache", "ember-bench", "sam"),
        help="folder for the saved random models and the outputs compared",
    )
    p.add_argument("--timeout", type=int, default=3600, help="seconds per subprocess")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker == "build":
        return build_model(args.size, args.out)
    if args.worker:
        return run_worker(args)
    try:
        wgpu_sizes = [int(x) for x in args.wgpu_size.split(",")]
    except ValueError:
        p.error(f"--wgpu-size {args.wgpu_size!r}: sizes separated by commas")
    page_size = args.page_size or wgpu_sizes[0]
    for name, value in [("size", args.size), ("page-size", page_size)] + [
        ("wgpu-size", s) for s in wgpu_sizes
    ]:
        if value <= 0 or value % 16:
            p.error(f"--{name} {value}: a positive multiple of 16")

    sys.path.insert(0, HERE)
    from common import machine_report

    for line in machine_report():
        print(line)
    print(
        f"SAM ViT-B (transformers SamConfig(), random weights), {args.threads} threads; each "
        f"engine in a fresh process: one warm-up pass, then the median of {args.rounds} encoder "
        f"pass(es) and {args.decoder_rounds} decoder passes per prompt (wgpu: 1 and 3)"
    )
    sizes = [args.size] + ([] if args.skip_wgpu else wgpu_sizes)
    sizes += [] if args.no_page else [page_size]
    dirs = {}
    for size in dict.fromkeys(sizes):
        try:
            dirs[size], note = model_dir(args.work, size, args.timeout)
        except Exception as exc:  # a benchmark reports, it does not fail
            print(f"model at {size}x{size}: could not be built: {exc}")
            return
        if note:
            print(note)
    outs = os.path.join(args.work, "outputs")
    os.makedirs(outs, exist_ok=True)
    runs = [("ember cpu", "ember", "cpu", args.size)]
    if not args.skip_torch:
        runs.append(("transformers (torch cpu)", "torch", "cpu", args.size))
    for wgpu_size in [] if args.skip_wgpu else wgpu_sizes:  # the page beside its wgpu row
        runs.append(("ember wgpu", "ember", "wgpu", wgpu_size))
        if not args.skip_torch and wgpu_size != args.size:
            runs.append(("transformers (torch cpu)", "torch", "cpu", wgpu_size))
        if wgpu_size == page_size and not args.no_page:
            runs.append(("page", "page", "webgpu", page_size))
    if not args.no_page and all(r[0] != "page" for r in runs):
        runs.append(("page", "page", "webgpu", page_size))
    results, page = {}, None
    for label, worker, device, size in runs:
        if worker == "page":
            page = measure_page(dirs[size], size, args)
            continue
        out = os.path.join(outs, f"{worker}-{device}-{size}.npz")
        results[(label, size)] = measure(worker, device, dirs[size], size, args, out)

    print(
        f"\n{'engine, input':<50}{'encoder':>11}{'point':>13}{'box':>13}{'peak RSS':>12}{'load':>10}"
    )
    for (label, size), r in results.items():
        note = " (smaller input)" if size != args.size else ""
        print(row(f"{label}, {size}x{size}{note}", r))
    for (label, size), r in results.items():
        if "threads" in r:
            print(f"  {label}, {size}x{size}: {r['threads']}")
    print(
        "  encoder: seconds per image; point, box: per prompt (3 masks + IoU); load: imports + weights"
    )

    print("\nagreement with transformers at the same size (max abs difference):")
    for (label, size), r in results.items():
        ref = results.get(("transformers (torch cpu)", size), {})
        if label.startswith("ember") and "out" in r and "out" in ref:
            print(f"  {label}, {size}x{size}: {agreement(r, ref)}")

    e = results.get(("ember cpu", args.size), {})
    t = results.get(("transformers (torch cpu)", args.size), {})
    print(f"\nember cpu / transformers (torch cpu) at {args.size}x{args.size} ({TARGETS}):")
    if "encoder" in e and "encoder" in t:
        print(
            f"  speed (torch time / ember time): encoder {t['encoder'] / e['encoder']:.2f}x, "
            f"point {t['point'] / e['point']:.2f}x, box {t['box'] / e['box']:.2f}x"
        )
        print(f"  peak RSS (ember / torch): {e['peak_rss_mb'] / t['peak_rss_mb']:.2f}x")
    else:
        print("  not available (a row above failed or was skipped)")
    for wgpu_size in [] if args.skip_wgpu else wgpu_sizes:
        w = results.get(("ember wgpu", wgpu_size), {})
        tw = results.get(("transformers (torch cpu)", wgpu_size), {})
        if "encoder" in w and "encoder" in tw:
            print(
                f"ember wgpu / transformers at {wgpu_size}x{wgpu_size}: speed encoder "
                f"{tw['encoder'] / w['encoder']:.2f}x, point {tw['point'] / w['point']:.2f}x, "
                f"box {tw['box'] / w['box']:.2f}x; peak RSS {w['peak_rss_mb'] / tw['peak_rss_mb']:.2f}x"
            )
    print()
    if page is None:
        print("page: left out (--no-page)")
    else:
        wgpu = results.get(("ember wgpu", page_size), {})
        for line in page_rows(page, page_size, wgpu):
            print(line)
    for line in machine_report()[:1]:
        print("after: " + line)


if __name__ == "__main__":
    main()
