"""Layers over ggml-quantized weights (QTensor), for models loaded from GGUF.

On the CPU a QuantLinear runs `ember.io.quant.qmatmul`: the weight is dequantized a
chunk of rows at a time into one reused buffer, never whole. Other devices get f32
weights dequantized per tensor at load time (see gguf_llama.py), so these layers
only ever see CPU inputs.
"""
import numpy as np

from ..errors import DeviceMismatch, ShapeMismatch, fmt_shape
from ..io.quant import qmatmul
from ..nn import Module
from ..tensor import from_numpy


class QuantLinear(Module):
    """y = x @ dequantize(weight).T + bias, with weight a QTensor (out, in)."""

    def __init__(self, weight, bias=None):
        super().__init__()
        self.qweight = weight
        self.out_features, self.in_features = weight.shape
        self.bias = bias

    @property
    def weight(self):
        return self.qweight

    def forward(self, x):
        if x.device.kind != "cpu":
            raise DeviceMismatch(
                f"QuantLinear: quantized weights run on the cpu; input is on {x.device} "
                "(load the GGUF model for that device to get dequantized weights)",
                op="qmatmul", devices=(x.device,))
        if x.shape[-1] != self.in_features:
            raise ShapeMismatch(
                f"QuantLinear: input {fmt_shape(x.shape)} has last dim {x.shape[-1]}, expected "
                f"{self.in_features} (weight {self.qweight!r})", op="qmatmul",
                shapes=(x.shape, self.qweight.shape))
        y = from_numpy(qmatmul(np.ascontiguousarray(x.numpy(), dtype=np.float32), self.qweight))
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, {self.qweight.ggml_type.name}"


class QuantEmbedding(Module):
    """Rows of a quantized (vocab, dim) table: only the looked-up rows are dequantized."""

    def __init__(self, weight, device):
        super().__init__()
        self.qweight = weight
        self.device = device
        self.num_embeddings, self.embedding_dim = weight.shape

    @property
    def weight(self):
        return self.qweight

    def forward(self, ids):
        host = np.asarray(ids.numpy(), dtype=np.int64)
        flat = host.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= self.num_embeddings):
            bad = int(flat.min() if flat.min() < 0 else flat.max())
            raise ShapeMismatch(f"embedding: token id {bad} out of range for a vocabulary of "
                                f"{self.num_embeddings}", op="embedding", index=bad)
        out = np.empty((flat.size, self.embedding_dim), np.float32)
        for i, r in enumerate(flat):
            self.qweight.dequantize_rows(int(r), int(r) + 1, out=out[i:i + 1])
        return from_numpy(out.reshape(host.shape + (self.embedding_dim,))).to(self.device)
