"""A YOLOv8 detect or pose model yaml (the dict Ultralytics stores in its checkpoints, or a model .yaml
read into one) turned into a plain list of layers with their channels and strides.

Ultralytics' rules, re-stated from its documented behaviour: a scale row (or
depth_multiple / width_multiple) scales each repeat count n>1 to max(round(n*depth), 1)
and each output width c to ceil(min(c, max_channels) * width / 8) * 8; `from` -1 is the
previous layer; Concat adds its inputs' channels; the Detect head reads its levels'
channels. Only the layers YOLOv8 detect and pose use are known; any other is refused by name.
"""

import math
from dataclasses import dataclass

from ..errors import FormatError
from . import config_fields as cf

KNOWN = ("Conv", "C2f", "SPPF", "nn.Upsample", "Concat", "Detect", "Pose")
HEADS = ("Detect", "Pose")


@dataclass(frozen=True)
class Layer:
    index: int
    kind: str  # one of KNOWN
    source: tuple  # the layers it reads (absolute indices; -1 resolved)
    c_in: tuple  # channels of each input
    c_out: int
    stride: int  # the input image's size over this layer's output size
    args: dict  # kind-specific: k, s, n, shortcut, scale, nc, reg_max, ...


@dataclass(frozen=True)
class YoloConfig:
    layers: tuple
    nc: int
    reg_max: int
    strides: tuple  # of the Detect head's levels
    in_channels: int
    kpt_shape: tuple | None = None  # (keypoints, 2 or 3) for a Pose head


def _make_divisible(x, divisor=8):
    return int(math.ceil(x / divisor) * divisor)


def _bad(source, field, why):
    raise FormatError(f"YOLO model yaml ({source}): {field} {why}", path=source, field=field)


def _int_arg(source, field, value, low=1):
    if not cf.is_int(value) or value < low or value > cf.MAX_COUNT:
        _bad(source, field, f"must be an integer >= {low}, got {value!r}")
    return int(value)


