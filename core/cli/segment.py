"""`ember segment IMAGE --point X,Y ...`: a mask of the object at the prompt, with a
Segment Anything model (--model: a Hugging Face SAM directory, e.g. facebook/sam-vit-base
saved locally, or a .safetensors file of the original segment-anything checkpoint).

The prompt is one object: positive points (--point), negative points (--neg-point), a
box (--box), or points and a box together, in the image's pixels. Every prompt is
checked against the image before the model loads. Three masks come out, best predicted
IoU first (one with --single-mask); --json prints their scores, boxes (first and last
pixel column and row) and areas; --save writes the best mask as a black-and-white PNG.
PNG is read by ember itself, JPEG through Pillow (pip install 'ember[images]')."""

import json
import os
import sys

from .common import add_device_argument, open_device


def _numbers(text, count, form):
    import argparse
    import math

    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = None
    if values is None or len(values) != count or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not {form} ({count} numbers, commas between)"
        )
    return tuple(values)


def _point(text):
    return _numbers(text, 2, "X,Y")


def _box(text):
    return _numbers(text, 4, "X0,Y0,X1,Y1")


def add_parser(subparsers):
    p = subparsers.add_parser(
        "segment",
        help="segment the object at points or a box (Segment Anything)",
        description=__doc__,
    )
    p.add_argument("image", metavar="IMAGE", help="a PNG or JPEG file")
    p.add_argument(
        "--point",
        type=_point,
        action="append",
        default=[],
        metavar="X,Y",
        help="a point on the object (repeatable)",
    )
    p.add_argument(
        "--neg-point",
        type=_point,
        action="append",
        default=[],
        metavar="X,Y",
        help="a point off the object (repeatable)",
    )
    p.add_argument("--box", type=_box, default=None, metavar="X0,Y0,X1,Y1", help="a box around it")
    p.add_argument(
        "--single-mask",
        action="store_true",
        help="ask for one mask instead of three (less ambiguous prompts: several points, a box)",
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="DIR",
        help="a SAM model: a Hugging Face directory (config.json + model.safetensors) or a "
        "segment-anything .safetensors file",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--save",
        metavar="MASK.png",
        default=None,
        help="write the best mask as a PNG (white on black; an existing file is refused)",
    )
    add_device_argument(p, default="cpu")
    p.set_defaults(func=run)
    return p


def _check_save(path):
    from ..errors import InvalidArgument

    if not path.lower().endswith(".png"):
        raise InvalidArgument(f"--save: {path} must end in .png (ember writes PNG)")
    if os.path.lexists(path):
        raise InvalidArgument(
            f"--save: {path} exists; choose another path (ember does not overwrite it)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise InvalidArgument(f"--save: the folder {parent} does not exist")


def _write_new(path, data):
    from .. import owned
    from ..errors import InvalidArgument

    try:
        owned.write_new(path, data)
    except owned.NotOurs:
        raise InvalidArgument(f"--save: {path} appeared meanwhile; not overwritten") from None


def _check_prompt(args, frame):
    """Every prompt against the image, naming the option and the value it refuses."""
    from ..errors import InvalidArgument
    from ..vision.sam_predict import check_box, check_point

    if not args.point and not args.neg_point and args.box is None:
        raise InvalidArgument(
            "--point: no --point, --neg-point or --box given; the prompt needs at least one"
        )
    for name, points in (("--point", args.point), ("--neg-point", args.neg_point)):
        for p in points:
            check_point(p, frame, f"{name} {p[0]:g},{p[1]:g}")
    if args.box is not None:
        check_box(args.box, frame, "--box")


def run(args):
    from ..errors import InvalidArgument
    from ..vision.images import read_image
    from ..vision.sam_processing import SamFrame

    if args.save is not None:
        _check_save(args.save)
    image = read_image(args.image)
    h, w = image.shape[:2]
    _check_prompt(args, SamFrame.of(h, w))
    if args.model is None:
        raise InvalidArgument(
            "--model: give a SAM model (a Hugging Face directory or a .safetensors file); "
            "ember packages none"
        )
    from ..models.sam import SamModel
    from ..vision.sam_predict import embed_image, predict

    model = SamModel.from_pretrained(args.model, device=open_device(args.device))
    masks = predict(
        model,
        embed_image(model, image),
        points=args.point + args.neg_point,
        labels=[1] * len(args.point) + [0] * len(args.neg_point),
        box=args.box,
        multimask_output=not args.single_mask,
    )
    if args.save is not None:
        import numpy as np

        from ..vision.png import encode

        best = masks[0].mask
        _write_new(args.save, encode(np.repeat(best[..., None], 3, axis=2).astype(np.uint8) * 255))
        print(f"ember: wrote {args.save}", file=sys.stderr)
    result = {"image": args.image, "width": w, "height": h, "masks": [m.to_json() for m in masks]}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"{args.image}: {w}x{h}, {len(masks)} mask(s), best first")
    for m in result["masks"]:
        x0, y0, x1, y1 = m["box"]
        print(f"  score {m['score']:.3f}  area {m['area']:>8}  box [{x0}, {y0}, {x1}, {y1}]")
    return 0
