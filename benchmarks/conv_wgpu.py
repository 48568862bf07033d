"""conv2d on WebGPU: the implicit-GEMM kernel (backends/webgpu/conv.py) against the
contract's composite (padded copy, im2col copy, batched matmul, bias pass, activation
pass), both with bias and a fused SiLU, in one run on the same device; and what the
backend chooses per shape (conv.runs_here).

Prints milliseconds per call on YOLOv8n/s layer shapes at 640 (one image) on each path,
the paired ratios composite/kernel and composite/chosen (above 1: faster than the
composite) and the largest difference between kernel and composite outputs; then the
same per yolov8n forward at --size (random weights drawn as the tests draw them,
tests/yolo_reference.py; needs torch to build them) with every conv2d on each path.
Figures only, no pass/fail.

    .venv/bin/python benchmarks/conv_wgpu.py [--device wgpu] [--rounds 3] [--size 640]
    .venv/bin/python benchmarks/conv_wgpu.py --no-model     # layers only
"""

import argparse
import os
import sys
import types

import ember
import numpy as np
from ember.backends.base import Backend
from ember.backends.webgpu import conv

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # the tests' yolov8 reference model
from common import (  # noqa: E402
    compare_times,
    machine_report,
    ms,
    paired_ratio,
    print_table,
    times,
)

# (name, in channels, out channels, kernel, stride, input size): YOLOv8n's and YOLOv8s's
# convolutions at 640 (n: widths 16..256, s: 32..512).
LAYERS = [
    ("n stem 3->16 k3 s2 @640", 3, 16, 3, 2, 640),
    ("n 16->32 k3 s2 @320", 16, 32, 3, 2, 320),
    ("n bottleneck 16->16 k3 @160", 16, 16, 3, 1, 160),
    ("n C2f cv1 32->32 k1 @160", 32, 32, 1, 1, 160),
    ("s 64->64 k3 @160", 64, 64, 3, 1, 160),
    ("s 128->128 k3 @80", 128, 128, 3, 1, 80),
    ("s C2f cv2 192->128 k1 @80", 192, 128, 1, 1, 80),
    ("s 256->512 k3 s2 @40", 256, 512, 3, 2, 40),
    ("s SPPF cv2 1024->512 k1 @20", 1024, 512, 1, 1, 20),
]


PATHS = ("composite", "kernel", "chosen")
RUNS_HERE = conv.runs_here


class Paths:
    """Switches a WebGPU backend's conv2d between the contract's composite, the kernel
    for every shape, and the backend's own choice per shape."""

    def __init__(self, device, rounds):
        self.backend, self.rounds = device.backend, rounds

    def use(self, name):
        self.backend.__dict__.pop("conv2d", None)
        conv.runs_here = RUNS_HERE if name == "chosen" else (lambda *args: True)
        if name == "composite":
            self.backend.conv2d = types.MethodType(Backend.conv2d, self.backend)


def compare(paths, run):
    """Table cells of `run(path)` (which returns the output as numpy) on every path,
    interleaved: ms per path, speed-ups of kernel and chosen over the composite, max
    |kernel - composite|."""
    outputs = {p: run(p) for p in PATHS}  # also compiles the pipelines
    t = compare_times({p: (lambda p=p: run(p)) for p in PATHS}, repeats=paths.rounds, warmup=0)
    paths.use("chosen")
    diff = float(np.abs(outputs["composite"] - outputs["kernel"]).max())
    return (
        [ms(t[p].median) for p in PATHS]
        + [times(1.0 / paired_ratio(t[p], t["composite"])) for p in ("kernel", "chosen")]
        + [f"{diff:.1e}"]
    )


def layer_rows(device, paths):
    rng = np.random.default_rng(0)
    rows = []
    for name, c1, c2, k, s, size in LAYERS:
        x = ember.tensor(rng.standard_normal((1, c1, size, size), dtype=np.float32), device=device)
        w = ember.tensor(
            (rng.standard_normal((c2, c1, k, k)) / np.sqrt(c1 * k * k)).astype(np.float32),
            device=device,
        )
        b = ember.tensor(rng.standard_normal(c2).astype(np.float32), device=device)

        def run(path, x=x, w=w, b=b, s=s, k=k):
            paths.use(path)
            return ember.conv2d(x, w, b, stride=s, padding=k // 2, activation="silu").numpy()

        rows.append([name, *compare(paths, run)])
        print("  " + "  ".join(rows[-1]), flush=True)
    return rows


def yolov8n(device, size):
    """yolov8n with random weights (the tests' reference model re-initialised as they do)."""
    import yolo_reference
    from ember.models import yolo_config
    from ember.models.yolo import YoloDetector
    from test_yolo import TINY_YAML

    yaml = dict(TINY_YAML, nc=80, scales={"n": [0.33, 0.25, 1024]})
    names = {i: str(i) for i in range(80)}
    config = yolo_config.parse(yaml)
    ref = yolo_reference.reinit(yolo_reference.DetectionModel(yaml, config, names), seed=0)
    arrays = {k: v.numpy() for k, v in ref.state_dict().items()}
    model = YoloDetector(config, arrays, names, device=device)
    x = np.random.default_rng(1).random((1, 3, size, size), dtype=np.float32)
    return model, ember.tensor(x, device=device)


def model_rows(device, paths, size):
    model, x = yolov8n(device, size)

    def run(path):
        paths.use(path)
        return model(x).numpy()

    return [[f"yolov8n forward @{size}", *compare(paths, run)]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="wgpu")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per layer")
    ap.add_argument("--model-rounds", type=int, default=1, help="timed yolov8n forwards each")
    ap.add_argument("--size", type=int, default=640, help="yolov8n input size")
    ap.add_argument("--no-model", action="store_true", help="layers only")
    args = ap.parse_args()
    device = ember.Device.parse(args.device)
    print(f"device: {device.backend.adapter_info}, kernel set {device.backend.kernel_set}")
    for line in machine_report():
        print(line)
    paths = Paths(device, args.rounds)
    rows = layer_rows(device, paths)
    if not args.no_model:
        paths.rounds = args.model_rounds
        rows += model_rows(device, paths, args.size)
    print()
    print_table(
        ["conv2d + bias + silu", *PATHS, "kernel speed-up", "chosen speed-up", "max |diff|"],
        rows,
    )


if __name__ == "__main__":
    main()
