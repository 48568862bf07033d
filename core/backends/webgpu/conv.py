"""conv2d on WebGPU: an implicit GEMM (shaders/conv2d.wgsl) with bias and activation
fused, planned in blocks that fit the adapter's limits.

The contract's default (composites.conv2d) copies the zero-padded input, then its whole
im2col matrix (Cg*KH*KW x OH*OW per image and group, 9x the input for a 3x3 kernel),
then runs a batched matmul, a bias pass and an activation pass. Here one kernel reads the
input through each output pixel's window (padding is a bounds test) and stores
activation(sum + bias); the only copy is the weight's, transposed to [G, K, O/G rounded
up to 4] so that an invocation reads 4 output channels' weights as one vec4 (the
weight's size, against an im2col matrix of millions of elements at 640).

A launch covers a block: images x groups x output channels x output rows x input
channels. The whole convolution is one block unless that would pass a limit, and a block
that does is halved (recursively) along the dim that holds most of the excess:
- a binding over the adapter's maximum (split_limit): the dim of the operand's largest
  extent in elements (the input by images, groups, input channels or output rows, each
  half binding only the input rows its windows reach; the output by images, groups,
  output channels or rows; the weight by groups, input or output channels; the bias by
  groups or output channels);
- more than max_groups workgroups along x (output rows) or z (images, groups);
- lavapipe's loop cap (loopcap.py): KH*KW*(input channels + 1) iterations per
  invocation at most loopcap.BUDGET, else input channels.
A block that no halving brings under a limit (one output row of one channel wider than
a binding) is refused with UnsupportedOp naming the limit.
Input channels split into parts accumulated into the output (acc): only the last part
adds the bias and applies the activation (epi_on).
"""

from ...errors import UnsupportedOp
from ...intmath import ceil_div
from ...layout import Layout
from ...ops import UNARY
from . import loopcap
from .shapes import span

OP = "conv2d"
TN = 4  # output pixels per invocation, WG apart
WG = 64  # invocations per workgroup, along pixels
MT = 8  # output channels per invocation (TM4 * 4) where there are that many


class _Conv:
    """The facts of one conv2d call that every block shares."""

    __slots__ = (
        "be", "t", "x", "lx", "wt", "ogp", "bias", "lbias", "out", "shape", "kernel",
        "stride", "padding", "dilation", "groups", "og", "cg", "oh", "ow", "pipe", "tm4",
    )  # fmt: skip


# dim -> the _Block fields of its start and size
_FIELDS = {
    "n": ("i0", "ni"),
    "g": ("g0", "ng"),
    "c": ("c0", "nc"),
    "m": ("m0", "nm"),
    "r": ("r0", "nr"),
}


