"""YOLOv8 detection for the detection page, without numpy: ember.models.yolo's network
(which folds its BatchNorms and builds its anchors with numpy at load) rebuilt from the
same model yaml (ember.models.yolo_config) and the same Ultralytics tensor names, with
the same ember ops in the same order, so a forward gives native ember's head output to
float32 rounding.

The folding: scale = gamma / sqrt(var + eps) and bias = beta - mean * scale are float64
from the BatchNorm vectors (host values, as native ember computes them, then rounded to
float32); the convolution weight, already on the device, is multiplied by the float32
scale there (native ember multiplies in float64 and rounds once: a weight may differ
from its by one float32 rounding).

`check_meta` checks the fields of yolo.json the page uses, as ember.models.yolo_format
checks them (that module needs numpy to write models).
"""

import math
from array import array

from ember import dtype as dt
from ember import functional as F
from ember.errors import FormatError, ShapeMismatch, fmt_shape
from ember.layout import Layout
from ember.models import yolo_config
from ember.tensor import Tensor, cat

FORMAT, VERSION = "ember-yolo", 1


def _bad(source, field, why):
    raise FormatError(f"{source}: {field} {why}", path=source, field=field)


def check_meta(meta, source):
    """The YoloConfig of a yolo.json object of a detection model (FormatError naming the
    field otherwise)."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        _bad(source, "format", f"must be {FORMAT!r} (is this an ember YOLO model's yolo.json?)")
    if meta.get("version") != VERSION:
        _bad(source, "version", f"{meta.get('version')!r} is not {VERSION}")
    if meta.get("task") != "detect":
        _bad(source, "task", f"{meta.get('task')!r}: this page draws the boxes of detect models")
    config = yolo_config.parse(meta.get("yaml"), source=source)
    if config.kpt_shape is not None:
        _bad(source, "task", "'detect' does not match the model yaml's Pose head")
    names = meta.get("names")
    if not isinstance(names, dict) or set(names) != {str(i) for i in range(config.nc)}:
        _bad(source, "names", f"must map '0'..'{config.nc - 1}' to class names")
    if not all(isinstance(v, str) for v in names.values()):
        _bad(source, "names", "must be strings")
    if meta.get("strides") != list(config.strides):
        _bad(source, "strides", f"{meta.get('strides')!r} differ from the yaml's")
    imgsz = meta.get("imgsz")
    if (
        not isinstance(imgsz, int)
        or isinstance(imgsz, bool)
        or imgsz < 1
        or imgsz % max(config.strides)
    ):
        _bad(source, "imgsz", f"must be a multiple of {max(config.strides)}, got {imgsz!r}")
    eps = meta.get("bn_eps")
    for v in eps.values() if isinstance(eps, dict) else [eps]:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
            _bad(source, "bn_eps", f"must be a number in (0, 1) or a map of them, got {v!r}")
    return config


def f32_tensor(values, shape, device):
    """A float32 device tensor of host values (rounded to float32 as numpy rounds)."""
    storage = device.backend.from_host(array("f", values).tobytes(), dt.f32, shape)
    return Tensor(storage, Layout(tuple(shape)), dt.f32, device)


class Weights:
    """The model's tensors: `tensors` name -> device Tensor (convolutions), `host` name ->
    list of floats (the BatchNorm vectors); every read checked against the shape the yaml
    implies, and tensors the yaml does not use refused, as ember.models.yolo does."""

    def __init__(self, tensors, host, source, bn_eps):
        self.tensors, self.host, self.source, self.bn_eps = tensors, host, source, bn_eps
        self.used = set()

    def _check(self, name, shape, got):
        if got is None:
            raise FormatError(
                f"{self.source}: tensor {name} is missing", path=self.source, tensor=name
            )
        if tuple(got) != tuple(shape):
            raise FormatError(
                f"{self.source}: tensor {name} has shape {fmt_shape(got)}, the model yaml "
                f"implies {fmt_shape(shape)}",
                path=self.source,
                tensor=name,
            )
        self.used.add(name)

    def tensor(self, name, shape):
        t = self.tensors.get(name)
        self._check(name, shape, None if t is None else t.shape)
        return t

    def values(self, name, n):
        v = self.host.get(name)
        self._check(name, (n,), None if v is None else (len(v),))
        return v

    def eps(self, bn):
        e = self.bn_eps
        return float(e.get(bn, 1e-3) if isinstance(e, dict) else e)

    def check_all_used(self):
        unused = sorted((set(self.tensors) | set(self.host)) - self.used)
        if unused:
            raise FormatError(
                f"{self.source}: {len(unused)} tensors the model yaml does not use, e.g. "
                f"{unused[0]} (a checkpoint of another architecture or task?)",
                path=self.source,
                tensor=unused[0],
            )


class Conv:
    """Ultralytics' Conv (conv, BatchNorm, SiLU) as the folded convolution + bias + SiLU."""

    def __init__(self, w, prefix, c1, c2, k=1, s=1):
        weight = w.tensor(f"{prefix}.conv.weight", (c2, c1, k, k))
        gamma, beta, mean, var = (
            w.values(f"{prefix}.bn.{n}", c2)
            for n in ("weight", "bias", "running_mean", "running_var")
        )
        eps = w.eps(f"{prefix}.bn")
        scale = [g / math.sqrt(v + eps) for g, v in zip(gamma, var, strict=True)]
        self.weight = weight * f32_tensor(scale, (c2, 1, 1, 1), weight.device)
        self.bias = f32_tensor(
            [b - m * s for b, m, s in zip(beta, mean, scale, strict=True)], (c2,), weight.device
        )
        self.s, self.p = s, k // 2

    def __call__(self, x):
        return F.conv2d(x, self.weight, self.bias, stride=self.s, padding=self.p, activation="silu")


