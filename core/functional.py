"""Composite ops written once from primitives: padding, convolutions, pooling, resizing.

Convolutions are Backend.conv2d: by default im2col + matmul composed from copy_strided
and matmul (backends/composites.py); the numpy backend builds the columns a band of
output rows at a time (backends/array_conv.py).
"""

import math
import numbers

from . import dtype as dt
from .errors import InvalidArgument, ShapeMismatch, UnsupportedDType, fmt_shape
from .layout import Layout
from .ops import UNARY
from .shape import broadcast_shapes, normalize_dim
from .tensor import Tensor, _allocating, full, tensor


def _pair(value, op, name):
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) != 2:
        raise ValueError(f"{op}: {name} must be an int or a pair, got {value}")
    return value


def _int_pair(value, op, name, minimum):
    """_pair of integers each at least `minimum` (stride=0 once divided by zero)."""
    pair = (value, value) if isinstance(value, (int, float)) else _pair(value, op, name)
    return tuple(_at_least(v, op, name, minimum, value) for v in pair)


def _at_least(v, op, name, minimum, given=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
        raise InvalidArgument(
            f"{op}: {name} must be an integer of at least {minimum}, got "
            f"{v if given is None else given!r}",
            op=op,
            name=name,
            value=v,
        )
    return int(v)


def _check_rank(op, x, rank):
    if x.ndim != rank:
        raise ShapeMismatch(
            f"{op}: expects a {rank}-d input, got {fmt_shape(x.shape)}", op=op, shapes=(x.shape,)
        )


def pad(x, pad, mode="constant", value=0.0):
    """PyTorch's F.pad: `pad` lists (before, after) pairs from the last dim backwards.
    Negative amounts crop. Modes: constant, replicate."""
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeMismatch(
            f"pad: {len(pad)} padding values do not fit a tensor of shape {fmt_shape(x.shape)}",
            op="pad",
            shapes=(x.shape,),
        )
    amounts = {}
    for i in range(len(pad) // 2):
        amounts[x.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    # Crop first, so only non-negative amounts remain.
    for d, (before, after) in amounts.items():
        if before < 0 or after < 0:
            start = max(0, -before)
            length = x.shape[d] - start - max(0, -after)
            if length < 0:
                raise ShapeMismatch(
                    f"pad: cropping more than dim {d} of {fmt_shape(x.shape)}",
                    op="pad",
                    shapes=(x.shape,),
                )
            x = x.narrow(d, start, length)
            amounts[d] = (max(0, before), max(0, after))
    if all(b == 0 and a == 0 for b, a in amounts.values()):
        return x
    if mode == "constant":
        shape = list(x.shape)
        for d, (before, after) in amounts.items():
            shape[d] += before + after
        storage = x.backend.full(shape, x._scalar("pad", value), x.dtype)
        region = Layout(shape)
        for d, (before, _) in amounts.items():
            region = region.narrow(d, before, x.shape[d])
        if x.numel():
            x.backend.copy_into(storage, region, x.storage, x.layout, x.dtype)
        return x._new(storage, tuple(shape))
    if mode == "replicate":
        for d, (before, after) in amounts.items():
            n = x.shape[d]
            if n == 0:
                raise ShapeMismatch(f"pad: replicate needs a non-empty dim {d}", op="pad")
            ids = [min(max(i - before, 0), n - 1) for i in range(n + before + after)]
            x = x.index_select(d, tensor(ids, dtype=dt.i64, device=x.device))
        return x
    raise ValueError(f"pad: unknown mode {mode!r} (constant, replicate)")


def _windows(x, kh, kw, stride, dilation, op):
    """A (N, C, OH, OW, KH, KW) view of the sliding windows over x (N, C, H, W)."""
    n, c, h, w = x.shape
    sh, sw = stride
    dh, dw = dilation
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise ShapeMismatch(
            f"{op}: kernel {kh}x{kw} (dilation {dh}x{dw}) larger than the padded input "
            f"{fmt_shape(x.shape)}",
            op=op,
            shapes=(x.shape,),
        )
    s = x.layout.strides
    layout = Layout(
        (n, c, oh, ow, kh, kw),
        (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw),
        x.layout.offset,
    )
    return x._view(layout)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None):
    """PyTorch's F.conv2d, then `activation` (one of LINEAR_ACTIVATIONS, or None) applied
    by Backend.conv2d while the output is made (numpy: band by band, in cache)."""
    args = _conv2d_args("conv2d", x, weight, bias, stride, padding, dilation, groups, activation)
    shape, (bias, stride, padding, dilation, groups) = args
    storage = x.backend.conv2d(
        x.storage, x.layout, *_weights(weight, bias), x.dtype, stride, padding, dilation, groups,
        activation,
    )  # fmt: skip
    return x._new(storage, shape)


def conv2d_cat(xs, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None):
    """conv2d(cat(xs, 1), ...) without necessarily making the concatenation: a backend
    may read each part where it lies (numpy: a 1 x 1 convolution, YOLO's C2f and SPPF
    ends, whose concatenations were ~11 ms of copies in a yolov8s forward)."""
    op = "conv2d_cat"
    xs = list(xs)
    if not xs:
        raise ValueError(f"{op}: expects a non-empty list of tensors")
    first = xs[0]
    for t in xs:
        _check_rank(op, t, 4)
        first._check_same(op, t)
        if (t.shape[0],) + t.shape[2:] != (first.shape[0],) + first.shape[2:]:
            raise ShapeMismatch(
                f"{op}: shapes {' '.join(fmt_shape(t.shape) for t in xs)} differ outside dim 1",
                op=op,
                shapes=[t.shape for t in xs],
            )
    joined = (first.shape[0], sum(t.shape[1] for t in xs), *first.shape[2:])
    args = _conv2d_args(op, first, weight, bias, stride, padding, dilation, groups, activation,
                        joined)  # fmt: skip
    shape, (bias, stride, padding, dilation, groups) = args
    storage = first.backend.conv2d_cat(
        [(t.storage, t.layout) for t in xs], *_weights(weight, bias), first.dtype, stride,
        padding, dilation, groups, activation,
    )  # fmt: skip
    return first._new(storage, shape)


def _weights(weight, bias):
    """A convolution's weight and bias as the backend takes them: storages and layouts."""
    if bias is None:
        return weight.storage, weight.layout, None, None
    return weight.storage, weight.layout, bias.storage, bias.layout


def _conv2d_args(op, x, weight, bias, stride, padding, dilation, groups, activation, xshape=None):
    """conv2d's arguments checked against x (of shape xshape, x's own where None) and
    weight: (the output's shape, (bias as (O,), stride, padding, dilation, groups))."""
    _check_rank(op, x, 4)
    _check_rank(op, weight, 4)
    x._check_same(op, weight)
    xshape = x.shape if xshape is None else xshape
    n, c, _, _ = xshape
    o, cg, kh, kw = weight.shape
    stride = _int_pair(stride, op, "stride", 1)
    dilation = _int_pair(dilation, op, "dilation", 1)
    ph, pw = _int_pair(padding, op, "padding", 0)
    groups = _at_least(groups, op, "groups", 1)
    if c != cg * groups or o % groups:
        raise ShapeMismatch(
            f"{op}: input {fmt_shape(xshape)} and weight {fmt_shape(weight.shape)} do not agree "
            f"with groups={groups} (need in_channels {c} = {cg} x groups, out_channels {o} "
            f"divisible by groups)",
            op=op,
            shapes=(xshape, weight.shape),
        )
    oh, ow = (
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, p, d, k, s in zip(xshape[2:], (ph, pw), dilation, (kh, kw), stride, strict=True)
    )
    if oh <= 0 or ow <= 0:
        raise ShapeMismatch(
            f"{op}: kernel {kh}x{kw} (dilation {dilation[0]}x{dilation[1]}) larger than the "
            f"padded input {fmt_shape((n, c, xshape[2] + 2 * ph, xshape[3] + 2 * pw))}",
            op=op,
            shapes=(xshape,),
        )
    if bias is not None:
        x._check_same(op, bias)
        bias = bias.reshape(o)
    if activation is not None:
        if activation not in LINEAR_ACTIVATIONS:
            raise ValueError(
                f"{op}: unknown activation {activation!r}; known: "
                f"{', '.join(sorted(LINEAR_ACTIVATIONS))}"
            )
        x._require_kind(activation, UNARY[activation].kinds)
    return (n, o, oh, ow), (bias, stride, (ph, pw), dilation, groups)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    _check_rank("conv1d", x, 3)
    _check_rank("conv1d", weight, 3)
    out = conv2d(
        x.unsqueeze(2), weight.unsqueeze(2), bias, (1, stride), (0, padding), (1, dilation), groups
    )
    return out.squeeze(2)


def _flip(x, dims):
    for d in dims:
        n = x.shape[d]
        x = x.index_select(d, tensor(list(range(n - 1, -1, -1)), dtype=dt.i64, device=x.device))
    return x


def conv_transpose2d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    """The adjoint of conv2d: dilate the input by `stride`, pad, and convolve with the
    flipped, channel-swapped kernel."""
    op = "conv_transpose2d"
    _check_rank(op, x, 4)
    _check_rank(op, weight, 4)
    x._check_same(op, weight)
    n, c, h, w = x.shape
    cin, cog, kh, kw = weight.shape
    if c != cin or c % groups:
        raise ShapeMismatch(
            f"{op}: input {fmt_shape(x.shape)} and weight {fmt_shape(weight.shape)} do not agree "
            f"(weight dim 0 must equal in_channels {c}, divisible by groups={groups})",
            op=op,
            shapes=(x.shape, weight.shape),
        )
    sh, sw = _pair(stride, op, "stride")
    ph, pw = _pair(padding, op, "padding")
    oph, opw = _pair(output_padding, op, "output_padding")
    dh, dw = _pair(dilation, op, "dilation")
    if sh > 1 or sw > 1:
        hd, wd = (h - 1) * sh + 1, (w - 1) * sw + 1
        storage = x.backend.full((n, c, hd, wd), 0, x.dtype)
        dst = Layout((n, c, hd, wd)).slice(2, 0, hd, sh).slice(3, 0, wd, sw)
        x.backend.copy_into(storage, dst, x.storage, x.layout, x.dtype)
        x = x._new(storage, (n, c, hd, wd))
    eh, ew = dh * (kh - 1) - ph, dw * (kw - 1) - pw
    x = pad(x, (ew, ew + opw, eh, eh + oph))
    w2 = weight.reshape(groups, cin // groups, cog, kh, kw).transpose(1, 2)
    w2 = _flip(w2.reshape(groups * cog, cin // groups, kh, kw), (2, 3))
    return conv2d(x, w2, bias, 1, 0, (dh, dw), groups)


def conv_transpose1d(
    x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    _check_rank("conv_transpose1d", x, 3)
    _check_rank("conv_transpose1d", weight, 3)
    out = conv_transpose2d(
        x.unsqueeze(2),
        weight.unsqueeze(2),
        bias,
        (1, stride),
        (0, padding),
        (0, output_padding),
        groups,
        (1, dilation),
    )
    return out.squeeze(2)


def _pool_windows(x, kernel_size, stride, padding, dilation, fill, op):
    _check_rank(op, x, 4)
    kh, kw = _int_pair(kernel_size, op, "kernel_size", 1)
    stride = _int_pair(stride if stride is not None else (kh, kw), op, "stride", 1)
    ph, pw = _int_pair(padding, op, "padding", 0)
    dilation = _int_pair(dilation, op, "dilation", 1)
    if ph > kh // 2 or pw > kw // 2:
        raise ShapeMismatch(
            f"{op}: padding {ph}x{pw} must be at most half the kernel {kh}x{kw}", op=op
        )
    if ph or pw:
        x = pad(x, (pw, pw, ph, ph), value=fill)
    return _windows(x, kh, kw, stride, dilation, op)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1):
    """The window maximum, one axis at a time as kw - 1 then kh - 1 elementwise maxima of
    shifted strided views: exact like a reduction over each window, and (numpy) 13 ms ->
    0.1 ms for YOLOv8's SPPF 5x5 pool on 20x20 maps, where a reduction over the (5, 5)
    window axes walks 25 strided elements per output one at a time."""
    fill = -math.inf if x.dtype.is_float else _min_int(x.dtype)
    windows = _pool_windows(x, kernel_size, stride, padding, dilation, fill, "max_pool2d")
    out = None
    for a in range(windows.shape[-2]):
        for b in range(windows.shape[-1]):
            tap = _window_tap(windows, a, b)
            out = tap.contiguous() if out is None else out.maximum(tap)
    return out


def _window_tap(windows, a, b):
    """The (N, C, OH, OW) view of element (a, b) of every window of a _windows view."""
    s = windows.layout.strides
    offset = windows.layout.offset + a * s[4] + b * s[5]
    return windows._view(Layout(windows.shape[:4], s[:4], offset))


def avg_pool2d(x, kernel_size, stride=None, padding=0, count_include_pad=True):
    if not x.dtype.is_float:
        raise UnsupportedDType(
            f"avg_pool2d: needs a float input, got {x.dtype.name}", op="avg_pool2d", dtype=x.dtype
        )
    total = _pool_windows(x, kernel_size, stride, padding, 1, 0.0, "avg_pool2d").sum((-2, -1))
    kh, kw = _pair(kernel_size, "avg_pool2d", "kernel_size")
    if count_include_pad or not padding:
        return total * (1.0 / (kh * kw))
    ones = full((1, 1) + x.shape[2:], 1.0, x.dtype, x.device)
    counts = _pool_windows(ones, kernel_size, stride, padding, 1, 0.0, "avg_pool2d").sum((-2, -1))
    return total / counts


def _out_size(x, size, scale_factor, op):
    """The output (height, width) and the input/output ratios, checked before any work:
    sizes of at least 1, positive finite scales, and an output the device can hold."""
    h, w = x.shape[2], x.shape[3]
    if size is not None:
        (oh, ow), ratios = _int_pair(size, op, "size", 1), None
    elif scale_factor is None:
        raise InvalidArgument(f"{op}: give size or scale_factor", op=op)
    else:
        fh, fw = (
            _pair(scale_factor, op, "scale_factor")
            if not isinstance(scale_factor, numbers.Real)
            else (scale_factor, scale_factor)
        )
        for f in (fh, fw):
            if (
                isinstance(f, bool)
                or not isinstance(f, numbers.Real)
                or not (math.isfinite(f) and f > 0)
            ):
                raise InvalidArgument(
                    f"{op}: scale_factor must be a positive finite number (or a pair), "
                    f"got {scale_factor!r}",
                    op=op,
                    value=scale_factor,
                )
        oh, ow = math.floor(h * fh), math.floor(w * fw)
        if oh < 1 or ow < 1:
            raise InvalidArgument(
                f"{op}: scale_factor {scale_factor!r} makes an empty output {oh}x{ow} from "
                f"input {fmt_shape(x.shape)}",
                op=op,
                value=scale_factor,
            )
        ratios = (1.0 / fh, 1.0 / fw)
    # Allocate (and drop) the output once before the per-row index lists are built, so a
    # size the device cannot hold is refused by the device itself, up front (a huge
    # scale once built host lists and failed inside numpy); a pooled device reuses it.
    _allocating(op, lambda: x.backend.empty((x.shape[0], x.shape[1], oh, ow), x.dtype))
    return (oh, ow), ratios or (h / oh, w / ow)


def upsample_nearest2d(x, size=None, scale_factor=None):
    _check_rank("upsample_nearest2d", x, 4)
    (oh, ow), (rh, rw) = _out_size(x, size, scale_factor, "upsample_nearest2d")
    picks = []
    for d, (out, ratio) in ((2, (oh, rh)), (3, (ow, rw))):
        n = x.shape[d]
        picks.append([min(math.floor(i * ratio), n - 1) for i in range(out)])
    repeats = [_whole_repeat(ids, x.shape[d]) for d, ids in ((2, picks[0]), (3, picks[1]))]
    if None not in repeats:
        # every row and column taken the same whole number of times: one copy of a
        # broadcast view (YOLOv8's 2x upsampling: two index_selects were 0.9 ms each on
        # its 256 x 20 x 20 map, a gather per element)
        (b, c, h, w), (sh, sw) = x.shape, repeats
        grown = x.reshape(b, c, h, 1, w, 1).expand(b, c, h, sh, w, sw)
        return grown.contiguous().reshape(b, c, h * sh, w * sw)
    for d, ids in ((2, picks[0]), (3, picks[1])):
        x = x.index_select(d, tensor(ids, dtype=dt.i64, device=x.device))
    return x


def _whole_repeat(ids, n):
    """s where ids is [0]*s + [1]*s + ... + [n-1]*s, else None."""
    s, rest = divmod(len(ids), n)
    if rest or s < 1 or any(ids[i] != i // s for i in range(len(ids))):
        return None
    return s


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=False):
    """Resize a 4-d NCHW tensor: mode 'nearest' or 'bilinear' (align_corners like PyTorch)."""
    if mode == "nearest":
        return upsample_nearest2d(x, size, scale_factor)
    if mode != "bilinear":
        raise ValueError(f"interpolate: unknown mode {mode!r} (nearest, bilinear)")
    _check_rank("interpolate", x, 4)
    if not x.dtype.is_float:
        raise UnsupportedDType(
            f"interpolate: bilinear needs a float input, got {x.dtype.name}",
            op="interpolate",
            dtype=x.dtype,
        )
    (oh, ow), ratios = _out_size(x, size, scale_factor, "interpolate")
    for d, out, ratio in ((2, oh, ratios[0]), (3, ow, ratios[1])):
        n = x.shape[d]
        lo, hi, frac = [], [], []
        for i in range(out):
            if align_corners:
                src = i * (n - 1) / (out - 1) if out > 1 else 0.0
            else:
                src = max((i + 0.5) * ratio - 0.5, 0.0)
            i0 = min(math.floor(src), n - 1)
            lo.append(i0)
            hi.append(min(i0 + 1, n - 1))
            frac.append(src - i0)
        shape = [1, 1, 1, 1]
        shape[d] = out
        wt = tensor(frac, dtype=x.dtype, device=x.device).reshape(shape)
        a = x.index_select(d, tensor(lo, dtype=dt.i64, device=x.device))
        b = x.index_select(d, tensor(hi, dtype=dt.i64, device=x.device))
        x = a * (1.0 - wt) + b * wt
    return x


def embedding(ids, weight):
    """Rows of `weight` for each id: the shape of ids plus the embedding dim."""
    if weight.ndim != 2:
        raise ShapeMismatch(
            f"embedding: weight must be 2-d, got {fmt_shape(weight.shape)}",
            op="embedding",
            shapes=(weight.shape,),
        )
    return weight.index_select(0, ids)


# Activations a linear layer can apply in its epilogue: the unary ops that take no parameter
# and map 0-d to 0-d elementwise (ember.nn.activations maps config names onto these).
LINEAR_ACTIVATIONS = frozenset(
    {"gelu", "gelu_tanh", "quick_gelu", "relu", "silu", "sigmoid", "tanh"}
)


def linear(x, weight, bias=None, activation=None, residual=None):
    """activation(x @ weight.T + bias) + residual, weight (out, in) as in PyTorch.

    x is (..., in) and runs as one 2-D GEMM; residual, when given, has the output's shape.
    Backend.linear takes it whole: the numpy backend applies bias, activation and residual
    while the GEMM's output is still in cache, in place (and splits that work over the
    cores, see backends/row_parallel.py), WebGPU as its matmul kernel stores, and the
    contract's default composes the same steps."""
    op = "linear"
    x._check_same(op, weight, *(t for t in (bias, residual) if t is not None))
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ShapeMismatch(
            f"linear: input {fmt_shape(x.shape)} and weight {fmt_shape(weight.shape)} do not "
            f"fit: the weight must be (out, in) with in = the input's last dim",
            op=op,
            shapes=(x.shape, weight.shape),
        )
    out_shape = x.shape[:-1] + (weight.shape[0],)
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ShapeMismatch(
            f"linear: bias {fmt_shape(bias.shape)} must be [{weight.shape[0]}] "
            f"for weight {fmt_shape(weight.shape)}",
            op=op,
            shapes=(weight.shape, bias.shape),
        )
    if residual is not None and residual.shape != out_shape:
        raise ShapeMismatch(
            f"linear: residual {fmt_shape(residual.shape)} must have the "
            f"output's shape {fmt_shape(out_shape)}",
            op=op,
            shapes=(out_shape, residual.shape),
        )
    if activation is not None and activation not in LINEAR_ACTIVATIONS:
        raise ValueError(
            f"linear: unknown activation {activation!r}; known: "
            f"{', '.join(sorted(LINEAR_ACTIVATIONS))}"
        )
    if activation is not None:
        x._require_kind(activation, UNARY[activation].kinds)
    x2 = x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x
    w_t = weight.t()
    r = residual.reshape(-1, out_shape[-1]) if residual is not None else None
    storage = x.backend.linear(
        x2.storage,
        x2.layout,
        w_t.storage,
        w_t.layout,
        bias.storage if bias is not None else None,
        bias.layout if bias is not None else None,
        x.dtype,
        activation,
        r.storage if r is not None else None,
        r.layout if r is not None else None,
    )
    return x._new(storage, out_shape)


def gated_activation(x, activation="silu"):
    """activation(x[..., :n]) * x[..., n:] for x [..., 2n]: a gated MLP (SwiGLU, GeGLU)
    over its gate and up projections made side by side by one GEMM, in one backend call
    (Backend.gated_activation). `activation` is one of LINEAR_ACTIVATIONS."""
    op = "gated_activation"
    if activation not in LINEAR_ACTIVATIONS:
        raise ValueError(
            f"{op}: unknown activation {activation!r}; known: "
            f"{', '.join(sorted(LINEAR_ACTIVATIONS))}"
        )
    x._require_kind(activation, UNARY[activation].kinds)
    if x.ndim < 1 or x.shape[-1] % 2:
        raise ShapeMismatch(
            f"{op}: x must be [..., 2n] (gate and up halves), got {fmt_shape(x.shape)}",
            op=op,
            shapes=(x.shape,),
        )
    storage = x.backend.gated_activation(x.storage, x.layout, activation, x.dtype)
    return x._new(storage, x.shape[:-1] + (x.shape[-1] // 2,))


def rope(x, cos, sin, interleaved=False):
    """Rotary position embedding of x [..., T, D] with cos/sin tables [T, D/2], or
    [B, T, D/2] for an x [B, ..., T, D] whose batch rows have positions of their own (a
    left-padded batch: the tables gathered per row).

    Pairs are (2i, 2i+1) when `interleaved`, else (i, i + D/2) (half-split, as in Hugging
    Face Llama). See Backend.rope."""
    x._require_kind("rope", "f")
    x._check_same("rope", cos)
    x._check_same("rope", sin)
    if x.ndim < 2 or x.shape[-1] % 2:
        raise ShapeMismatch(
            f"rope: x must be [..., T, D] with an even D, got {fmt_shape(x.shape)}",
            op="rope",
            shapes=(x.shape,),
        )
    t, half = x.shape[-2], x.shape[-1] // 2
    allowed = [(t, half)] + ([(x.shape[0], t, half)] if x.ndim >= 3 else [])
    for table in (cos, sin):
        if table.shape not in allowed or table.shape != cos.shape:
            want = " or ".join(fmt_shape(s) for s in allowed)
            raise ShapeMismatch(
                f"rope: cos/sin must be {want} for x {fmt_shape(x.shape)}, "
                f"got {fmt_shape(table.shape)}",
                op="rope",
                shapes=(x.shape, table.shape),
            )
    return x._new(
        x.backend.rope(
            x.storage,
            x.layout,
            cos.storage,
            cos.layout,
            sin.storage,
            sin.layout,
            x.dtype,
            interleaved,
        ),
        x.shape,
    )


def scaled_dot_product_attention(q, k, v, mask=None, scale=None, is_causal=False, grid_bias=None):
    """softmax(q @ k^T * scale + mask) @ v, as torch's F.scaled_dot_product_attention.

    q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] (batch dims broadcast); `mask` is
    added to the scores (a float tensor broadcastable to [..., Tq, Tk], -inf to hide a
    key); `is_causal` hides each query's later keys (queries are the last Tq of the Tk
    positions, as when a cache holds the earlier ones); scale defaults to 1/sqrt(D).
    `grid_bias` = (rows [..., Tq, Kh], cols [..., Tq, Kw]) for keys on a Kh x Kw grid
    (Tk = Kh * Kw, row-major) adds rows[i, j // Kw] + cols[i, j % Kw] to score (i, j):
    decomposed relative positions, whose whole (Tq, Tk) sum is as big as the scores.
    Backend.scaled_dot_product_attention computes it in tiles of queries, so a long
    sequence's whole score matrix (or grid bias) never exists at once."""
    op = "scaled_dot_product_attention"
    q._require_kind(op, "f")
    extra = [mask] if mask is not None else []
    if grid_bias is not None:
        if not (isinstance(grid_bias, (tuple, list)) and len(grid_bias) == 2):
            raise InvalidArgument(
                f"{op}: grid_bias must be a pair (rows, cols) of tensors, got "
                f"{type(grid_bias).__name__}",
                op=op,
            )
        extra += list(grid_bias)
    q._check_same(op, k, v, *extra)
    if (
        q.ndim < 2
        or k.ndim < 2
        or v.ndim < 2
        or q.shape[-1] != k.shape[-1]
        or k.shape[-2] != v.shape[-2]
    ):
        raise ShapeMismatch(
            f"{op}: q {fmt_shape(q.shape)}, k {fmt_shape(k.shape)} and v {fmt_shape(v.shape)} "
            f"must be [..., Tq, D], [..., Tk, D] and [..., Tk, Dv]",
            op=op,
            shapes=(q.shape, k.shape, v.shape),
        )
    tq, tk = q.shape[-2], k.shape[-2]
    if is_causal and tq > tk:
        raise ShapeMismatch(
            f"{op}: is_causal needs at least as many keys ({tk}) as queries ({tq})",
            op=op,
            shapes=(q.shape, k.shape),
        )
    batch = broadcast_shapes(op, q.shape[:-2], k.shape[:-2], v.shape[:-2])
    lq = q.layout.broadcast_to(batch + q.shape[-2:], op)
    lk = k.layout.broadcast_to(batch + k.shape[-2:], op)
    lv = v.layout.broadcast_to(batch + v.shape[-2:], op)
    lmask = mask.layout.broadcast_to(batch + (tq, tk), op) if mask is not None else None
    grid = None
    if grid_bias is not None:
        rows, cols = grid_bias
        kh, kw = rows.shape[-1] if rows.ndim else 0, cols.shape[-1] if cols.ndim else 0
        if rows.ndim < 2 or cols.ndim < 2 or kh * kw != tk:
            raise ShapeMismatch(
                f"{op}: grid_bias rows {fmt_shape(rows.shape)} and cols "
                f"{fmt_shape(cols.shape)} must be [..., Tq, Kh] and [..., Tq, Kw] with "
                f"Kh * Kw = Tk = {tk}",
                op=op,
                shapes=(q.shape, k.shape, rows.shape, cols.shape),
            )
        grid = (
            rows.storage,
            rows.layout.broadcast_to(batch + (tq, kh), op),
            cols.storage,
            cols.layout.broadcast_to(batch + (tq, kw), op),
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    out = q.backend.scaled_dot_product_attention(
        q.storage,
        lq,
        k.storage,
        lk,
        v.storage,
        lv,
        mask.storage if mask is not None else None,
        lmask,
        scale,
        q.dtype,
        causal=bool(is_causal),
        **({"grid_bias": grid} if grid is not None else {}),
    )
    return q._new(out, batch + (tq, v.shape[-1]))


def attention_step(qkv, keys, values, length, n_heads, scale=None, rope=None, interleaved=False):
    """One decode step's self-attention over a KV cache, in one backend call
    (Backend.attention_step): with `rope` = (cos, sin), the [1, D/2] (or [B, 1, D/2])
    rotary tables of the position, the q and k heads of `qkv` [B, 1, n_heads + 2 * KV, D]
    rotated first; the k and v heads written into the cache tensors `keys` and `values`
    [B, KV, max_len, D] at position `length`; the q heads' attention over the cache's
    first length + 1 positions, unmasked. Returns [B, 1, n_heads * D]. The same values as
    rope, an in-place copy and scaled_dot_product_attention with each KV head's query
    heads grouped (a decoder layer's steps), without their Tensor steps between."""
    op = "attention_step"
    qkv._require_kind(op, "f")
    tables = tuple(rope) if rope is not None else ()
    if len(tables) not in (0, 2):
        raise InvalidArgument(f"{op}: rope must be (cos, sin) or None", op=op)
    qkv._check_same(op, keys, values, *tables)
    if qkv.ndim != 4 or keys.ndim != 4 or values.shape != keys.shape:
        raise ShapeMismatch(
            f"{op}: qkv must be [B, 1, heads, D] and keys/values one [B, KV, max_len, D] "
            f"shape, got qkv {fmt_shape(qkv.shape)}, keys {fmt_shape(keys.shape)}, values "
            f"{fmt_shape(values.shape)}",
            op=op,
            shapes=(qkv.shape, keys.shape, values.shape),
        )
    b, t, heads, d = qkv.shape
    kv, max_len = keys.shape[1], keys.shape[2]
    if (
        t != 1
        or (tables and d % 2)
        or keys.shape[0] != b
        or keys.shape[3] != d
        or kv < 1
        or n_heads < 1
        or n_heads % kv
        or heads != n_heads + 2 * kv
    ):
        raise ShapeMismatch(
            f"{op}: qkv {fmt_shape(qkv.shape)} must be one position of {n_heads} q heads "
            f"and {kv} k and v heads each (the cache's {fmt_shape(keys.shape)}), of one "
            f"head size (even with rope), and {n_heads} a multiple of {kv}",
            op=op,
            shapes=(qkv.shape, keys.shape),
        )
    if not 0 <= length < max_len:
        raise InvalidArgument(
            f"{op}: position {length} is outside the cache of {max_len} positions",
            op=op,
            length=length,
            max_len=max_len,
        )
    laid = None
    if tables:
        cos, sin = tables
        allowed = ((1, d // 2), (b, 1, d // 2))
        for table in tables:
            if table.shape not in allowed or table.shape != cos.shape:
                raise ShapeMismatch(
                    f"{op}: cos/sin must be {fmt_shape(allowed[0])} or "
                    f"{fmt_shape(allowed[1])}, got {fmt_shape(table.shape)}",
                    op=op,
                    shapes=(qkv.shape, table.shape),
                )
        laid = (cos.storage, cos.layout, sin.storage, sin.layout)
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = qkv.backend.attention_step(
        qkv.storage,
        qkv.layout,
        keys.storage,
        keys.layout,
        values.storage,
        values.layout,
        int(length),
        int(n_heads),
        scale,
        qkv.dtype,
        laid,
        bool(interleaved),
    )
    return qkv._new(out, (b, 1, n_heads * d))


def _min_int(dtype):
    return {"u8": 0, "u32": 0, "i32": -(2**31), "i64": -(2**63)}[dtype.name]


__all__ = [
    "pad",
    "conv1d",
    "conv2d",
    "conv2d_cat",
    "conv_transpose1d",
    "conv_transpose2d",
    "max_pool2d",
    "avg_pool2d",
    "upsample_nearest2d",
    "interpolate",
    "embedding",
    "linear",
    "gated_activation",
    "rope",
    "scaled_dot_product_attention",
    "attention_step",
    "normalize_dim",
    "Tensor",
]
