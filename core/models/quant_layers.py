"""Layers over ggml-quantized weights (QTensor), for models loaded from GGUF (and the
f16 halves whisper_load keeps), and the layer factory that makes them (QuantizedLayers).

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
from .. import functional as F
from ..errors import DeviceError, DimOutOfRange, ShapeMismatch, fmt_shape
from ..io.quant import QTensor, StackedQTensor
from ..layout import Layout
from ..nn import Module
from ..tensor import Tensor, cat, from_numpy
from .layer_factory import DenseLayers


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
        placed = self._placed
        if placed is not None and (placed[0] is device or placed[0] == device):
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

    def forward(self, x, activation=None, residual=None):
        """activation(x @ dequantize(weight).T + bias) + residual, as Linear: `activation`
        a unary op name (F.LINEAR_ACTIVATIONS), `residual` of the output's shape; one
        backend call (Backend.qlinear) for f32 activations."""
        if x.shape[-1] != self.in_features:
            raise ShapeMismatch(
                f"QuantLinear: input {fmt_shape(x.shape)} has last dim {x.shape[-1]}, expected "
                f"{self.in_features} (weight {self.qweight!r})",
                op="qmatmul",
                shapes=(x.shape, self.qweight.shape),
            )
        if activation is not None and activation not in F.LINEAR_ACTIVATIONS:
            raise ValueError(
                f"QuantLinear: unknown activation {activation!r}; known: "
                f"{', '.join(sorted(F.LINEAR_ACTIVATIONS))}"
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
                activation,
            )
            return Tensor(st, Layout(shape), dt.f32, x.device)
        # Other activation dtypes: the f32 product converts before the other steps.
        xf = x if x.dtype is dt.f32 else x.to(dt.f32)
        st, shape = x.backend.qmatmul(xf.storage, xf.layout, self._placed[1], dt.f32)
        y = Tensor(st, Layout(shape), dt.f32, x.device)
        if x.dtype is not dt.f32:
            y = y.to(x.dtype)
        y = y + bias if bias is not None else y
        y = getattr(y, activation)() if activation is not None else y
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


class QuantizedLayers(DenseLayers):
    """The model's layers over a GGUF file's weights: QuantLinear / QuantEmbedding where
    the source hands out a quantized weight (a QTensor), dense layers elsewhere."""

    def from_tensors(self, weight, bias):
        if isinstance(weight, QTensor):
            return QuantLinear(weight, bias)
        return super().from_tensors(weight, bias)

    def concat(self, names, parts):
        weights = [w for w, _ in parts]
        quant = [isinstance(w, QTensor) for w in weights]
        if not any(quant):
            return super().concat(names, parts)
        bias = cat([b for _, b in parts], 0) if parts[0][1] is not None else None
        if all(quant) and len({w.ggml_type for w in weights}) == 1:
            # Same-type weights run as one matmul over a row stack of the file's views (no
            # copy: the q/k/v and gate/up bytes would be a third of a small model twice),
            # one view where they are one run of the file's bytes (gate/up).
            stack = adjacent_stack(weights)
            return QuantLinear(stack if stack is not None else StackedQTensor(weights), bias)
        # Mixed types (Q4_K_M files): separate layers, their outputs concatenated.
        return ConcatLinear(
            **{name: self.from_tensors(w, b) for name, (w, b) in zip(names, parts, strict=True)}
        )

    def embedding(self, vb, vocab, hidden, device):
        dense = super().embedding(vb, vocab, hidden, device)
        # The source handed the layer a QTensor: look rows up in it instead.
        if isinstance(dense.weight, QTensor):
            return QuantEmbedding(dense.weight, device)
        return dense

    def tied_head(self, embedding):
        return self.from_tensors(embedding.weight, None)


def _buffer_of(array):
    """The object whose memory `array` views (a file's memory map), past numpy's views
    and the memoryviews np.frombuffer makes."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    base = array.base
    while isinstance(base, memoryview):
        base = base.obj
    return base


class AdjacentStack(StackedQTensor):
    """A row stack whose parts' bytes follow one another in one buffer, as llama.cpp's
    converter writes a layer's gate and up weights: `joined` is one QTensor viewing them
    all (no copy). The CPU's fused kernels run once over it instead of part by part (the
    dequantize-and-GEMM paths still go part by part, so every path keeps the stack's
    bits), and an upload reads it instead of assembling a copy."""

    __slots__ = ("joined",)

    def __init__(self, parts, joined):
        super().__init__(parts)
        self.joined = joined

    @property
    def raw(self):
        return self.joined.raw


def adjacent_stack(weights):
    """An AdjacentStack of `weights` (2-D QTensors of one type and row length, in order)
    where their bytes are one run of one buffer, else None. Every part but the last must
    have an even row count: the fused kernels take rows in pairs, so each row keeps the
    partner (and the bits) it has in a plain stack."""
    if len(weights) < 2 or any(w.shape[0] % 2 for w in weights[:-1]):
        return None
    if len({(w.ggml_type, w.shape[1]) for w in weights}) != 1:
        return None
    buffer = _buffer_of(weights[0].raw)
    if buffer is None or any(_buffer_of(w.raw) is not buffer for w in weights):
        return None
    start = weights[0].raw.__array_interface__["data"][0]
    at = start
    for w in weights:
        if not w.raw.flags.c_contiguous or w.raw.__array_interface__["data"][0] != at:
            return None
        at += w.raw.nbytes
    whole = np.frombuffer(buffer, dtype=np.uint8)
    offset = start - whole.__array_interface__["data"][0]
    rows = sum(w.shape[0] for w in weights)
    joined = QTensor(
        whole[offset : offset + (at - start)], weights[0].ggml_type, (rows, weights[0].shape[1])
    )
    return AdjacentStack(weights, joined)


class ConcatLinear(Module):
    """Linear layers over the same input whose outputs are concatenated (the q/k/v or
    gate/up projections of a file that quantizes them with different types)."""

    def __init__(self, **parts):
        super().__init__()
        self.names = tuple(parts)
        for name, layer in parts.items():
            setattr(self, name, layer)

    def forward(self, x):
        return cat([getattr(self, name)(x) for name in self.names], -1)