def _multipliers(d, source):
    scales = d.get("scales")
    if scales:
        if not isinstance(scales, dict):
            _bad(
                source, "scales", "must be a mapping of scale name to [depth, width, max_channels]"
            )
        scale = d.get("scale") or next(iter(scales))
        row = scales.get(scale)
        if not (isinstance(row, (list, tuple)) and len(row) == 3):
            _bad(source, f"scales.{scale}", f"must be [depth, width, max_channels], got {row!r}")
        depth, width, max_ch = row
    else:
        depth, width, max_ch = d.get("depth_multiple", 1.0), d.get("width_multiple", 1.0), math.inf
    for name, v in (("depth", depth), ("width", width), ("max_channels", max_ch)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            _bad(source, name, f"must be a positive number, got {v!r}")
    return float(depth), float(width), max_ch


def parse(d, source="yaml"):
    """The YoloConfig of model dict `d` (FormatError naming the field when it is not a
    YOLOv8 detection model ember knows)."""
    if not isinstance(d, dict):
        _bad(source, "model", f"must be a mapping, got {type(d).__name__}")
    act = d.get("activation")
    if act not in (None, "nn.SiLU()"):
        _bad(source, "activation", f"{act!r} is not supported (only the default SiLU)")
    nc = _int_arg(source, "nc", d.get("nc"))
    reg_max = _int_arg(source, "reg_max", d.get("reg_max", 16))
    in_ch = _int_arg(source, "ch", d.get("channels", d.get("ch", 3)))
    depth, width, max_ch = _multipliers(d, source)
    rows = d.get("backbone"), d.get("head")
    if not all(isinstance(r, list) for r in rows):
        _bad(source, "backbone/head", "must be lists of [from, n, module, args] rows")
    ch, strides, layers = [in_ch], [1], []
    for i, row in enumerate(rows[0] + rows[1]):
        where = f"layer {i}"
        if not (isinstance(row, (list, tuple)) and len(row) == 4 and isinstance(row[3], list)):
            _bad(source, where, f"must be [from, n, module, args], got {row!r:.80}")
        f, n, kind, args = row
        if kind not in KNOWN:
            _bad(
                source,
                where,
                f"module {kind!r} is not a YOLOv8 detection layer ember knows "
                f"({', '.join(KNOWN)}): segment, pose, classify and other heads are not supported",
            )
        srcs = f if isinstance(f, list) else [f]
        if not srcs or not all(cf.is_int(s) for s in srcs):
            _bad(source, f"{where}.from", f"must be a layer index or a list of them, got {f!r}")
        absolute = []
        for s in srcs:
            j = i + s if s < 0 else s  # -1: the previous layer
            if not (s == -1 or 0 <= j < i) or (i == 0 and s != -1):
                _bad(source, f"{where}.from", f"{s!r} is not an earlier layer")
            absolute.append(j)
        # before layer 0 the lists hold the image's channels and stride; after it, layer j's
        c_in = tuple(ch[-1] if i == 0 else ch[j] for j in absolute)
        s_in = tuple(strides[-1] if i == 0 else strides[j] for j in absolute)
        n = _int_arg(source, f"{where}.n", n)
        n = max(round(n * depth), 1) if n > 1 else n
        if kind in ("Conv", "C2f", "SPPF"):
            if not args:
                _bad(source, f"{where}.args", "are empty")
            c_out = _make_divisible(min(_int_arg(source, f"{where}.args", args[0]), max_ch) * width)
        stride, extra = s_in[0], {}
        if kind == "Conv":
            k = _int_arg(source, f"{where}.k", args[1] if len(args) > 1 else 1)
            st = _int_arg(source, f"{where}.s", args[2] if len(args) > 2 else 1)
            extra, stride = {"k": k, "s": st}, stride * st
        elif kind == "C2f":
            extra = {"n": n, "shortcut": bool(args[1]) if len(args) > 1 else False}
        elif kind == "SPPF":
            extra = {"k": _int_arg(source, f"{where}.k", args[1] if len(args) > 1 else 5)}
        elif kind == "nn.Upsample":
            factor = args[1] if len(args) > 1 else None
            mode = args[2] if len(args) > 2 else "nearest"
            if not cf.is_int(factor) or factor < 1 or mode != "nearest":
                _bad(
                    source,
                    f"{where}.args",
                    f"must be [None, integer factor, 'nearest'], got {args!r}",
                )
            c_out, extra = c_in[0], {"scale": int(factor)}
            stride = max(stride // int(factor), 1)
        elif kind == "Concat":
            if (args[0] if args else 1) != 1 or len(set(s_in)) != 1:
                _bad(source, where, "Concat joins channels (dim 1) of maps of one size")
            c_out = sum(c_in)
        else:  # Detect or Pose
            if i != len(rows[0]) + len(rows[1]) - 1:
                _bad(source, where, f"the {kind} head must be the last layer")
            extra = {"nc": nc, "reg_max": reg_max, "strides": s_in}
            c_out = 4 + nc
            if kind == "Pose":
                kpt = d.get("kpt_shape")
                if not (
                    isinstance(kpt, (list, tuple))
                    and len(kpt) == 2
                    and cf.is_int(kpt[0])
                    and 0 < kpt[0] <= 1000
                    and kpt[1] in (2, 3)
                ):
                    _bad(source, "kpt_shape", f"must be [keypoints, 2 or 3], got {kpt!r}")
                extra["kpt_shape"] = (int(kpt[0]), int(kpt[1]))
                c_out += kpt[0] * kpt[1]
        if len(c_in) > 1 and kind not in ("Concat", *HEADS):
            _bad(source, f"{where}.from", f"{kind} reads one layer, got {f!r}")
        layers.append(Layer(i, kind, tuple(absolute), c_in, c_out, stride, extra))
        if i == 0:
            ch, strides = [], []
        ch.append(c_out)
        strides.append(stride)
    if not layers or layers[-1].kind not in HEADS:
        _bad(source, "head", "must end with a Detect or Pose layer")
    head = layers[-1].args
    return YoloConfig(tuple(layers), nc, reg_max, head["strides"], in_ch, head.get("kpt_shape"))
