"""Layers over ggml-quantized weights (QTensor), for models loaded from GGUF.

A QuantLinear runs the backend contract's quantized matmul (Backend.qmatmul) on what
Backend.place_quantized made of its weight, and decides nothing about devices: where the
backend keeps the weight's type quantized (`keeps_quantized`: WebGPU, for the ten common
GGUF types its kernel decodes, Q4_0 .. Q6_K) the raw blocks go to the device as they are
and are dequantized inside the matmul, so device memory is the file's tensor bytes; numpy
reads the host weight itself and dequantizes a chunk of rows at a time into one reused
buffer; other devices get a dense f32 copy made once, a chunk of rows at a time.

QuantEmbedding dequantizes only the looked-up rows, on the host, and uploads them.
"""

import numpy as np

from .. import dtype as dt
from ..errors import DeviceError, DimOutOfRange, ShapeMismatch, fmt_shape
from ..layout import Layout
from ..nn import Module
from ..tensor import Tensor, from_numpy


def _owns_its_memory(array):
    """Whether `array` is (a view of) memory numpy allocated, rather than of a file's
    memory map or another buffer."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array.base is None


def _holds_own_bytes(weight):
    """Whether a host weight's bytes (each part's, for a row stack) are memory of its own,
    not views of a file's memory map."""
    parts = getattr(weight, "parts", None) or (weight,)
    return any(_owns_its_memory(p.raw) for p in parts)


class _DeviceOnly:
    """What remains of a QTensor whose bytes now live only on `device`."""

    __slots__ = ("ggml_type", "shape", "nbytes", "device")

    def __init__(self, q, device):
        self.ggml_type, self.shape, self.nbytes, self.device = (
            q.ggml_type,
            q.shape,
            q.nbytes,
            device,
        )

    def unavailable(self):
        return DeviceError(
            f"QuantLinear: this stacked {self.ggml_type.name} weight {fmt_shape(self.shape)} "
            f"lives only on {self.device} (its host copy was released after the upload); load "
            f"the GGUF model for the device you want to run it on",
            device=str(self.device),
        )

    @property
    def raw(self):
        raise self.unavailable()

    def __repr__(self):
        return f"QTensor({self.ggml_type.name}, {fmt_shape(self.shape)}, on {self.device} only)"


class QuantLinear(Module):
    """y = x @ dequantize(weight).T + bias, with weight a QTensor (out, in)."""

    def __init__(self, weight, bias=None):
        super().__init__()
        self.qweight = weight
        self.out_features, self.in_features = weight.shape
        self.bias = bias
        self._placed = None  # (device, what that device's qmatmul takes)

    @property
    def weight(self):
        return self.qweight

    def place(self, device, dtype=dt.f32):
        """Put the weight where `device` computes with it (Backend.place_quantized: raw
        blocks where a kernel decodes the type, a dense copy made once elsewhere, or the
        host weight itself on numpy). Quantized weights decode to f32 whatever `dtype`
        the model's activations have (forward converts)."""
        if self._placed is not None and self._placed[0] == device:
            return self
        w = self._host_weight()  # raises, changing nothing, where the weight is elsewhere
        self._placed = None  # free the old copy before placing the new one
        placed = device.backend.place_quantized(w)
        self._placed = (device, placed)
        if placed is not w and _holds_own_bytes(w):
            # Arrays of its own, not views of the file's memory map: kept, they would hold
            # the weight's size in host memory next to the device copy. Only the
            # description stays.
            self.qweight = _DeviceOnly(w, device)
        return self

    def _host_weight(self):
        if isinstance(self.qweight, _DeviceOnly):
            raise self.qweight.unavailable()
        return self.qweight

    def device_bytes(self):
        """Bytes the placed weight takes on its device (0 when not placed, or when the
        device reads the host weight)."""
        if self._placed is None or self._placed[1] is self.qweight:
            return 0
        return self._placed[1].nbytes

    def forward(self, x, residual=None):
        """x @ dequantize(weight).T + bias, plus `residual` (the output's shape) when
        given: one backend call (Backend.qlinear) for f32 activations."""
        if x.shape[-1] != self.in_features:
            raise ShapeMismatch(
                f"QuantLinear: input {fmt_shape(x.shape)} has last dim {x.shape[-1]}, expected "
                f"{self.in_features} (weight {self.qweight!r})",
                op="qmatmul",
                shapes=(x.shape, self.qweight.shape),
            )
        out_shape = x.shape[:-1] + (self.out_features,)
        if residual is not None:
            x._check_same("QuantLinear", residual)
            if residual.shape != out_shape:
                raise ShapeMismatch(
                    f"QuantLinear: residual {fmt_shape(residual.shape)} must have the "
                    f"output's shape {fmt_shape(out_shape)}",
                    op="qmatmul",
                    shapes=(out_shape, residual.shape),
                )
        self.place(x.device, x.dtype)
        bias = self.bias
        if x.dtype is dt.f32 and (bias is None or bias.dtype is dt.f32):
            st, shape = x.backend.qlinear(
                x.storage,
                x.layout,
                self._placed[1],
                bias.storage if bias is not None else None,
                bias.layout if bias is not None else None,
                dt.f32,
                residual.storage if residual is not None else None,
                residual.layout if residual is not None else None,
            )
            return Tensor(st, Layout(shape), dt.f32, x.device)
        # Other activation dtypes: the f32 product converts before the additions.
        xf = x if x.dtype is dt.f32 else x.to(dt.f32)
        st, shape = x.backend.qmatmul(xf.storage, xf.layout, self._placed[1], dt.f32)
        y = Tensor(st, Layout(shape), dt.f32, x.device)
        if x.dtype is not dt.f32:
            y = y.to(x.dtype)
        y = y + bias if bias is not None else y
        return y + residual if residual is not None else y

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, {self.qweight.ggml_type.name}"


class QuantEmbedding(Module):
    """Rows of a quantized (vocab, dim) table: only the looked-up rows are dequantized,
    on the host, and uploaded to `device` (the table itself never goes there)."""

    def __init__(self, weight, device, dtype=dt.f32):
        super().__init__()
        self.qweight = weight
        self.device = device
        self.out_dtype = dtype  # the model's activation dtype (load_gguf_model sets it)
        self.num_embeddings, self.embedding_dim = weight.shape

    @property
    def weight(self):
        return self.qweight

    def forward(self, ids):
        host = np.asarray(ids.numpy(), dtype=np.int64)
        flat = host.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= self.num_embeddings):
            bad = int(flat.min() if flat.min() < 0 else flat.max())
            raise DimOutOfRange(
                f"embedding: token id {bad} out of range for a vocabulary of {self.num_embeddings}",
                op="embedding",
                index=bad,
            )
        out = np.empty((flat.size, self.embedding_dim), np.float32)
        for i, r in enumerate(flat):
            self.qweight.dequantize_rows(int(r), int(r) + 1, out=out[i : i + 1])
        y = from_numpy(out.reshape(host.shape + (self.embedding_dim,))).to(self.device)
        return y if self.out_dtype is dt.f32 else y.to(self.out_dtype)
