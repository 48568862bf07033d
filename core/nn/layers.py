"""The common layers. Each takes an optional `vb` and then reads its weights at once;
without one it holds shape-only placeholders until `module.load(vb)`."""

from .. import functional as F
from ..errors import ShapeMismatch, fmt_shape
from ..tensor import Tensor, zeros
from .module import Module


def placeholder(shape):
    """A shape-only stand-in for a weight not loaded yet: a stride-0 view of one zero,
    so declaring a model allocates nothing."""
    return zeros(()).broadcast_to(tuple(shape))


def param(vb, shape, name, alt=None):
    """`vb.get(shape, name)`, trying the legacy name `alt` (e.g. LayerNorm "gamma") when
    the checkpoint lacks `name`; a placeholder when there is no vb."""
    if vb is None:
        return placeholder(shape)
    if alt is not None and not vb.contains(name) and vb.contains(alt):
        return vb.get(shape, alt)
    return vb.get(shape, name)


class Linear(Module):
    """y = x @ weight.T + bias, weight of shape (out_features, in_features) as in PyTorch.
    Inputs of any rank run as one 2-D GEMM."""

    def __init__(self, in_features, out_features, bias=True, vb=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = param(vb, (out_features, in_features), "weight")
        self.bias = param(vb, (out_features,), "bias") if bias else None

    @classmethod
    def from_tensors(cls, weight, bias=None):
        """A Linear over tensors already loaded: weight (out, in), bias (out,) or None, on
        one device and of one dtype (a stacked q/k/v weight, a tied embedding)."""
        if not isinstance(weight, Tensor) or weight.ndim != 2:
            raise ShapeMismatch(
                f"Linear.from_tensors: weight must be a 2-D tensor (out, in), got "
                f"{fmt_shape(weight.shape) if isinstance(weight, Tensor) else type(weight).__name__}",
                op="linear",
                shapes=(getattr(weight, "shape", ()),),
            )
        out_features, in_features = weight.shape
        if bias is not None:
            weight._check_same("Linear.from_tensors", bias)
            if bias.shape != (out_features,):
                raise ShapeMismatch(
                    f"Linear.from_tensors: bias {fmt_shape(bias.shape)} must be "
                    f"[{out_features}] for weight {fmt_shape(weight.shape)}",
                    op="linear",
                    shapes=(weight.shape, bias.shape),
                )
        # Not through __init__: its placeholders live on the default device (the CPU),
        # which a page without numpy cannot open.
        layer = cls.__new__(cls)
        Module.__init__(layer)
        layer.in_features, layer.out_features = in_features, out_features
        layer.weight, layer.bias = weight, bias
        return layer

    def forward(self, x, activation=None, residual=None):
        """activation(x @ weight.T + bias) + residual; `activation` is a unary op name
        (see ember.nn.activation_op), applied in the GEMM's epilogue where the backend
        fuses it (F.linear)."""
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            raise ShapeMismatch(
                f"Linear: input {fmt_shape(x.shape)} has last dim "
                f"{x.shape[-1] if x.ndim else None}, expected "
                f"{self.in_features} (weight {fmt_shape(self.weight.shape)})",
                op="linear",
                shapes=(x.shape, self.weight.shape),
            )
        return F.linear(x, self.weight, self.bias, activation=activation, residual=residual)

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, vb=None):
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = param(vb, (num_embeddings, embedding_dim), "weight")

    def forward(self, ids):
        return F.embedding(ids, self.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalizes the last dim; reads "weight"/"bias" or the legacy "gamma"/"beta"."""

    def __init__(self, dim, eps=1e-5, affine=True, bias=True, vb=None):
        super().__init__()
        self.dim = dim
        self.eps = float(eps)
        self.weight = param(vb, (dim,), "weight", alt="gamma") if affine else None
        self.bias = param(vb, (dim,), "bias", alt="beta") if affine and bias else None

    def load(self, vb, strict=True):
        self.weight = (
            param(vb, (self.dim,), "weight", alt="gamma") if self.weight is not None else None
        )
        self.bias = param(vb, (self.dim,), "bias", alt="beta") if self.bias is not None else None
        return self

    def forward(self, x, residual=None):
        """LayerNorm(x), or LayerNorm(x + residual) in one pass where the backend fuses it."""
        return x.layer_norm(self.weight, self.bias, self.eps, residual=residual)

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"


class RmsNorm(Module):
    def __init__(self, dim, eps=1e-6, vb=None):
        super().__init__()
        self.dim = dim
        self.eps = float(eps)
        self.weight = param(vb, (dim,), "weight")

    def forward(self, x, residual=None):
        return x.rms_norm(self.weight, self.eps, residual=residual)

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"


class Conv1d(Module):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        vb=None,
    ):
        super().__init__()
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = param(vb, (out_channels, in_channels // groups, kernel_size), "weight")
        self.bias = param(vb, (out_channels,), "bias") if bias else None

    def forward(self, x):
        return F.conv1d(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )


class Conv2d(Module):
    def __init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups=1,
        bias=True,
        vb=None,
    ):
        super().__init__()
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = param(vb, (out_channels, in_channels // groups, kh, kw), "weight")
        self.bias = param(vb, (out_channels,), "bias") if bias else None

    def forward(self, x):
        return F.conv2d(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )


class Dropout(Module):
    """Inference only: the identity."""

    def __init__(self, p=0.0):
        super().__init__()
        self.p = p

    def forward(self, x):
        return x


class Identity(Module):
    def forward(self, x):
        return x
