"""YOLOv8 detection on any ember device: layers built from the model yaml (yolo_config),
weights under Ultralytics' state-dict names (`model.0.conv.weight`, ...).

Every Conv is conv + BatchNorm + SiLU; the BatchNorm is folded into the convolution's
weight and a bias once at load (w * g/sqrt(v+eps), b - m*g/sqrt(v+eps), in float64), so
inference is conv2d + bias + silu. C2f splits its first 1x1 conv's output in two and
chains bottlenecks on the second half; SPPF chains three stride-1 max pools (padded
with -inf, as PyTorch pads); upsampling is nearest. The Detect head runs a box branch
(4 x reg_max logits) and a class branch per level; the box logits are decoded with the
DFL (softmax over reg_max bins, expectation with the bins' values) into distances from
each anchor (cell centres, offset 0.5) to the box sides, scaled by the level's stride.
`forward` returns what Ultralytics' model returns at inference: (batch, 4 + nc, anchors),
boxes as centre x, centre y, width, height in input pixels, then class probabilities;
a Pose head appends keypoints x, y (input pixels) and, for kpt_shape (k, 3), visibility.
"""

import numpy as np

from .. import functional as F
from ..errors import FormatError, ShapeMismatch, fmt_shape
from ..tensor import cat, tensor
from . import yolo_config


class _Weights:
    """name -> float32 numpy array; every read is checked against the shape the yaml
    implies, so a checkpoint of another size or task is refused naming the tensor."""

    def __init__(self, arrays, source, bn_eps):
        self.arrays, self.source, self.used = arrays, source, set()
        self.bn_eps = bn_eps  # one number, or BatchNorm module name -> eps

    def eps(self, bn):
        return float(self.bn_eps.get(bn, 1e-3) if isinstance(self.bn_eps, dict) else self.bn_eps)

    def get(self, name, shape):
        a = self.arrays.get(name)
        if a is None:
            raise FormatError(
                f"{self.source}: tensor {name} is missing", path=self.source, tensor=name
            )
        if tuple(a.shape) != tuple(shape):
            raise FormatError(
                f"{self.source}: tensor {name} has shape {fmt_shape(a.shape)}, the model yaml "
                f"implies {fmt_shape(shape)}",
                path=self.source,
                tensor=name,
            )
        self.used.add(name)
        return np.asarray(a, dtype=np.float64)


class ConvBnSilu:
    """Ultralytics' Conv: k x k convolution (padding k//2, no bias) + BatchNorm + SiLU,
    kept as the folded weight and bias."""

    def __init__(self, w, prefix, c1, c2, k=1, s=1, device=None, act=True):
        weight = w.get(f"{prefix}.conv.weight", (c2, c1, k, k))
        gamma = w.get(f"{prefix}.bn.weight", (c2,))
        beta = w.get(f"{prefix}.bn.bias", (c2,))
        mean = w.get(f"{prefix}.bn.running_mean", (c2,))
        var = w.get(f"{prefix}.bn.running_var", (c2,))
        scale = gamma / np.sqrt(var + w.eps(f"{prefix}.bn"))
        w.used.add(f"{prefix}.bn.num_batches_tracked")
        self.weight = tensor(
            (weight * scale[:, None, None, None]).astype(np.float32), device=device
        )
        self.bias = tensor((beta - mean * scale).astype(np.float32), device=device)
        self.s, self.p, self.act = s, k // 2, act

    def __call__(self, x):
        # SiLU fused into the conv (the numpy path applies it to each band while in cache)
        act = "silu" if self.act else None
        return F.conv2d(x, self.weight, self.bias, stride=self.s, padding=self.p, activation=act)

    def over(self, parts):
        """The conv of the parts' channel concatenation, made only where the backend
        needs it (numpy reads a 1 x 1 conv's parts where they lie)."""
        act = "silu" if self.act else None
        return F.conv2d_cat(
            parts, self.weight, self.bias, stride=self.s, padding=self.p, activation=act
        )