class _Block:
    """Images [i0, i0+ni), groups [g0, g0+ng), input channels [c0, c0+nc) and output
    channels [m0, m0+nm) within a group, output rows [r0, r0+nr)."""

    __slots__ = ("i0", "ni", "g0", "ng", "c0", "nc", "m0", "nm", "r0", "nr")

    def __init__(self, i0, ni, g0, ng, c0, nc, m0, nm, r0, nr):
        self.i0, self.ni, self.g0, self.ng = i0, ni, g0, ng
        self.c0, self.nc, self.m0, self.nm, self.r0, self.nr = c0, nc, m0, nm, r0, nr

    def halves(self, dim):
        """The block cut in two along `dim` (output channels at a multiple of 4: vec4s of
        the weight)."""
        first, count = _FIELDS[dim]
        start, size = getattr(self, first), getattr(self, count)
        half = max(4, size // 2 // 4 * 4) if dim == "m" else size // 2
        out = []
        for s, n in ((start, half), (start + half, size - half)):
            b = _Block(*(getattr(self, f) for f in _Block.__slots__))
            setattr(b, first, s)
            setattr(b, count, n)
            out.append(b)
        return out

    def can_split(self, dim):
        return getattr(self, _FIELDS[dim][1]) > (4 if dim == "m" else 1)


# On CPU adapters the kernel runs convolutions with at most this many output channels per
# group and a kernel larger than 1x1; see runs_here.
CPU_ADAPTER_MAX_CHANNELS = 32


def runs_here(be, lx, lw, stride, padding, dilation, groups, dtype):
    """Whether this kernel runs the convolution, or the contract's composite (im2col +
    matmul), which is faster for some shapes on CPU adapters. Always the kernel on the gpu
    kernel set (reading the input in place instead of an im2col matrix 9x its size is
    what GPUs are fast at; not measured here), and wherever the composite's im2col matrix
    would exceed one binding. On CPU adapters, measured on lavapipe (benchmarks/
    conv_wgpu.py, YOLOv8 layers at 640, 2 loaded cores; composite -> kernel, ms): 3->16
    k3 s2 at 640^2 7419 -> 2023, 16->32 k3 s2 at 320^2 3727 -> 3124, 16->16 k3 at 160^2
    2568 -> 1368; but 32->32 k1 at 160^2 788 -> 864, 64->64 k3 at 160^2 13639 -> 19150,
    128->128 k3 at 80^2 11102 -> 23721, 192->128 k1 at 80^2 1752 -> 4530, 1024->512 k1 at
    20^2 2053 -> 6999: the composite's matmul (matmul_nt_sg, subgroup broadcasts) does
    more arithmetic per load than this portable kernel, which wins only where there is
    little arithmetic per input pixel and the composite's copies dominate."""
    if be.runtime.kernel_set != "cpu-adapter":
        return True
    n, _, h, width = lx.shape
    o, cg, kh, kw = lw.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (width + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cols = n * groups * cg * kh * kw * oh * ow * be.runtime.type_of(dtype, OP).size
    if cols > be.runtime.split_limit:
        return True
    return kh * kw > 1 and o // groups <= CPU_ADAPTER_MAX_CHANNELS


def conv2d(be, x, lx, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation):
    """See Backend.conv2d; float dtypes (f32, f16, bf16)."""
    t = be.runtime.type_of(dtype, OP)
    n, _, h, width = lx.shape
    o, cg, kh, kw = lw.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = be.runtime.alloc(n * o * oh * ow, dtype, OP)
    if n * o * oh * ow == 0:
        return out
    if min(lx.strides) < 0:  # the kernel walks non-negative strides
        x, lx = be.copy_strided(x, lx, dtype), Layout(lx.shape)
    cv = _Conv()
    cv.be, cv.t, cv.x, cv.lx, cv.out, cv.bias, cv.lbias = be, t, x, lx, out, bias, lbias
    cv.shape, cv.kernel, cv.groups, cv.og, cv.cg = lx.shape, (kh, kw), groups, o // groups, cg
    cv.stride, cv.padding, cv.dilation, cv.oh, cv.ow = stride, padding, dilation, oh, ow
    cv.tm4 = MT // 4 if cv.og >= MT else 1
    cv.wt, cv.ogp = _weight_columns(be, w, lw, groups, dtype, cv.tm4)
    spec = {
        "S": t.storage,
        "ROUND": t.round,
        "TM4": cv.tm4,
        "TN": TN,
        "WG": WG,
        "ACT": "x" if activation is None else UNARY[activation].wgsl,
    }
    if activation is not None:
        spec["ACTIVATION"] = activation  # for the pipeline's label (ACT is left out of it)
    cv.pipe = be.runtime.kernel(OP, t, spec, OP)
    _run(cv, _Block(0, n, 0, groups, 0, cg, 0, cv.og, 0, oh), acc=False, last=True)
    return out


def _weight_columns(be, w, lw, groups, dtype, tm4):
    """w (O, Cg, KH, KW) as a contiguous (G, Cg*KH*KW, ogp) storage: per group, one row
    of output channels per step of K, zero-padded to ogp channels: a multiple of 4, plus
    4 * (tm4 - 1), so that an invocation's tile of 4 * tm4 channels starting at any
    multiple of 4 below og reads inside its row."""
    o, cg, kh, kw = lw.shape
    og, k = o // groups, cg * kh * kw
    ogp = ceil_div(og, 4) * 4 + 4 * (tm4 - 1)
    src = lw.reshape((groups, og, k))
    if src is None:  # a weight view the strides cannot regroup: copy it first
        w, src = be.copy_strided(w, lw, dtype), Layout((groups, og, k))
    shape = (groups, k, ogp)
    wt = be.full(shape, 0.0, dtype) if ogp != og else be.empty(shape, dtype)
    be.copy_into(wt, Layout(shape).narrow(2, 0, og), w, src.transpose(1, 2), dtype)
    return wt, ogp


def _input_rows(cv, b):
    """First input row and number of rows the windows of output rows [r0, r0+nr) reach
    (at least one row, so that a block of windows wholly in the padding binds something)."""
    h = cv.shape[2]
    (sh, _), (ph, _), (dh, _) = cv.stride, cv.padding, cv.dilation
    lo = max(0, b.r0 * sh - ph)
    hi = min(h, (b.r0 + b.nr - 1) * sh - ph + (cv.kernel[0] - 1) * dh + 1)
    if hi <= lo:
        return 0, 1
    return lo, hi - lo


def _operands(cv, b):
    """{name: (storage, first element, elements spanned, {dim: elements of the span
    along dim})} of the block's bindings."""
    xs = cv.lx.strides
    lo, rows = _input_rows(cv, b)
    khkw = cv.kernel[0] * cv.kernel[1]
    k = cv.cg * khkw
    pix = cv.oh * cv.ow
    o = cv.og * cv.groups
    tile = 4 * cv.tm4
    nmp = ceil_div(b.nm, tile) * tile  # the channels the block's invocations read
    ops = {
        "x": (
            cv.x,
            cv.lx.offset + b.i0 * xs[0] + (b.g0 * cv.cg + b.c0) * xs[1] + lo * xs[2],
            [b.ni, b.ng, b.nc, rows, cv.shape[3]],
            [xs[0], cv.cg * xs[1], xs[1], xs[2], xs[3]],
            ("n", "g", "c", "r", None),
        ),
        "w": (
            cv.wt,
            (b.g0 * k + b.c0 * khkw) * cv.ogp + b.m0,
            [b.ng, b.nc, khkw, nmp],
            [k * cv.ogp, khkw * cv.ogp, cv.ogp, 1],
            ("g", "c", None, "m"),
        ),
        "y": (
            cv.out,
            b.i0 * o * pix + (b.g0 * cv.og + b.m0) * pix + b.r0 * cv.ow,
            [b.ni, b.ng, b.nm, b.nr, cv.ow],
            [o * pix, cv.og * pix, pix, cv.ow, 1],
            ("n", "g", "m", "r", None),
        ),
    }
    if cv.bias is not None:
        bs = cv.lbias.strides[0]
        ops["bias"] = (
            cv.bias,
            cv.lbias.offset + (b.g0 * cv.og + b.m0) * bs,
            [b.ng, b.nm],
            [cv.og * bs, bs],
            ("g", "m"),
        )
    return {
        name: (
            st,
            first,
            span(shape, strides),
            {d: (n - 1) * s for d, n, s in zip(dims, shape, strides, strict=True) if d},
        )
        for name, (st, first, shape, strides, dims) in ops.items()
    }


def _excess(cv, b):
    """(what, size, {dim: how much of the excess it holds}) of the first limit the block
    passes (lavapipe's loop cap, a grid dimension, a binding), or None."""
    khkw = cv.kernel[0] * cv.kernel[1]
    if not loopcap.fits(khkw * (b.nc + 1)):
        return "loop iterations", khkw * (b.nc + 1), {"c": 1}
    rt = cv.be.runtime
    if ceil_div(b.nr * cv.ow, TN * WG) > rt.max_groups:
        return "workgroups along x", ceil_div(b.nr * cv.ow, TN * WG), {"r": 1}
    if b.ni * b.ng > rt.max_groups:
        return "workgroups along z", b.ni * b.ng, {"n": b.ni, "g": b.ng}
    for name, (_, _, n, along) in _operands(cv, b).items():
        if n * cv.t.size > rt.split_limit:
            return f"bytes of the {name} binding", n * cv.t.size, along
    return None


def _run(cv, b, acc, last):
    """Launch block b, or its halves along the dim that holds most of a limit's excess
    where it passes one. `acc`: add to what the output holds (a later part of the input
    channels); `last`: the last part, which applies bias and activation."""
    excess = _excess(cv, b)
    if excess is None:
        _launch(cv, b, acc, last)
        return
    what, size, along = excess
    dims = [d for d in along if b.can_split(d)]
    if not dims:
        raise UnsupportedOp(
            f"conv2d: {size} {what} exceed the adapter's limit even for a block of one "
            f"image, group, input channel, output row and 4 output channels",
            op=OP,
        )
    lo, hi = b.halves(max(dims, key=along.get))
    if lo.nc != b.nc:  # input channels in two parts: the second adds to the first
        _run(cv, lo, acc, False)
        _run(cv, hi, True, last)
    else:
        _run(cv, lo, acc, last)
        _run(cv, hi, acc, last)


def _launch(cv, b, acc, last):
    rt, size = cv.be.runtime, cv.t.size
    ranges, rel = {}, {}
    for name, (st, first, n, _) in _operands(cv, b).items():
        ranges[name], rel[name] = rt.bind(st, first, first + n, size, OP)
    if cv.bias is None:  # the kernel declares the binding; it reads none of it
        ranges["bias"], rel["bias"] = ranges["w"], 0
    xs = cv.lx.strides
    bs = cv.lbias.strides[0] if cv.bias is not None else 0
    pix = cv.oh * cv.ow
    (sh, sw), (ph, pw), (dh, dw) = cv.stride, cv.padding, cv.dilation
    k = cv.cg * cv.kernel[0] * cv.kernel[1]
    params = {
        "npix": b.nr * cv.ow,
        "ow": cv.ow,
        "ng": b.ng,
        "x_off": rel["x"],
        "x_ns": xs[0],
        "x_gs": cv.cg * xs[1],
        "x_cs": xs[1],
        "x_rs": xs[2],
        "x_ws": xs[3],
        "x_row0": _input_rows(cv, b)[0],
        "in_h": cv.shape[2],
        "in_w": cv.shape[3],
        "oy0": b.r0,
        "kh": cv.kernel[0],
        "kw": cv.kernel[1],
        "sh": sh,
        "sw": sw,
        "ph": ph,
        "pw": pw,
        "dh": dh,
        "dw": dw,
        "c": b.nc,
        "w_off": rel["w"] // 4,
        "w_gs": k * cv.ogp // 4,
        "w_ks": cv.ogp // 4,
        "m": b.nm,
        "y_off": rel["y"],
        "y_ns": cv.og * cv.groups * pix,
        "y_gs": cv.og * pix,
        "y_cs": pix,
        "acc": int(acc),
        "epi_on": int(last),
        "has_bias": int(cv.bias is not None),
        "bias_off": rel["bias"],
        "bias_gs": cv.og * bs,
        "bias_stride": bs,
    }
    groups = (ceil_div(b.nr * cv.ow, TN * WG), ceil_div(b.nm, 4 * cv.tm4), b.ni * b.ng)
    bindings = [ranges["x"], ranges["w"], ranges["y"], ranges["bias"]]
    rt.launch(cv.pipe, params, bindings, groups)
