"""Layers over ggml-quantized weights (QTensor), for models loaded from GGUF.

On the CPU a QuantLinear runs `ember.io.quant.qmatmul`: the weight is dequantized a
chunk of rows at a time into one reused buffer, never whole. On a device whose backend
has `upload_quantized`/`qmatmul` (WebGPU, for the ggml types its kernel decodes: Q8_0,
Q4_0, Q4_K, Q6_K) the weight's raw blocks go to the device as they are and are
dequantized inside the matmul, so device memory is the file's tensor bytes. Other types,
and other devices, get the weight dequantized to a dense tensor once, at placement
(`QuantLinear.place`; load_gguf_model places every layer, a forward on a new device
places lazily).

QuantEmbedding dequantizes only the looked-up rows, on the host, and uploads them.
"""
import numpy as np

from .. import dtype as dt
from ..errors import DeviceError, ShapeMismatch, fmt_shape
from ..io.quant import qmatmul
from ..layout import Layout
from ..nn import Module
from ..tensor import Tensor, from_numpy, zeros


def _device_kernel(device, ggml_type):
    """Whether `device`'s backend keeps weights of this ggml type quantized."""
    backend = device.backend
    if not hasattr(backend, "upload_quantized"):
        return False
    from ..backends.webgpu import qmatmul as wq
    return wq.supports(ggml_type)


# host memory a dequantized chunk may take while uploading to a device
_UPLOAD_CHUNK_BYTES = 8 << 20


def upload_dequantized(q, device, dtype=dt.f32):
    """A quantized weight as a dense tensor on `device`, dequantized a few rows at a time
    into its slice of one preallocated device tensor (the host never holds it whole)."""
    rows, cols = q.shape
    out = zeros(rows, cols, dtype=dtype, device=device)
    step = max(1, _UPLOAD_CHUNK_BYTES // (4 * cols))
    buf = np.empty((min(step, rows), cols), np.float32)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        chunk = from_numpy(q.dequantize_rows(r0, r1, out=buf[:r1 - r0])).to(device)
        out.narrow(0, r0, r1 - r0).copy_(chunk if chunk.dtype is dtype else chunk.to(dtype))
    return out


def _owns_its_memory(array):
    """Whether `array` is (a view of) memory numpy allocated, rather than of a file's
    memory map or another buffer."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array.base is None


class _DeviceOnly:
    """What remains of a QTensor whose bytes now live only on `device`."""

    __slots__ = ("ggml_type", "shape", "nbytes", "device")

    def __init__(self, q, device):
        self.ggml_type, self.shape, self.nbytes, self.device = q.ggml_type, q.shape, q.nbytes, device

    def unavailable(self):
        return DeviceError(
            f"QuantLinear: this stacked {self.ggml_type.name} weight {fmt_shape(self.shape)} "
            f"lives only on {self.device} (its host copy was released after the upload); load "
            f"the GGUF model for the device you want to run it on", device=str(self.device))

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
        self._placed = None      # (device, device QWeight or None, dense tensor or None)

    @property
    def weight(self):
        return self.qweight

    def place(self, device, dtype=dt.f32):
        """Put the weight on a non-CPU `device`: its raw blocks where the backend has a
        kernel for the type, else dequantized to a dense `dtype` tensor."""
        if device.kind == "cpu":
            self._placed = None
            return self
        if self._placed is not None and self._placed[0] == device:
            return self
        self._placed = None      # free the old copy before uploading the new one
        w = self.qweight
        if _device_kernel(device, w.ggml_type):
            self._placed = (device, device.backend.upload_quantized(w.raw, w.ggml_type, w.shape),
                            None)
        else:
            self._placed = (device, None, upload_dequantized(w, device, dtype))
        if _owns_its_memory(w.raw):
            # An array of its own (fused_linear's stack of q/k/v or gate/up), not a view of
            # the file's memory map: kept, it would hold the model's size in host memory
            # next to the device copy. Only the description stays.
            self.qweight = _DeviceOnly(w, device)
        return self

    def _host_weight(self):
        if isinstance(self.qweight, _DeviceOnly):
            raise self.qweight.unavailable()
        return self.qweight

    def device_bytes(self):
        """Bytes the placed weight takes on its device (0 when not placed)."""
        if self._placed is None:
            return 0
        _, qw, dense = self._placed
        return qw.storage.buf.size if qw is not None else dense.numel() * dense.dtype.itemsize

    def forward(self, x):
        if x.shape[-1] != self.in_features:
            raise ShapeMismatch(
                f"QuantLinear: input {fmt_shape(x.shape)} has last dim {x.shape[-1]}, expected "
                f"{self.in_features} (weight {self.qweight!r})", op="qmatmul",
                shapes=(x.shape, self.qweight.shape))
        if x.device.kind == "cpu":
            y = from_numpy(qmatmul(np.ascontiguousarray(x.numpy(), dtype=np.float32),
                                   self._host_weight()))
            if x.dtype is not dt.f32:
                y = y.to(x.dtype)
            return y + self.bias if self.bias is not None else y
        self.place(x.device, x.dtype)
        _, qw, dense = self._placed
        if dense is not None:
            y = x @ (dense if dense.dtype is x.dtype else dense.to(x.dtype)).t()
        else:
            xf = x if x.dtype is dt.f32 else x.to(dt.f32)
            st, shape = x.backend.qmatmul(xf.storage, xf.layout, qw, dt.f32)
            y = Tensor(st, Layout(shape), dt.f32, x.device)
            if x.dtype is not dt.f32:
                y = y.to(x.dtype)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, {self.qweight.ggml_type.name}"


class QuantEmbedding(Module):
    """Rows of a quantized (vocab, dim) table: only the looked-up rows are dequantized,
    on the host, and uploaded to `device` (the table itself never goes there)."""

    def __init__(self, weight, device, dtype=dt.f32):
        super().__init__()
        self.qweight = weight
        self.device = device
        self.out_dtype = dtype     # the model's activation dtype (load_gguf_model sets it)
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
        y = from_numpy(out.reshape(host.shape + (self.embedding_dim,))).to(self.device)
        return y if self.out_dtype is dt.f32 else y.to(self.out_dtype)
