"""A YOLOv8 detection model in plain PyTorch, written for the tests from Ultralytics'
documented architecture: the reference ember's model is checked against. Modules carry
Ultralytics' names (model.<i>.cv1.conv.weight, ...), BatchNorm stays unfolded (eps 1e-3
as Ultralytics sets it), and `DetectionModel` pickles like an Ultralytics checkpoint's
model object (its class name, `yaml`, `names`), so torch.save of it makes a test .pt.

Random weights give no boxes (NOTES.md), so `reinit` draws conv weights at He scale,
BatchNorm statistics around 1, and class biases that put some scores above 0.25."""

import torch
from torch import nn
from torch.nn import functional as F


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=1e-3)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut):
        super().__init__()
        self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c1, c2, n, shortcut):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c)
        self.cv2 = Conv((2 + n) * self.c, c2)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k):
        super().__init__()
        self.cv1, self.cv2 = Conv(c1, c1 // 2), Conv(c1 // 2 * 4, c2)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        y = [self.cv1(x)]
        for _ in range(3):
            y.append(self.m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class Concat(nn.Module):
    def forward(self, xs):
        return torch.cat(xs, 1)


class DFL(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, 1, 1, bias=False).requires_grad_(False)
        self.conv.weight.data[:] = torch.arange(c, dtype=torch.float).view(1, c, 1, 1)
        self.c = c

    def forward(self, x):  # (b, 4*c, a) -> (b, 4, a)
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.c, a).transpose(2, 1).softmax(1)).view(b, 4, a)


class Detect(nn.Module):
    def __init__(self, nc, reg_max, ch, strides):
        super().__init__()
        c2, c3 = max(16, ch[0] // 4, reg_max * 4), max(ch[0], min(nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1))
            for c in ch
        )
        self.cv3 = nn.ModuleList(
            nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in ch
        )
        self.dfl = DFL(reg_max)
        self.nc, self.reg_max, self.strides = nc, reg_max, strides

    def forward(self, xs):
        b = xs[0].shape[0]
        outs = [
            torch.cat((self.cv2[i](x), self.cv3[i](x)), 1).view(b, 4 * self.reg_max + self.nc, -1)
            for i, x in enumerate(xs)
        ]
        box, cls = torch.cat(outs, 2).split((4 * self.reg_max, self.nc), 1)
        points, steps = [], []
        for x, s in zip(xs, self.strides, strict=True):
            h, w = x.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
            points.append(torch.stack((sx, sy), -1).view(-1, 2))
            steps.append(torch.full((h * w, 1), float(s)))
        anchors, stride = torch.cat(points).T[None], torch.cat(steps).T[None]
        lt, rb = self.dfl(box).chunk(2, 1)
        x1y1, x2y2 = anchors - lt, anchors + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * stride
        return torch.cat((dbox, cls.sigmoid()), 1)


class Pose(Detect):
    def __init__(self, nc, reg_max, ch, strides, kpt_shape):
        super().__init__(nc, reg_max, ch, strides)
        self.kpt_shape, nk = kpt_shape, kpt_shape[0] * kpt_shape[1]
        c4 = max(ch[0] // 4, nk)
        self.cv4 = nn.ModuleList(nn.Sequential(Conv(c, c4, 3), Conv(c4, c4, 3), nn.Conv2d(c4, nk, 1)) for c in ch)

    def forward(self, xs):
        det = super().forward(xs)
        b, ndim = xs[0].shape[0], self.kpt_shape[1]
        kpt = torch.cat([self.cv4[i](x).view(b, -1, x.shape[2] * x.shape[3]) for i, x in enumerate(xs)], 2)
        ax, ay, st = [], [], []
        for x, s in zip(xs, self.strides, strict=True):
            h, w = x.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
            ax.append(sx.reshape(-1))
            ay.append(sy.reshape(-1))
            st.append(torch.full((h * w,), float(s)))
        ax, ay, st = torch.cat(ax), torch.cat(ay), torch.cat(st)
        y = kpt.clone()
        if ndim == 3:
            y[:, 2::3] = y[:, 2::3].sigmoid()
        y[:, 0::ndim] = (y[:, 0::ndim] * 2.0 + (ax - 0.5)) * st
        y[:, 1::ndim] = (y[:, 1::ndim] * 2.0 + (ay - 0.5)) * st
        return torch.cat((det, y), 1)


class DetectionModel(nn.Module):
    """Built from ember's parsed config (yolo_config.parse), whose channel arithmetic the
    real checkpoint's test checks tensor by tensor."""

    def __init__(self, yaml, config, names):
        super().__init__()
        self.yaml, self.names = yaml, names
        layers = []
        for ly in config.layers:
            a, c1 = ly.args, ly.c_in[0]
            if ly.kind == "Conv":
                m = Conv(c1, ly.c_out, a["k"], a["s"])
            elif ly.kind == "C2f":
                m = C2f(c1, ly.c_out, a["n"], a["shortcut"] and c1 == ly.c_out)
            elif ly.kind == "SPPF":
                m = SPPF(c1, ly.c_out, a["k"])
            elif ly.kind == "nn.Upsample":
                m = nn.Upsample(None, a["scale"], "nearest")
            elif ly.kind == "Concat":
                m = Concat()
            elif ly.kind == "Pose":
                m = Pose(a["nc"], a["reg_max"], ly.c_in, a["strides"], a["kpt_shape"])
            else:
                m = Detect(a["nc"], a["reg_max"], ly.c_in, a["strides"])
            m.f = ly.source
            layers.append(m)
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        outs = {-1: x}
        for i, m in enumerate(self.model):
            ins = [outs[j] for j in m.f]
            x = m(ins if isinstance(m, (Concat, Detect)) else ins[0])
            outs[i] = x
        return x


@torch.no_grad()
def reinit(model, seed):
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.Conv2d) and m.weight.requires_grad:
            fan_in = m.weight[0].numel()
            m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
            if m.bias is not None:
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.5)
        elif isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.weight.copy_(torch.rand(n, generator=g) + 0.5)
            m.bias.copy_(torch.randn(n, generator=g) * 0.2)
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.2)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
    for seq in model.model[-1].cv3:  # class logits spread around 0: some anchors pass 0.25
        seq[-1].weight.mul_(4.0)
        seq[-1].bias.copy_(torch.randn(seq[-1].bias.shape, generator=g) - 1.0)
    return model.eval()