class Bottleneck:
    def __init__(self, w, prefix, c, shortcut):
        self.cv1 = Conv(w, f"{prefix}.cv1", c, c, 3)
        self.cv2 = Conv(w, f"{prefix}.cv2", c, c, 3)
        self.add = shortcut

    def __call__(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f:
    def __init__(self, w, prefix, c1, c2, n, shortcut):
        self.c = c2 // 2
        self.cv1 = Conv(w, f"{prefix}.cv1", c1, 2 * self.c)
        self.cv2 = Conv(w, f"{prefix}.cv2", (2 + n) * self.c, c2)
        self.m = [Bottleneck(w, f"{prefix}.m.{i}", self.c, shortcut) for i in range(n)]

    def __call__(self, x):
        y = list(self.cv1(x).split(self.c, 1))
        for block in self.m:
            y.append(block(y[-1]))
        return self.cv2(cat(y, 1))


class SPPF:
    def __init__(self, w, prefix, c1, c2, k):
        self.cv1 = Conv(w, f"{prefix}.cv1", c1, c1 // 2)
        self.cv2 = Conv(w, f"{prefix}.cv2", c1 // 2 * 4, c2)
        self.k = k

    def __call__(self, x):
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(F.max_pool2d(y[-1], self.k, 1, self.k // 2))
        return self.cv2(cat(y, 1))


class Plain1x1:
    """The head's last 1x1 convolutions: a real bias, no BatchNorm, no activation."""

    def __init__(self, w, prefix, c1, c2):
        self.weight = w.tensor(f"{prefix}.weight", (c2, c1, 1, 1))
        self.bias = w.tensor(f"{prefix}.bias", (c2,))

    def __call__(self, x):
        return F.conv2d(x, self.weight, self.bias)


class Detect:
    """The DFL box branch and the class branch per level, decoded as ember.models.yolo's
    Detect decodes them: (batch, 4 + nc, anchors), centre x, y, width, height in input
    pixels, then class probabilities."""

    def __init__(self, w, prefix, channels, nc, reg_max, strides, device):
        c2 = max(16, channels[0] // 4, reg_max * 4)
        c3 = max(channels[0], min(nc, 100))
        self.box, self.cls = [], []
        for i, c in enumerate(channels):
            for branch, width, out, name in (
                (self.box, c2, 4 * reg_max, "cv2"),
                (self.cls, c3, nc, "cv3"),
            ):
                p = f"{prefix}.{name}.{i}"
                branch.append(
                    (
                        Conv(w, f"{p}.0", c, width, 3),
                        Conv(w, f"{p}.1", width, width, 3),
                        Plain1x1(w, f"{p}.2", width, out),
                    )
                )
        self.bins = w.tensor(f"{prefix}.dfl.conv.weight", (1, reg_max, 1, 1)).reshape(
            1, 1, reg_max, 1
        )
        self.nc, self.reg_max, self.strides, self.device = nc, reg_max, strides, device
        self._grid = {}

    def anchors(self, sizes):
        """(anchor centres (1, 2, A), strides (1, 1, A)) of feature maps of `sizes`."""
        if sizes not in self._grid:
            xs, ys, steps = [], [], []
            for (h, wd), s in zip(sizes, self.strides, strict=True):
                xs += [j + 0.5 for _ in range(h) for j in range(wd)]
                ys += [i + 0.5 for i in range(h) for _ in range(wd)]
                steps += [float(s)] * (h * wd)
            n = len(steps)
            self._grid[sizes] = (
                f32_tensor(xs + ys, (1, 2, n), self.device),
                f32_tensor(steps, (1, 1, n), self.device),
            )
        return self._grid[sizes]

    def __call__(self, feats):
        b = feats[0].shape[0]
        boxes, scores = [], []
        for x, (b1, b2, b3), (c1, c2, c3) in zip(feats, self.box, self.cls, strict=True):
            boxes.append(b3(b2(b1(x))).reshape(b, 4 * self.reg_max, -1))
            scores.append(c3(c2(c1(x))).reshape(b, self.nc, -1))
        box, score = cat(boxes, 2), cat(scores, 2)
        n = box.shape[2]
        dist = (box.reshape(b, 4, self.reg_max, n).softmax(2) * self.bins).sum(2)
        anchors, steps = self.anchors(tuple((f.shape[2], f.shape[3]) for f in feats))
        lt, rb = dist.narrow(1, 0, 2), dist.narrow(1, 2, 2)
        x1y1, x2y2 = anchors - lt, anchors + rb
        xywh = cat([(x1y1 + x2y2) * 0.5, x2y2 - x1y1], 1) * steps
        return cat([xywh, score.sigmoid()], 1)


class PageDetector:
    """A YOLOv8 detection model: `forward` on (N, 3, H, W) float32 images in [0, 1] (H
    and W multiples of `stride`) -> (N, 4 + nc, anchors)."""

    def __init__(self, config, meta, weights, device, source):
        """`config` is check_meta(meta)'s; `weights` a Weights of the model's tensors."""
        self.config, self.device, self.source = config, device, source
        self.names = {int(k): v for k, v in meta["names"].items()}
        self.imgsz, self.stride = meta["imgsz"], max(config.strides)
        self.layers = [self._build(weights, layer) for layer in config.layers]
        weights.check_all_used()
        self._kept = {j for ly in config.layers for j in ly.source if j != ly.index - 1}

    def _build(self, w, layer):
        p, a, c1 = f"model.{layer.index}", layer.args, layer.c_in[0]
        if layer.kind == "Conv":
            return Conv(w, p, c1, layer.c_out, a["k"], a["s"])
        if layer.kind == "C2f":
            return C2f(w, p, c1, layer.c_out, a["n"], a["shortcut"] and c1 == layer.c_out)
        if layer.kind == "SPPF":
            return SPPF(w, p, c1, layer.c_out, a["k"])
        if layer.kind == "nn.Upsample":
            return lambda x, s=a["scale"]: F.upsample_nearest2d(x, scale_factor=s)
        if layer.kind == "Concat":
            return lambda xs: cat(xs, 1)
        return Detect(w, p, layer.c_in, a["nc"], a["reg_max"], a["strides"], self.device)

    def forward(self, x):
        if (
            x.ndim != 4
            or x.shape[1] != self.config.in_channels
            or x.shape[2] % self.stride
            or x.shape[3] % self.stride
        ):
            raise ShapeMismatch(
                f"PageDetector: expects (N, {self.config.in_channels}, H, W) images with H and W "
                f"multiples of {self.stride}, got {fmt_shape(x.shape)}",
                op="yolo",
                shapes=(x.shape,),
            )
        saved, prev = {-1: x}, x
        for layer, module in zip(self.config.layers, self.layers, strict=True):
            srcs = [saved.get(j, prev) for j in layer.source]
            prev = module(srcs if layer.kind in ("Concat", *yolo_config.HEADS) else srcs[0])
            if layer.index in self._kept:
                saved[layer.index] = prev
        return prev

    __call__ = forward
