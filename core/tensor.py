"""Tensor = storage + layout + dtype + device. Every user-facing op lives here.

Views (narrow, transpose, permute, broadcast, reshape of a contiguous layout, indexing
with ints and slices) build a new Layout over the same storage and copy nothing.
Every backend call goes through the contract declared in backends/base.py; the fused
ops' composite forms live there (backends/composites.py), not here.
"""

import math
import numbers
import operator

from . import dtype as dt
from .device import Device, as_device
from .errors import (
    DeviceError,
    DeviceMismatch,
    DimOutOfRange,
    DTypeMismatch,
    InvalidArgument,
    OutOfMemory,
    ShapeMismatch,
    UnsupportedDType,
    UnsupportedOp,
    fmt_shape,
)
from .hostdata import bf16_to_f32, f32_to_bf16
from .intmath import ceil_div
from .layout import Layout
from .ops import KIND_NAMES, UNARY
from .shape import broadcast_shapes, normalize_dim, normalize_dims, numel


def _describe(t):
    return f"{fmt_shape(t.shape)} {t.dtype.name} on {t.device}"


class Tensor:
    __slots__ = ("storage", "layout", "dtype", "device", "__weakref__")

    def __init__(self, storage, layout, dtype, device):
        self.storage = storage
        self.layout = layout
        self.dtype = dtype
        self.device = device

    # --- metadata --------------------------------------------------------------------------
    @property
    def shape(self):
        return self.layout.shape

    @property
    def ndim(self):
        return len(self.layout.shape)

    def dim(self):
        return self.ndim

    def size(self, dim=None):
        if dim is None:
            return self.layout.shape
        return self.layout.shape[normalize_dim(dim, self.ndim, "size", self.shape)]

    def stride(self):
        return self.layout.strides

    def numel(self):
        return self.layout.numel

    def is_contiguous(self):
        return self.layout.is_contiguous()

    @property
    def backend(self):
        return self.device.backend

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        head = (
            f"Tensor(shape={fmt_shape(self.shape)}, dtype={self.dtype.name}, device={self.device}"
        )
        if self.numel() <= 64:
            try:
                return f"{head}, values={self.tolist()})"
            except Exception:  # repr must never fail (e.g. sync readback unavailable)
                pass
        return head + ")"

    # --- construction helpers ---------------------------------------------------------------
    def _view(self, layout):
        return Tensor(self.storage, layout, self.dtype, self.device)

    def _new(self, storage, shape, dtype=None):
        return Tensor(storage, Layout(shape), dtype or self.dtype, self.device)

    def _check_same(self, op, *others, same_dtype=True):
        for o in others:
            if o.device != self.device:
                raise DeviceMismatch(
                    f"{op}: tensors on different devices, lhs {_describe(self)} rhs "
                    f"{_describe(o)}; move one with .to(device)",
                    op=op,
                    devices=(self.device, o.device),
                )
            if same_dtype and o.dtype is not self.dtype:
                raise DTypeMismatch(
                    f"{op}: dtype mismatch, lhs {_describe(self)} rhs {_describe(o)}; "
                    f"convert one with .to(dtype)",
                    op=op,
                    dtypes=(self.dtype, o.dtype),
                )

    def _require_kind(self, op, kinds):
        if self.dtype.kind not in kinds:
            raise UnsupportedDType(
                f"{op}: not defined for dtype {self.dtype.name} (needs {KIND_NAMES[kinds]}), "
                f"input {_describe(self)}",
                op=op,
                dtype=self.dtype,
            )

    def _scalar(self, op, value):
        """A Python scalar takes the tensor's dtype; lossy conversions are refused."""
        return _scalar_value(op, value, self.dtype)

    def _scalar_tensor(self, op, value):
        return full((), self._scalar(op, value), dtype=self.dtype, device=self.device)

    # --- conversions -----------------------------------------------------------------------
    def to(self, *args, dtype=None, device=None):
        for a in args:
            if isinstance(a, dt.DType) or (isinstance(a, str) and _is_dtype_name(a)):
                dtype = a
            elif isinstance(a, str):
                device = _device_named("to", a)
            else:
                device = a
        out = self
        if device is not None:
            device = as_device(device)
            if device != self.device:
                out = _transfer(out, device)
        if dtype is not None:
            dtype = dt.as_dtype(dtype)
            if dtype is not out.dtype:
                out = out._new(
                    out.backend.cast(out.storage, out.layout, out.dtype, dtype), out.shape, dtype
                )
        return out

    def float(self):
        return self.to(dt.f32)

    def half(self):
        return self.to(dt.f16)

    def long(self):
        return self.to(dt.i64)

    def cpu(self):
        return self.to(Device.cpu())

    def numpy(self):
        """A numpy array: a view of the storage on the CPU, a copy from other devices.
        bf16 comes back as f32 (numpy has no bf16)."""
        return self.backend.to_numpy(self.storage, self.layout, self.dtype)

    def tolist(self):
        try:
            import numpy  # noqa: F401
        except ImportError:
            from .hostdata import unpack

            return unpack(
                self.backend.to_bytes(self.storage, self.layout, self.dtype), self.dtype, self.shape
            )
        return self.numpy().tolist()

    def item(self):
        if self.numel() != 1:
            raise ShapeMismatch(
                f"item: needs a tensor with one element, got shape {fmt_shape(self.shape)}",
                op="item",
                shapes=(self.shape,),
            )
        value = self.reshape(()).tolist()
        return value

    async def numpy_async(self):
        import numpy

        data = await self._bytes_async()
        storage_type = numpy.uint16 if self.dtype is dt.bf16 else self.dtype.numpy_name
        arr = numpy.frombuffer(data, dtype=storage_type).reshape(self.shape)
        if self.dtype is dt.bf16:
            arr = bf16_to_f32(numpy, arr)
        return arr

    async def tolist_async(self):
        from .hostdata import unpack

        return unpack(await self._bytes_async(), self.dtype, self.shape)

    async def item_async(self):
        return await self.reshape(()).tolist_async()

    async def _bytes_async(self):
        return await self.backend.to_bytes_async(self.storage, self.layout, self.dtype)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __index__(self):
        if self.dtype.is_float:
            raise TypeError("only integer tensors can be used as an index")
        return int(self.item())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # --- views -------------------------------------------------------------------------------
    def contiguous(self):
        if self.layout.is_contiguous():
            return self
        return self._new(
            self.backend.copy_strided(self.storage, self.layout, self.dtype), self.shape
        )

    def reshape(self, *shape):
        shape = _infer_shape(_shape_args(shape), self.numel(), self.shape)
        view = self.layout.reshape(shape)
        if view is not None:
            return self._view(view)
        return self.contiguous()._view(Layout(shape))

    view = reshape

    def flatten(self, start_dim=0, end_dim=-1):
        if self.ndim == 0:
            return self.reshape(1)
        s = normalize_dim(start_dim, self.ndim, "flatten", self.shape)
        e = normalize_dim(end_dim, self.ndim, "flatten", self.shape)
        return self.reshape(self.shape[:s] + (numel(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def narrow(self, dim, start, length):
        return self._view(self.layout.narrow(dim, start, length))

    def select(self, dim, index):
        return self._view(self.layout.select(dim, index))

    def transpose(self, dim0, dim1):
        return self._view(self.layout.transpose(dim0, dim1))

    def permute(self, *dims):
        return self._view(self.layout.permute(_shape_args(dims)))

    def t(self):
        if self.ndim > 2:
            raise ShapeMismatch(
                f"t: expects at most 2 dims, got shape {fmt_shape(self.shape)}",
                op="t",
                shapes=(self.shape,),
            )
        return self if self.ndim < 2 else self.transpose(0, 1)

    @property
    def T(self):
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def unsqueeze(self, dim):
        return self._view(self.layout.unsqueeze(dim))

    def squeeze(self, dim=None):
        return self._view(self.layout.squeeze(dim))

    def broadcast_to(self, *shape):
        return self._view(self.layout.broadcast_to(_new_shape("broadcast_to", shape)))

    def expand(self, *shape):
        shape = list(_shape_args(shape))
        extra = len(shape) - self.ndim
        for i in range(self.ndim):
            if extra + i >= 0 and shape[extra + i] == -1:
                shape[extra + i] = self.shape[i]  # -1 keeps an existing dim's size
        return self._view(self.layout.broadcast_to(_new_shape("expand", shape), op="expand"))

    def expand_as(self, other):
        return self.expand(*other.shape)

    def unfold(self, dim, size, step):
        return self._view(self.layout.unfold(dim, size, step))

    def chunk(self, chunks, dim=0):
        dim = normalize_dim(dim, self.ndim, "chunk", self.shape)
        chunks = _count_arg("chunk", "chunks", chunks, minimum=1)
        size = ceil_div(self.shape[dim], chunks)
        if size == 0:
            return [self]  # an empty dim: one empty chunk, as in PyTorch
        return self.split(size, dim)

    def split(self, split_size_or_sections, dim=0):
        dim = normalize_dim(dim, self.ndim, "split", self.shape)
        n = self.shape[dim]
        if isinstance(split_size_or_sections, numbers.Integral):
            size = _count_arg("split", "split_size", split_size_or_sections, minimum=1)
            sizes = [min(size, n - s) for s in range(0, n, size)] if n else [0]
        else:
            sizes = [_count_arg("split", "section", s, minimum=0) for s in split_size_or_sections]
            if sum(sizes) != n:
                raise ShapeMismatch(
                    f"split: sections {sizes} sum to {sum(sizes)}, but dim {dim} has size {n} "
                    f"(shape {fmt_shape(self.shape)})",
                    op="split",
                    shape=self.shape,
                )
        out, start = [], 0
        for s in sizes:
            out.append(self.narrow(dim, start, s))
            start += s
        return out

    def __getitem__(self, index):
        if not isinstance(index, tuple):
            index = (index,)
        n_real = sum(1 for i in index if i is not None and i is not Ellipsis)
        if n_real > self.ndim:
            raise DimOutOfRange(
                f"index: too many indices ({n_real}) for a tensor of shape {fmt_shape(self.shape)}",
                op="index",
                shape=self.shape,
            )
        if sum(1 for i in index if i is Ellipsis) > 1:
            raise IndexError("index: an index can only have a single ellipsis")
        expanded = []
        for i in index:
            if i is Ellipsis:
                expanded.extend([slice(None)] * (self.ndim - n_real))
            else:
                expanded.append(i)
        layout = self.layout
        dim = 0
        gathers = []
        for i in expanded:
            if i is None:
                layout = layout.unsqueeze(dim)
                dim += 1
            elif isinstance(i, slice):
                if i.step is not None and i.step <= 0:
                    raise ValueError(f"index: slice step must be positive, got {i.step}")
                layout = layout.slice(dim, i.start, i.stop, i.step)
                dim += 1
            elif isinstance(i, (Tensor, list)):
                gathers.append((dim, i))
                dim += 1
            else:
                layout = layout.select(dim, int(i), op="index")
        out = self._view(layout)
        for d, ids in gathers:
            if isinstance(ids, list):
                ids = tensor(ids, dtype=dt.i64, device=self.device)
            out = out.index_select(d, ids)
        return out

    # --- elementwise ------------------------------------------------------------------------
    def _unary(self, op, *params):
        row = UNARY[op]
        if self.dtype.is_int and op in _INT_IDENTITY:
            return self  # rounding an integer changes nothing (as in PyTorch)
        self._require_kind(op, row.kinds)
        params = tuple(self._scalar(op, p) for p in params)
        return self._new(
            self.backend.unary(op, self.storage, self.layout, self.dtype, params), self.shape
        )

    def neg(self):
        return self._unary("neg")

    def abs(self):
        return self._unary("abs")

    def exp(self):
        return self._unary("exp")

    def log(self):
        return self._unary("log")

    def sqrt(self):
        return self._unary("sqrt")

    def rsqrt(self):
        return self._unary("rsqrt")

    def sin(self):
        return self._unary("sin")

    def cos(self):
        return self._unary("cos")

    def tanh(self):
        return self._unary("tanh")

    def sigmoid(self):
        return self._unary("sigmoid")

    def relu(self):
        return self._unary("relu")

    def gelu(self, approximate="none"):
        return self._unary("gelu_tanh" if approximate == "tanh" else "gelu")

    def gelu_tanh(self):
        return self._unary("gelu_tanh")

    def quick_gelu(self):
        return self._unary("quick_gelu")

    def silu(self):
        return self._unary("silu")

    def sign(self):
        return self._unary("sign")

    def floor(self):
        return self._unary("floor")

    def ceil(self):
        return self._unary("ceil")

    def round(self):
        return self._unary("round")

    def square(self):
        return self._unary("square")

    def reciprocal(self):
        return self._unary("reciprocal")

    def erf(self):
        return self._unary("erf")

    def clamp(self, min=None, max=None):
        if min is None and max is None:
            raise ValueError("clamp: give min, max or both")
        lo = (
            min
            if min is not None
            else (-math.inf if self.dtype.is_float else _INT_RANGE[self.dtype.name][0])
        )
        hi = (
            max
            if max is not None
            else (math.inf if self.dtype.is_float else _INT_RANGE[self.dtype.name][1])
        )
        return self._unary("clamp", lo, hi)

    clip = clamp

    def affine(self, mul, add):
        """x * mul + add in one pass."""
        return self._unary("affine", mul, add)

    def pow(self, exponent):
        if isinstance(exponent, Tensor):
            return self._binary("pow", exponent)
        if exponent == 2:
            return self.square()
        return self._unary("pow_scalar", exponent)

    def _binary(self, op, other, reverse=False):
        if not isinstance(other, Tensor):
            if reverse or op == "pow":
                other = self._scalar_tensor(op, other)
            else:
                if op in _BINARY_KINDS:
                    self._require_kind(op, _BINARY_KINDS[op])
                value = self._scalar(op, other)
                return self._new(
                    self.backend.binary(op, self.storage, self.layout, value, None, self.dtype),
                    self.shape,
                )
        a, b = (other, self) if reverse else (self, other)
        a._check_same(op, b)
        if op in _BINARY_KINDS:
            a._require_kind(op, _BINARY_KINDS[op])
        shape = broadcast_shapes(op, a.shape, b.shape)
        la = a.layout.broadcast_to(shape, op)
        lb = b.layout.broadcast_to(shape, op)
        return a._new(a.backend.binary(op, a.storage, la, b.storage, lb, a.dtype), shape)

    def add(self, other):
        return self._binary("add", other)

    def sub(self, other):
        return self._binary("sub", other)

    def mul(self, other):
        return self._binary("mul", other)

    def div(self, other):
        return self._binary("div", other)

    def maximum(self, other):
        return self._binary("maximum", other)

    def minimum(self, other):
        return self._binary("minimum", other)

    __add__ = add
    __sub__ = sub
    __mul__ = mul
    __truediv__ = div
    __pow__ = pow
    __neg__ = neg
    __abs__ = abs

    def __radd__(self, other):
        return self._binary("add", other)

    def __rmul__(self, other):
        return self._binary("mul", other)

    def __rsub__(self, other):
        if self.dtype.kind != "u":
            return self._unary("affine", -1, other)
        return self._binary("sub", other, reverse=True)

    def __rtruediv__(self, other):
        return self._binary("div", other, reverse=True)

    def __rpow__(self, other):
        return self._binary("pow", other, reverse=True)

    def __matmul__(self, other):
        return self.matmul(other)

    def _compare(self, op, other):
        if not isinstance(other, Tensor):
            value = self._scalar(op, other) if isinstance(other, numbers.Number) else None
            if value is None:
                return NotImplemented
            return self._new(
                self.backend.compare(op, self.storage, self.layout, value, None, self.dtype),
                self.shape,
                dt.u8,
            )
        self._check_same(op, other)
        shape = broadcast_shapes(op, self.shape, other.shape)
        la = self.layout.broadcast_to(shape, op)
        lb = other.layout.broadcast_to(shape, op)
        return self._new(
            self.backend.compare(op, self.storage, la, other.storage, lb, self.dtype), shape, dt.u8
        )

    def eq(self, other):
        return self._compare("eq", other)

    def ne(self, other):
        return self._compare("ne", other)

    def lt(self, other):
        return self._compare("lt", other)

    def le(self, other):
        return self._compare("le", other)

    def gt(self, other):
        return self._compare("gt", other)

    def ge(self, other):
        return self._compare("ge", other)

    __eq__ = eq
    __ne__ = ne
    __lt__ = lt
    __le__ = le
    __gt__ = gt
    __ge__ = ge
    __hash__ = object.__hash__

    def where(self, cond, other):
        """torch-style: self where cond is true, else other."""
        return where(cond, self, other)

    def masked_fill(self, mask, value):
        return where(mask, self._scalar_tensor("masked_fill", value), self)

    def copy_(self, src):
        """Write `src` (broadcast to this shape) into this tensor's elements, in place.

        `self` may be a view (a narrow of a preallocated KV cache, say): only the
        elements it reads change, so a cache grows without re-allocation.
        """
        if not isinstance(src, Tensor):
            raise TypeError(f"copy_: src must be a Tensor, got {type(src).__name__}")
        self._check_same("copy_", src)
        if _overlaps(self.layout):
            raise InvalidArgument(
                f"copy_: the destination {_describe(self)} (strides "
                f"{fmt_shape(self.stride())}) reads some memory at several indices (an "
                f"expanded or overlapping view), so the copy would write one element many "
                f"times; write into the tensor it was expanded from, or make the destination with .contiguous()",
                op="copy_",
                shape=self.shape,
                strides=self.stride(),
            )
        try:
            src_layout = src.layout.broadcast_to(self.shape, "copy_")
        except ShapeMismatch:
            raise ShapeMismatch(
                f"copy_: src {_describe(src)} cannot be broadcast to the destination "
                f"{_describe(self)}",
                op="copy_",
                shapes=(src.shape, self.shape),
            ) from None
        if self.numel():
            self.backend.copy_into(self.storage, self.layout, src.storage, src_layout, self.dtype)
        return self

    # --- reductions -------------------------------------------------------------------------
    def _reduce(self, op, dim, keepdim):
        dims = normalize_dims(dim, self.ndim, op, self.shape)
        if self.ndim == 0 and dims:
            # dim 0 / -1 of a 0-d tensor is allowed (as in PyTorch): reduce one element.
            return self.unsqueeze(0)._reduce(op, 0, False)
        if op in ("max", "min", "argmax", "argmin"):
            for d in dims:
                if self.shape[d] == 0:
                    raise ShapeMismatch(
                        f"{op}: cannot reduce over empty dim {d} of shape {fmt_shape(self.shape)}",
                        op=op,
                        shapes=(self.shape,),
                    )
        if op == "mean":
            self._require_kind(op, "f")
        if not dims:
            return self
        out_shape = tuple(1 if d in dims else n for d, n in enumerate(self.shape))
        dtype = dt.i64 if op in ("argmax", "argmin") else self.dtype
        out = self._new(
            self.backend.reduce(op, self.storage, self.layout, dims, self.dtype), out_shape, dtype
        )
        return out if keepdim else out.squeeze(dims)

    def sum(self, dim=None, keepdim=False):
        return self._reduce("sum", dim, keepdim)

    def mean(self, dim=None, keepdim=False):
        return self._reduce("mean", dim, keepdim)

    def prod(self, dim=None, keepdim=False):
        return self._reduce("prod", dim, keepdim)

    def max(self, dim=None, keepdim=False):
        return self._reduce("max", dim, keepdim)

    def min(self, dim=None, keepdim=False):
        return self._reduce("min", dim, keepdim)

    def _arg(self, op, dim, keepdim):
        if dim is None:
            return self.reshape(-1)._reduce(op, 0, False)
        if not isinstance(dim, int):
            raise TypeError(f"{op}: dim must be one int or None")
        return self._reduce(op, dim, keepdim)

    def argmax(self, dim=None, keepdim=False):
        return self._arg("argmax", dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        return self._arg("argmin", dim, keepdim)

    def var(self, dim=None, keepdim=False, correction=1, unbiased=None):
        self._require_kind("var", "f")
        if unbiased is not None:
            correction = 1 if unbiased else 0
        dims = normalize_dims(dim, self.ndim, "var", self.shape)
        if self.ndim == 0 and dims:
            return self.unsqueeze(0).var(0, False, correction)
        n = numel([self.shape[d] for d in dims])
        centered = self - self.mean(dims, keepdim=True)
        total = centered.square().sum(dims, keepdim=keepdim)
        return total * (1.0 / max(n - correction, 0)) if n - correction > 0 else total * math.nan

    def std(self, dim=None, keepdim=False, correction=1):
        return self.var(dim, keepdim, correction).sqrt()

    def cumsum(self, dim):
        dim = normalize_dim(dim, self.ndim, "cumsum", self.shape)
        if self.ndim == 0:
            return self
        return self._new(
            self.backend.cumsum(self.storage, self.layout, dim, self.dtype), self.shape
        )

    def softmax(self, dim=-1):
        return self._softmax(dim, log=False)

    def log_softmax(self, dim=-1):
        return self._softmax(dim, log=True)

    def _softmax(self, dim, log):
        op = "log_softmax" if log else "softmax"
        self._require_kind(op, "f")
        if self.ndim == 0:
            return self.unsqueeze(0)._softmax(0, log).reshape(())
        dim = normalize_dim(dim, self.ndim, op, self.shape)
        if self.numel() == 0:
            return self.contiguous()  # nothing to normalize (a max over it would fail)
        run = self.backend.log_softmax if log else self.backend.softmax
        return self._new(run(self.storage, self.layout, dim, self.dtype), self.shape)

    # --- linear algebra ---------------------------------------------------------------------------
    def matmul(self, other):
        self._check_same("matmul", other)
        if self.ndim == 0 or other.ndim == 0:
            raise ShapeMismatch(
                f"matmul: both operands need at least 1 dim, lhs {fmt_shape(self.shape)} rhs "
                f"{fmt_shape(other.shape)}",
                op="matmul",
                shapes=(self.shape, other.shape),
            )
        a = self.unsqueeze(0) if self.ndim == 1 else self
        b = other.unsqueeze(-1) if other.ndim == 1 else other
        if a.shape[-1] != b.shape[-2]:
            raise ShapeMismatch(
                f"matmul: shape mismatch, lhs {fmt_shape(self.shape)} rhs {fmt_shape(other.shape)} "
                f"(inner dims {a.shape[-1]} != {b.shape[-2]})",
                op="matmul",
                shapes=(self.shape, other.shape),
            )
        if self.dtype.kind != "f" and not self.dtype.is_int:
            self._require_kind("matmul", "fiu")
        batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
        la = a.layout.broadcast_to(batch + a.shape[-2:], "matmul")
        lb = b.layout.broadcast_to(batch + b.shape[-2:], "matmul")
        shape = batch + (a.shape[-2], b.shape[-1])
        out = self._new(self.backend.matmul(a.storage, la, b.storage, lb, self.dtype), shape)
        if self.ndim == 1:
            out = out.squeeze(-2)
        if other.ndim == 1:
            out = out.squeeze(-1)
        return out

    # --- indexing -----------------------------------------------------------------------------
    def _check_index(self, op, ids):
        if not isinstance(ids, Tensor):
            raise TypeError(f"{op}: indices must be a Tensor, got {type(ids).__name__}")
        self._check_same(op, ids, same_dtype=False)
        if ids.dtype not in (dt.i64, dt.i32, dt.u32, dt.u8):
            raise UnsupportedDType(
                f"{op}: indices must be an integer tensor, got {_describe(ids)}",
                op=op,
                dtype=ids.dtype,
            )

    def index_select(self, dim, index):
        self._check_index("index_select", index)
        dim = normalize_dim(dim, self.ndim, "index_select", self.shape)
        flat = index.reshape(-1) if index.ndim != 1 else index
        shape = self.shape[:dim] + flat.shape + self.shape[dim + 1 :]
        out = self._new(
            self.backend.index_select(
                self.storage, self.layout, flat.storage, flat.layout, dim, self.dtype
            ),
            shape,
        )
        if index.ndim != 1:
            out = out.reshape(self.shape[:dim] + index.shape + self.shape[dim + 1 :])
        return out

    def gather(self, dim, index):
        self._check_index("gather", index)
        dim = normalize_dim(dim, self.ndim, "gather", self.shape)
        self._check_index_shape("gather", dim, index, self)
        if self.ndim == 0:  # torch allows a 0-d input with a 0-d index
            return self.reshape(1).gather(0, index.reshape(1)).reshape(())
        return self._new(
            self.backend.gather(
                self.storage, self.layout, index.storage, index.layout, dim, self.dtype
            ),
            index.shape,
        )

    def scatter_add(self, dim, index, src):
        self._check_index("scatter_add", index)
        self._check_same("scatter_add", src)
        dim = normalize_dim(dim, self.ndim, "scatter_add", self.shape)
        self._check_index_shape("scatter_add", dim, index, self, src)
        if self.ndim == 0:
            return self.reshape(1).scatter_add(0, index.reshape(1), src.reshape(1)).reshape(())
        return self._new(
            self.backend.scatter_add(
                self.storage,
                self.layout,
                index.storage,
                index.layout,
                src.storage,
                src.layout,
                dim,
                self.dtype,
            ),
            self.shape,
        )

    def _check_index_shape(self, op, dim, index, *others):
        for t in others:
            bad = index.ndim != t.ndim or any(
                index.shape[d] > t.shape[d] for d in range(t.ndim) if d != dim or t is not self
            )
            if bad:
                raise ShapeMismatch(
                    f"{op}: index shape {fmt_shape(index.shape)} does not fit "
                    f"{fmt_shape(t.shape)} along dims other than {dim}",
                    op=op,
                    shapes=(index.shape, t.shape),
                )

    # --- composites -------------------------------------------------------------------------
    def layer_norm(self, weight=None, bias=None, eps=1e-5, residual=None):
        """Layer norm over the last dim; with `residual`, of self + residual (the
        transformer's add & norm, one pass where the backend fuses it)."""
        return _norm(self, weight, bias, eps, rms=False, residual=residual)

    def rms_norm(self, weight=None, eps=1e-6, residual=None):
        return _norm(self, weight, None, eps, rms=True, residual=residual)

    def pad(self, pad, mode="constant", value=0.0):
        from .functional import pad as _pad

        return _pad(self, pad, mode, value)

    def rope(self, cos, sin, interleaved=False):
        """Rotary embedding of [..., T, D] with cos/sin [T, D/2] or [B, T, D/2] (see
        functional.rope)."""
        from .functional import rope as _rope

        return _rope(self, cos, sin, interleaved)


# --- module-level API -----------------------------------------------------------------------
_INT_IDENTITY = {"floor", "ceil", "round"}
_BINARY_KINDS = {"pow": "f"}
_INT_RANGE = {
    "i64": (-(2**63), 2**63 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "u32": (0, 2**32 - 1),
    "u8": (0, 255),
}
_default_device = [None]


def _scalar_value(op, value, dtype):
    """`value` as a Python number of `dtype`: an integer dtype refuses a fraction, NaN or
    a value outside its range (2**31 in i32 once wrapped to -2**31) instead of wrapping."""
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, numbers.Number):
        raise TypeError(f"{op}: expected a Tensor or a number, got {type(value).__name__}")
    if dtype.is_float:
        return float(value)
    if not isinstance(value, numbers.Integral):
        if not math.isfinite(value) or float(value) != int(value):
            raise DTypeMismatch(
                f"{op}: scalar {value!r} is not representable in the tensor's dtype "
                f"{dtype.name}; convert the tensor with .to(ember.f32)",
                op=op,
                dtypes=(dtype,),
            )
        value = int(value)
    lo, hi = _INT_RANGE[dtype.name]
    if not lo <= value <= hi:
        raise DTypeMismatch(
            f"{op}: scalar {value} out of range for dtype {dtype.name} [{lo}, {hi}]",
            op=op,
            dtypes=(dtype,),
        )
    return int(value)


def _device_named(op, name):
    """The device a string names; a string that is neither a dtype nor a device says both
    (t.to("float128") once said only "unknown device")."""
    try:
        return as_device(name)
    except DeviceError as exc:
        raise DeviceError(
            f"{op}: {name!r} is neither an ember dtype (known: "
            f"{', '.join(d.name for d in dt.ALL)}) nor a device ({exc})",
            op=op,
            value=name,
        ) from None


def _is_dtype_name(name):
    try:
        dt.as_dtype(name)
        return True
    except Exception:
        return False


def _shape_args(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def _count_arg(op, name, value, minimum):
    """An integer argument of at least `minimum` (chunk(0) once returned the whole tensor)."""
    try:
        value = operator.index(value)
    except TypeError:
        raise InvalidArgument(
            f"{op}: {name} must be an integer, got {value!r}", op=op, value=value
        ) from None
    if value < minimum:
        raise InvalidArgument(
            f"{op}: {name} must be at least {minimum}, got {value}", op=op, value=value
        )
    return value


def _new_shape(op, args):
    """The shape `args` name (sizes, or one tuple or list of them) for a new tensor or
    view: integers, none negative (zeros(-1) once made a tensor with numel() == -1)."""
    shape = _shape_args(args)
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise ShapeMismatch(
            f"{op}: sizes must be integers, got {shape!r}", op=op, shape=shape
        ) from None
    if any(d < 0 for d in dims):
        raise ShapeMismatch(f"{op}: negative size in shape {fmt_shape(dims)}", op=op, shape=dims)
    return dims


def _overlaps(layout):
    """True unless each index of `layout` surely reaches its own storage element: the
    dims sorted by stride must each step past all that the smaller ones reach. A stride-0
    dim of size > 1 (expand) and overlapping unfold windows fail; views made by narrow,
    slicing, select, transpose and permute always pass."""
    if layout.numel == 0:
        return False
    reach = 0
    for stride, size in sorted(
        (s, d) for d, s in zip(layout.shape, layout.strides, strict=True) if d > 1
    ):
        if stride <= reach:
            return True
        reach += stride * (size - 1)
    return False


def _infer_shape(shape, total, old_shape):
    try:
        shape = [operator.index(d) for d in shape]
    except TypeError:
        raise ShapeMismatch(
            f"reshape: sizes must be integers, got {tuple(shape)!r}", op="reshape", shape=old_shape
        ) from None
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1:
        raise ShapeMismatch(f"reshape: only one dim can be -1, got {shape}", op="reshape")
    known = numel(d for d in shape if d != -1)
    if unknown:
        if known == 0 or total % known:
            raise ShapeMismatch(
                f"reshape: cannot reshape {fmt_shape(old_shape)} ({total} elements) into {shape}",
                op="reshape",
                shapes=(old_shape,),
            )
        shape[unknown[0]] = total // known
    if numel(shape) != total or any(d < 0 for d in shape):
        raise ShapeMismatch(
            f"reshape: cannot reshape {fmt_shape(old_shape)} ({total} elements) into "
            f"{fmt_shape(shape)} ({numel(shape)} elements)",
            op="reshape",
            shapes=(old_shape,),
        )
    return tuple(shape)


def _transfer(t, device):
    src = t.backend
    dst = device.backend
    try:
        import numpy

        host = src.to_numpy(t.storage, t.layout, t.dtype)
        if t.dtype is dt.bf16:
            host = f32_to_bf16(numpy, host)
        # A strided view (transposed, sliced, broadcast) is packed once here: uploads
        # take contiguous host memory. (require keeps 0-d arrays 0-d.)
        host = numpy.require(host, requirements="C")
    except ImportError:
        host = src.to_bytes(t.storage, t.layout, t.dtype)
    return Tensor(dst.from_host(host, t.dtype, t.shape), Layout(t.shape), t.dtype, device)


def _norm(x, weight, bias, eps, rms, residual=None):
    op = "rms_norm" if rms else "layer_norm"
    x._require_kind(op, "f")
    if residual is not None:
        x._check_same(op, residual)
        if residual.shape != x.shape:
            raise ShapeMismatch(
                f"{op}: residual shape {fmt_shape(residual.shape)} must equal the input's "
                f"{fmt_shape(x.shape)}",
                op=op,
                shapes=(x.shape, residual.shape),
            )
    for p in (weight, bias):
        if p is not None:
            x._check_same(op, p)
            if p.shape != x.shape[-1:]:
                raise ShapeMismatch(
                    f"{op}: weight/bias shape {fmt_shape(p.shape)} must be [{x.shape[-1]}] "
                    f"for input {fmt_shape(x.shape)}",
                    op=op,
                    shapes=(x.shape, p.shape),
                )
    parts = [
        (t.storage, t.layout) if t is not None else (None, None) for t in (weight, bias, residual)
    ]
    (w, lw), (b, lb), (r, lr) = parts
    if rms:
        out = x.backend.rms_norm(
            x.storage, x.layout, w, lw, float(eps), x.dtype, residual=r, lres=lr
        )
    else:
        out = x.backend.layer_norm(
            x.storage, x.layout, w, lw, b, lb, float(eps), x.dtype, residual=r, lres=lr
        )
    return x._new(out, x.shape)


def set_default_device(device):
    _default_device[0] = None if device is None else as_device(device)


def default_device():
    return _default_device[0] or Device.cpu()


def _device(device):
    return default_device() if device is None else as_device(device)


def tensor(data, dtype=None, device=None):
    """A new tensor holding a copy of `data` (nested lists, a number, a numpy array, a Tensor)."""
    if isinstance(data, Tensor):
        # As torch.tensor(t): a copy, on t's device unless one is named.
        out = data.to(data.device if device is None else as_device(device))
        if dtype is not None and dt.as_dtype(dtype) is not out.dtype:
            return out.to(dtype)
        if out is data:
            out = data._new(
                data.backend.copy_strided(data.storage, data.layout, data.dtype), data.shape
            )
        return out.contiguous()
    device = _device(device)
    if dtype is not None:
        dtype = dt.as_dtype(dtype)
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None:
        try:
            arr = numpy.asarray(data)
        except ValueError:
            if isinstance(data, (list, tuple)):
                from .hostdata import flatten

                flatten(data)  # raises ShapeMismatch naming the ragged item
            raise
        if dtype is None:
            dtype = _dtype_of_numpy(arr, data)
        elif dtype.is_int and arr.size and not _fits(numpy, arr, dtype):
            _check_values("tensor", arr.min(), arr.max(), dtype)
        return _from_host_array(numpy, arr, dtype, device, copy=True)
    from .hostdata import flatten, infer_dtype, pack

    shape, flat = flatten(data)
    dtype = dtype or infer_dtype(flat)
    if dtype.is_int and flat:
        _check_values("tensor", min(flat), max(flat), dtype)
    storage = device.backend.from_host(pack(flat, dtype), dtype, shape)
    return Tensor(storage, Layout(shape), dtype, device)


def _fits(numpy, arr, dtype):
    """Whether every value of arr's dtype is one of `dtype` (then no value needs a look),
    or arr holds no numbers (strings fail in the conversion itself)."""
    if arr.dtype.kind not in "iu":
        return arr.dtype.kind not in "fO"
    have, want = numpy.iinfo(arr.dtype), _INT_RANGE[dtype.name]
    return want[0] <= have.min and have.max <= want[1]


def _check_values(op, lo, hi, dtype):
    """Refuse data an integer dtype cannot hold (tensor([2**31], i32) once wrapped to
    -2**31), naming the first offending value."""
    for value in (lo, hi):
        value = value.item() if hasattr(value, "item") else value  # a numpy scalar
        if not (isinstance(value, numbers.Real) and math.isfinite(value)) or not (
            _INT_RANGE[dtype.name][0] <= value <= _INT_RANGE[dtype.name][1]
        ):
            raise DTypeMismatch(
                f"{op}: value {value!r} out of range for dtype {dtype.name} "
                f"{list(_INT_RANGE[dtype.name])}",
                op=op,
                dtypes=(dtype,),
                value=value,
            )


def _dtype_of_numpy(arr, data):
    kind = arr.dtype.kind
    if kind == "b":
        return dt.u8
    if kind == "f" and not hasattr(data, "dtype"):
        return dt.f32  # Python floats become f32, as in PyTorch
    if kind == "i" and not hasattr(data, "dtype"):
        return dt.i64
    return dt.as_dtype(arr.dtype.name)


def _from_host_array(numpy, arr, dtype, device, copy):
    if dtype is dt.bf16:
        arr = f32_to_bf16(numpy, numpy.asarray(arr, dtype=numpy.float32))
    else:
        arr = numpy.asarray(arr, dtype=dtype.numpy_name)
    storage = (
        device.backend.from_host(arr, dtype, arr.shape, copy=copy)
        if device.kind == "cpu"
        else device.backend.from_host(numpy.ascontiguousarray(arr), dtype, arr.shape)
    )
    return Tensor(storage, Layout(arr.shape), dtype, device)


def from_numpy(array, device=None):
    """A CPU tensor sharing the array's memory (a copy when the layout needs one)."""
    import numpy

    dtype = dt.u8 if array.dtype == numpy.bool_ else dt.as_dtype(array.dtype.name)
    return _from_host_array(numpy, array, dtype, _device(device), copy=False)


def full(shape, value, dtype=dt.f32, device=None):
    return _filled(
        "full", shape if isinstance(shape, (tuple, list)) else (shape,), value, dtype, device
    )


def zeros(*shape, dtype=dt.f32, device=None):
    return _filled("zeros", shape, 0, dtype, device)


def ones(*shape, dtype=dt.f32, device=None):
    return _filled("ones", shape, 1, dtype, device)


def _filled(op, shape, value, dtype, device):
    """A new tensor of `shape` holding `value`: the shape and the value are checked
    before anything is allocated (the backend then refuses a size it cannot hold)."""
    shape = _new_shape(op, shape)
    dtype = dt.as_dtype(dtype)
    value = _scalar_value(op, value, dtype)
    device = _device(device)
    return Tensor(device.backend.full(shape, value, dtype), Layout(shape), dtype, device)


def full_like(t, value, dtype=None, device=None):
    return full(t.shape, value, dtype or t.dtype, device or t.device)


def zeros_like(t, dtype=None, device=None):
    return full_like(t, 0, dtype, device)


def ones_like(t, dtype=None, device=None):
    return full_like(t, 1, dtype, device)


def arange(start, end=None, step=1, dtype=None, device=None):
    """start, start + step, ... up to (not including) end, built on the device: a running
    sum of ones gives the indices, one affine pass the values, so no host list of the
    values is ever made (arange(2**40) once grew a Python list until MemoryError)."""
    if end is None:
        start, end = 0, start
    for name, v in (("start", start), ("end", end), ("step", step)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise InvalidArgument(
                f"arange: {name} must be a finite number, got {v!r}", op="arange", value=v
            )
    if step == 0:
        raise InvalidArgument("arange: step must not be 0", op="arange", value=step)
    if dtype is None:
        dtype = dt.f32 if any(isinstance(v, float) for v in (start, end, step)) else dt.i64
    dtype = dt.as_dtype(dtype)
    if all(isinstance(v, numbers.Integral) for v in (start, end, step)):
        count = max(0, -((start - end) // step))  # exact ceil((end - start) / step)
    else:
        count = max(0, math.ceil((end - start) / step))
    if count == 0:
        return _filled("arange", (0,), 0, dtype, device)
    if dtype.is_int:
        # Integral steps only, and every value must fit the dtype: the first and the
        # last bound them all.
        _scalar_value("arange", step, dt.i64)
        _scalar_value("arange", start, dtype)
        _scalar_value("arange", start + (count - 1) * step, dtype)
    index_dtype = dtype if dtype in (dt.i32, dt.i64) else dt.i32
    if count > _INT_RANGE[index_dtype.name][1]:
        index_dtype = dt.i64
    index = _allocating("arange", lambda: _filled("arange", (count,), 1, index_dtype, device))
    try:
        index = index.cumsum(0)  # 1..count; the ones are freed before the next pass
    except UnsupportedOp:
        # A minimal backend without a scan (a pure-Python test device): its size was
        # accepted above, so the values are listed on the host as before.
        return tensor([start + i * step for i in range(count)], dtype=dtype, device=device)
    index = index - 1
    if dtype.is_float:
        # f16 and bf16 values are computed in f32 and rounded once, as numpy does.
        compute = dt.f64 if dtype is dt.f64 else dt.f32
        return index.to(compute).affine(float(step), float(start)).to(dtype)
    index = index.to(dtype)
    if step < 0 and dtype.kind == "u":
        return start - index * -step  # -step has no unsigned form: count down from start
    return index if (start, step) == (0, 1) else index.affine(step, start)


def eye(n, m=None, dtype=dt.f32, device=None):
    """An n x m identity, built on the device: zeros, then one strided write of ones down
    the diagonal (eye(20000) once peaked at 9.3 GB of Python lists for a 1.6 GB result)."""
    m = n if m is None else m
    shape = _new_shape("eye", (n, m))
    out = _allocating("eye", lambda: _filled("eye", shape, 0, dtype, device))
    k = min(shape)
    if k:
        one = _filled("eye", (), 1, out.dtype, out.device)
        # The diagonal of a row-major (n, m) tensor: k elements, m + 1 apart.
        try:
            out.backend.copy_into(
                out.storage,
                Layout((k,), (shape[1] + 1,)),
                one.storage,
                one.layout.broadcast_to((k,)),
                out.dtype,
            )
        except UnsupportedOp:  # a minimal backend without strided writes, as in arange
            rows = [[int(i == j) for j in range(shape[1])] for i in range(shape[0])]
            return tensor(rows, dtype=out.dtype, device=out.device)
    return out


def _allocating(op, make):
    """make(), with an OutOfMemory from its allocation naming `op`, the function called."""
    try:
        return make()
    except OutOfMemory as exc:
        raise OutOfMemory(f"{op}: {exc}", **{**exc.details, "op": op}) from None


def where(cond, a, b):
    """a where cond is non-zero, else b; scalars take the tensor operand's dtype."""
    if not isinstance(cond, Tensor):
        raise TypeError("where: cond must be a Tensor")
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("where: a or b must be a Tensor")
    if not isinstance(a, Tensor):
        a = b._scalar_tensor("where", a)
    if not isinstance(b, Tensor):
        b = a._scalar_tensor("where", b)
    a._check_same("where", b)
    a._check_same("where", cond, same_dtype=False)
    shape = broadcast_shapes("where", cond.shape, a.shape, b.shape)
    return a._new(
        a.backend.where(
            cond.storage,
            cond.layout.broadcast_to(shape),
            a.storage,
            a.layout.broadcast_to(shape),
            b.storage,
            b.layout.broadcast_to(shape),
            a.dtype,
        ),
        shape,
    )


def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("cat: expects a non-empty list of tensors")
    first = tensors[0]
    if any(t.ndim == 0 for t in tensors):
        raise ShapeMismatch(
            f"cat: 0-d tensors cannot be concatenated, got shapes "
            f"{' '.join(fmt_shape(x.shape) for x in tensors)}; use stack",
            op="cat",
            shapes=[x.shape for x in tensors],
        )
    dim = normalize_dim(dim, first.ndim, "cat", first.shape)
    for t in tensors[1:]:
        first._check_same("cat", t)
        if t.ndim != first.ndim or any(
            t.shape[d] != first.shape[d] for d in range(first.ndim) if d != dim
        ):
            raise ShapeMismatch(
                f"cat: shapes {' '.join(fmt_shape(x.shape) for x in tensors)} differ outside "
                f"dim {dim}",
                op="cat",
                shapes=[x.shape for x in tensors],
            )
    shape = list(first.shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    backend = first.backend
    storage = backend.empty(shape, first.dtype)  # every element is written below
    out_layout = Layout(shape)
    offset = 0
    for t in tensors:
        n = t.shape[dim]
        if n:
            backend.copy_into(
                storage, out_layout.narrow(dim, offset, n), t.storage, t.layout, first.dtype
            )
        offset += n
    return first._new(storage, tuple(shape))


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: expects a non-empty list of tensors")
    dim = normalize_dim(dim, tensors[0].ndim + 1, "stack", tensors[0].shape)
    for t in tensors[1:]:
        if t.shape != tensors[0].shape:
            raise ShapeMismatch(
                f"stack: all tensors need the same shape, got "
                f"{' '.join(fmt_shape(x.shape) for x in tensors)}",
                op="stack",
            )
    return cat([t.unsqueeze(dim) for t in tensors], dim)


def matmul(a, b):
    return a.matmul(b)


def softmax(x, dim=-1):
    return x.softmax(dim)