class _Bottleneck:
    def __init__(self, w, prefix, c, shortcut, device):
        self.cv1 = ConvBnSilu(w, f"{prefix}.cv1", c, c, 3, device=device)
        self.cv2 = ConvBnSilu(w, f"{prefix}.cv2", c, c, 3, device=device)
        self.add = shortcut

    def __call__(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class _Joined(tuple):
    """A Concat layer's inputs, to be joined along channels by whoever needs them joined
    (_joined); a C2f reads them as they are."""


def _parts(x):
    return tuple(x) if isinstance(x, _Joined) else (x,)


def _joined(x):
    """x, its parts' channel concatenation where it is a _Joined"""
    return cat(list(x), 1) if isinstance(x, _Joined) else x


class C2f:
    def __init__(self, w, prefix, c1, c2, n, shortcut, device):
        self.c = c2 // 2
        self.cv1 = ConvBnSilu(w, f"{prefix}.cv1", c1, 2 * self.c, device=device)
        self.cv2 = ConvBnSilu(w, f"{prefix}.cv2", (2 + n) * self.c, c2, device=device)
        self.m = [_Bottleneck(w, f"{prefix}.m.{i}", self.c, shortcut, device) for i in range(n)]

    def __call__(self, x):
        """x a tensor, or a Concat layer's parts (_Joined): its 1 x 1 cv1 reads them
        where they lie (F.conv2d_cat), no concatenation made"""
        first = self.cv1.over(x) if isinstance(x, _Joined) else self.cv1(x)
        y = list(first.split(self.c, 1))
        for block in self.m:
            y.append(block(y[-1]))
        return self.cv2.over(y)


class SPPF:
    def __init__(self, w, prefix, c1, c2, k, device):
        self.cv1 = ConvBnSilu(w, f"{prefix}.cv1", c1, c1 // 2, device=device)
        self.cv2 = ConvBnSilu(w, f"{prefix}.cv2", c1 // 2 * 4, c2, device=device)
        self.k = k

    def __call__(self, x):
        y = [self.cv1(x)]
        k, p = self.k, self.k // 2
        for _ in range(3):
            # the k x k maximum as a 1 x k then a k x 1 one: the same numbers (a max of
            # maxima, -inf padding either way), 2(k - 1) elementwise maxima for (k^2 - 1)
            rows = F.max_pool2d(y[-1], (1, k), 1, (0, p))
            y.append(F.max_pool2d(rows, (k, 1), 1, (p, 0)))
        return self.cv2.over(y)


class _Plain1x1:
    """The head's last 1x1 convolutions: a real bias, no BatchNorm; `activation` None, or
    the class scores' sigmoid fused into the convolution (elementwise, so the same as
    Ultralytics' sigmoid after the levels' concatenation; on numpy with numba one pass in
    each band, where a sigmoid over yolov8n's 80 x 8400 scores was ~4.5 ms on one core)."""

    def __init__(self, w, prefix, c1, c2, device, activation=None):
        self.weight = tensor(
            w.get(f"{prefix}.weight", (c2, c1, 1, 1)).astype(np.float32), device=device
        )
        self.bias = tensor(w.get(f"{prefix}.bias", (c2,)).astype(np.float32), device=device)
        self.activation = activation

    def __call__(self, x):
        return F.conv2d(x, self.weight, self.bias, activation=self.activation)


class Detect:
    def __init__(self, w, prefix, channels, nc, reg_max, strides, device):
        c2 = max(16, channels[0] // 4, reg_max * 4)
        c3 = max(channels[0], min(nc, 100))
        self.box, self.cls = [], []
        for i, c in enumerate(channels):
            for branch, width, out, name, act in (
                (self.box, c2, 4 * reg_max, "cv2", None),
                (self.cls, c3, nc, "cv3", "sigmoid"),  # class probabilities
            ):
                p = f"{prefix}.{name}.{i}"
                branch.append(
                    (
                        ConvBnSilu(w, f"{p}.0", c, width, 3, device=device),
                        ConvBnSilu(w, f"{p}.1", width, width, 3, device=device),
                        _Plain1x1(w, f"{p}.2", width, out, device, act),
                    )
                )
        bins = w.get(f"{prefix}.dfl.conv.weight", (1, reg_max, 1, 1)).reshape(1, 1, reg_max, 1)
        self.bins = tensor(bins.astype(np.float32), device=device)
        self.nc, self.reg_max, self.strides, self.device = nc, reg_max, strides, device
        self._grid = {}  # feature sizes -> (anchor centres (1, 2, A), strides (1, 1, A))

    def _anchors(self, sizes):
        if sizes not in self._grid:
            points, steps = [], []
            for (h, wd), s in zip(sizes, self.strides, strict=True):
                ys, xs = np.meshgrid(np.arange(h) + 0.5, np.arange(wd) + 0.5, indexing="ij")
                points.append(np.stack([xs.ravel(), ys.ravel()]))
                steps.append(np.full(h * wd, s))
            a = np.concatenate(points, 1)[None].astype(np.float32)
            st = np.concatenate(steps)[None, None].astype(np.float32)
            self._grid[sizes] = (tensor(a, device=self.device), tensor(st, device=self.device))
        return self._grid[sizes]

    def __call__(self, feats):
        b = feats[0].shape[0]
        boxes, scores = [], []
        for x, (b1, b2, b3), (c1, c2, c3) in zip(feats, self.box, self.cls, strict=True):
            boxes.append(b3(b2(b1(x))).reshape(b, 4 * self.reg_max, -1))
            scores.append(c3(c2(c1(x))).reshape(b, self.nc, -1))
        box, score = cat(boxes, 2), cat(scores, 2)
        n = box.shape[2]
        # the DFL: the bins' expectation under the softmax of each side's logits, with the
        # normalisation after the weighted sum (4 x 8400 divisions, not 64 x 8400; one pass
        # fewer; yolov8n 4.9 -> 2.4 ms on one core)
        logits = box.reshape(b, 4, self.reg_max, n)
        e = (logits - logits.max(2, keepdim=True)).exp()
        dist = (e * self.bins).sum(2) / e.sum(2)  # (b, 4, A)
        anchors, steps = self._anchors(tuple((f.shape[2], f.shape[3]) for f in feats))
        lt, rb = dist.narrow(1, 0, 2), dist.narrow(1, 2, 2)
        x1y1, x2y2 = anchors - lt, anchors + rb
        xywh = cat([(x1y1 + x2y2) * 0.5, x2y2 - x1y1], 1) * steps
        return cat([xywh, score], 1)


class Pose(Detect):
    """Detect plus a keypoint branch per level; keypoints decode as
    ((raw * 2 + anchor - 0.5) * stride) for x and y, a sigmoid for visibility."""

    def __init__(self, w, prefix, channels, nc, reg_max, strides, kpt_shape, device):
        super().__init__(w, prefix, channels, nc, reg_max, strides, device)
        self.kpt_shape = kpt_shape
        nk = kpt_shape[0] * kpt_shape[1]
        c4 = max(channels[0] // 4, nk)
        self.kpt = [
            (
                ConvBnSilu(w, f"{prefix}.cv4.{i}.0", c, c4, 3, device=device),
                ConvBnSilu(w, f"{prefix}.cv4.{i}.1", c4, c4, 3, device=device),
                _Plain1x1(w, f"{prefix}.cv4.{i}.2", c4, nk, device),
            )
            for i, c in enumerate(channels)
        ]

    def __call__(self, feats):
        det = super().__call__(feats)
        b, (k, ndim) = feats[0].shape[0], self.kpt_shape
        raw = cat(
            [
                k3(k2(k1(x))).reshape(b, k * ndim, -1)
                for x, (k1, k2, k3) in zip(feats, self.kpt, strict=True)
            ],
            2,
        )
        n = raw.shape[2]
        raw = raw.reshape(b, k, ndim, n)
        anchors, steps = self._anchors(tuple((f.shape[2], f.shape[3]) for f in feats))
        parts = [
            (
                (raw.narrow(2, d, 1) * 2.0 + (anchors.narrow(1, d, 1).reshape(1, 1, 1, n) - 0.5))
                * steps.reshape(1, 1, 1, n)
            )
            for d in (0, 1)
        ]
        if ndim == 3:
            parts.append(raw.narrow(2, 2, 1).sigmoid())
        return cat([det, cat(parts, 2).reshape(b, k * ndim, n)], 1)


class YoloDetector:
    """A YOLOv8 detection model: `forward(images)` on (N, 3, H, W) float32 images in
    [0, 1] (RGB, H and W multiples of the largest stride) -> (N, 4 + nc, anchors)."""

    imgsz = 640  # the training image size (a loaded model's yolo.json says)

    def __init__(self, config, arrays, names=None, device=None, source="weights", bn_eps=1e-3):
        # bn_eps: Ultralytics builds every BatchNorm with eps 1e-3; a map names each
        self.config, self.device, self.source = config, device, source
        self.names = dict(names) if names else {i: str(i) for i in range(config.nc)}
        self.stride = max(config.strides)
        w = _Weights(arrays, source, bn_eps)
        self.layers = [self._build(w, layer) for layer in config.layers]
        unused = sorted(set(arrays) - w.used)
        if unused:
            raise FormatError(
                f"{source}: {len(unused)} tensors the model yaml does not use, e.g. {unused[0]} "
                "(a checkpoint of another architecture or task?)",
                path=source,
                tensor=unused[0],
            )
        # outputs read later than by the next layer (Ultralytics' save list); others go at once
        self._kept = {j for ly in config.layers for j in ly.source if j != ly.index - 1}

    def _build(self, w, layer):
        p, a, dev = f"model.{layer.index}", layer.args, self.device
        c1 = layer.c_in[0]
        if layer.kind == "Conv":
            return ConvBnSilu(w, p, c1, layer.c_out, a["k"], a["s"], device=dev)
        if layer.kind == "C2f":
            return C2f(w, p, c1, layer.c_out, a["n"], a["shortcut"] and c1 == layer.c_out, dev)
        if layer.kind == "SPPF":
            return SPPF(w, p, c1, layer.c_out, a["k"], dev)
        if layer.kind == "nn.Upsample":
            return lambda x, s=a["scale"]: F.upsample_nearest2d(x, scale_factor=s)
        if layer.kind == "Concat":
            return lambda xs: _Joined(p for x in xs for p in _parts(x))
        if layer.kind == "Pose":
            return Pose(w, p, layer.c_in, a["nc"], a["reg_max"], a["strides"], a["kpt_shape"], dev)
        return Detect(w, p, layer.c_in, a["nc"], a["reg_max"], a["strides"], dev)

    def forward(self, x):
        if x.ndim != 4 or x.shape[1] != self.config.in_channels:
            raise ShapeMismatch(
                f"YoloDetector: expects (N, {self.config.in_channels}, H, W) images, got "
                f"{fmt_shape(x.shape)}",
                op="yolo",
                shapes=(x.shape,),
            )
        if x.shape[2] % self.stride or x.shape[3] % self.stride:
            raise ShapeMismatch(
                f"YoloDetector: image height and width must be multiples of {self.stride} "
                f"(letterbox them), got {fmt_shape(x.shape)}",
                op="yolo",
                shapes=(x.shape,),
            )
        saved, prev = {-1: x}, x
        for layer, module in zip(self.config.layers, self.layers, strict=True):
            srcs = [saved.get(j, prev) for j in layer.source]
            if layer.kind == "Concat":
                prev = module(srcs)
            elif layer.kind in yolo_config.HEADS:
                prev = module([_joined(s) for s in srcs])
            else:  # a C2f takes a concatenation as its parts (its first conv is 1 x 1)
                prev = module(srcs[0] if layer.kind == "C2f" else _joined(srcs[0]))
            if layer.index in self._kept:
                saved[layer.index] = prev
        return _joined(prev)

    __call__ = forward


def load(path, device=None):
    """The YOLOv8 model of an ember YOLO model directory (model.safetensors + yolo.json,
    made by `ember convert --from-ultralytics`); nothing is unpickled."""
    from . import yolo_format

    config, names, arrays, meta = yolo_format.read(path)
    meta_path, _ = yolo_format.paths(path)
    model = YoloDetector(config, arrays, names, device, meta_path, bn_eps=meta["bn_eps"])
    model.imgsz = meta["imgsz"]
    return model
