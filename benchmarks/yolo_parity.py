"""Acceptance check: ember's YOLOv8 against Ultralytics itself, on random builds of
yolov8n, yolov8s and yolov8n-pose (`YOLO("yolov8n.yaml")`, offline).

Each model is built by Ultralytics, its weights re-drawn (a yaml build's own init gives
no boxes: He-scale convolutions, random BatchNorm statistics, class biases that put some
scores over the threshold), saved as a .pt and converted by `ember convert
--from-ultralytics` (a fresh process, Ultralytics' loader). Then, on the same
letterboxed bus.jpg (640x640): raw head outputs, max |ember - Ultralytics| over the
largest |Ultralytics| value of each part (boxes, class scores, keypoints), on cpu and on
wgpu; and after NMS (Ultralytics' non_max_suppression against ember's select, the same
thresholds) the boxes matched one to one with IoU, classes and scores.

Targets: relative error <= 1e-4 on cpu and 1e-3 on wgpu; every box matched with
IoU >= 0.99, its class equal and its score within 1e-4. Exit status 1 when one is missed.

Needs torch and ultralytics, which the test environment must not hold (Ultralytics pulls
in torchvision, which breaks transformers): run it from an environment of its own, e.g.

    python -m venv --system-site-packages yolo-venv   # beside the CPU torch
    yolo-venv/bin/pip install --no-deps ultralytics opencv-python-headless matplotlib \\
        polars ultralytics-thop ...
    yolo-venv/bin/pip install numba   # ember's jit extra, for benchmarks/yolo.py's timings
    yolo-venv/bin/python benchmarks/yolo_parity.py --devices cpu,wgpu

Ultralytics' settings file is written under a temporary HOME/XDG_CONFIG_HOME, never the
user's; YOLO_OFFLINE=1 keeps it from the network.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ("yolov8n.yaml", "yolov8s.yaml", "yolov8n-pose.yaml")
TOL = {"cpu": 1e-4, "wgpu": 1e-3}


def _isolate_ultralytics():
    """Ultralytics writes settings.json at import: point it at a temporary home."""
    home = tempfile.mkdtemp(prefix="ember-yolo-parity-")
    os.environ.update(HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"), YOLO_OFFLINE="1")
    os.environ.setdefault("YOLO_VERBOSE", "False")
    return home


def reinit(model, seed):
    """Weights that say something: He-scale convs, random BatchNorm statistics."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d) and m.weight.requires_grad:
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.5)
            elif isinstance(m, torch.nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.copy_(torch.randn(n, generator=g) * 0.2)
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
    return model.eval()


def calibrate(model, x, boxes=50):
    """Class logits rescaled, per level, to unit spread around 0, then one bias that puts
    about `boxes` (anchor, class) scores over 0.25 on `x`: no score saturates at 0 or 1
    (ties would make NMS order arbitrary) and NMS has work to do."""
    import torch

    head = model.model[-1]
    last = [seq[-1] for seq in head.cv3]
    with torch.no_grad():
        for conv in last:
            conv.bias.zero_()
        raw = model(torch.from_numpy(x))[1]
        logits = raw["scores"][0]  # (nc, anchors), the levels in order
        sizes = [f.shape[2] * f.shape[3] for f in raw["feats"]]
        for conv, level in zip(last, logits.split(sizes, 1), strict=True):
            conv.weight.div_(level.std())
        z = model(torch.from_numpy(x))[1]["scores"].flatten()
        bias = float(np.log(1 / 3)) - float(torch.quantile(z, 1 - boxes / z.numel()))
        for conv in last:
            conv.bias.fill_(bias)
    return model


def build(yaml, seed, tmp, x):
    """The re-initialised Ultralytics model and the ember directory converted from its .pt."""
    import torch
    from ultralytics import YOLO

    model = calibrate(reinit(YOLO(yaml).model, seed), x)
    pt = os.path.join(tmp, yaml.replace(".yaml", ".pt"))
    torch.save({"model": model, "ema": None, "train_args": {"imgsz": 640}}, pt)
    out = os.path.join(tmp, yaml.replace(".yaml", ""))
    cmd = [sys.executable, "-m", "ember.cli", "convert", "--from-ultralytics", "--quiet", pt, out]
    subprocess.run(cmd, check=True)
    return model, out


def letterboxed_bus():
    from ember import packaged
    from ember.vision.images import read_image
    from ember.vision.letterbox import letterbox, to_input

    image = read_image(packaged.file("ultralytics-images", "bus.jpg", log=lambda m: None))
    boxed, _ = letterbox(image, 640, 32, auto=False)
    return to_input([boxed])


def parts(nc, kpt):
    """name -> row indices of the head output: boxes, class scores, keypoints."""
    out = {"boxes": np.arange(4), "scores": np.arange(4, 4 + nc)}
    if kpt:
        k, d = kpt
        rows = np.arange(4 + nc, 4 + nc + k * d).reshape(k, d)
        out["keypoints xy"] = rows[:, :2].ravel()
        if d == 3:
            out["keypoint visibility"] = rows[:, 2]
    return out


def nms_match(want, got, nc, kpt, conf, iou):
    """Ultralytics' NMS on its output against ember's select on ember's: (their boxes,
    ours, those matched with IoU >= 0.99 and the same class, worst IoU, worst score
    difference, worst keypoint difference in pixels)."""
    import torch
    from ember.vision.nms import box_iou, select
    from ultralytics.utils.nms import non_max_suppression

    theirs = non_max_suppression(
        torch.from_numpy(want), conf, iou, nc=nc if kpt else 0, max_det=300
    )[0].numpy()
    boxes, scores, classes, extra = select(got[0], conf, iou, 300, False, nc)
    worst_iou, worst_score, worst_kpt, matched = 1.0, 0.0, 0.0, 0
    for b, s, c, e in zip(boxes, scores, classes, extra, strict=True):
        if not len(theirs):
            break
        ious = box_iou(b, theirs[:, :4])
        j = int(ious.argmax())
        worst_iou = min(worst_iou, float(ious[j]))
        worst_score = max(worst_score, abs(float(theirs[j, 4]) - float(s)))
        if kpt:  # x, y in pixels (visibility is a probability, like the scores)
            diff = np.abs(theirs[j, 6:] - e).reshape(kpt)
            worst_kpt = max(worst_kpt, float(diff[:, :2].max()))
        matched += ious[j] >= 0.99 and int(theirs[j, 5]) == int(c)
    return len(theirs), len(boxes), matched, worst_iou, worst_score, worst_kpt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="cpu,wgpu")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--iou", type=float, default=0.7)
    args = ap.parse_args()
    _isolate_ultralytics()
    try:
        import torch
        import ultralytics
    except ImportError as exc:
        sys.exit(f"yolo_parity: needs torch and ultralytics ({exc}); see this script's docstring")
    import ember
    from ember.device import Device
    from ember.models.yolo import load

    sys.path.insert(0, HERE)
    from common import machine_report

    print("\n".join(machine_report()))
    print(f"ultralytics {ultralytics.__version__}, torch {torch.__version__}")
    x = letterboxed_bus()
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed, yaml in enumerate(args.models.split(",")):
            ref, converted = build(yaml, seed, tmp, x)
            with torch.no_grad():
                want = ref(torch.from_numpy(x))[0].numpy()
            for dev_name in args.devices.split(","):
                model = load(converted, device=Device.parse(dev_name))
                got = model(ember.tensor(x, device=model.device)).numpy()
                nc, kpt = model.config.nc, model.config.kpt_shape
                rel = {
                    name: float(np.abs(got[:, r] - want[:, r]).max() / np.abs(want[:, r]).max())
                    for name, r in parts(nc, kpt).items()
                }
                n_ref, n_ours, matched, worst_iou, worst_score, worst_kpt = nms_match(
                    want, got, nc, kpt, args.conf, args.iou
                )
                ok = (
                    max(rel.values()) <= TOL[dev_name]
                    and n_ref == n_ours == matched > 0
                    and worst_score <= 1e-4
                )
                if not ok:
                    failed.append(f"{yaml} on {dev_name}")
                figures = ", ".join(f"{k} {v:.2e}" for k, v in rel.items())
                print(
                    f"{yaml:<18} {dev_name:<5} relative error: {figures}; NMS: Ultralytics "
                    f"{n_ref} boxes, ember {n_ours}, matched {matched} (worst IoU "
                    f"{worst_iou:.6f}, worst score diff {worst_score:.1e}"
                    + (f", worst keypoint diff {worst_kpt:.1e} px" if kpt else "")
                    + ") "
                    f"{'ok' if ok else 'MISSED'}"
                )
    if failed:
        print(f"missed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
