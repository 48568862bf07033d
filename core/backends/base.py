"""The primitive set every backend implements.

A storage is whatever the backend keeps (a flat numpy/cupy array, a GPU buffer); a
layout says how a tensor reads it. Every primitive receives layouts, so strided inputs
need no prior copy, and returns a new contiguous storage unless it says otherwise.
Binary, compare and where receive layouts already broadcast to the output shape
(stride 0 on broadcast dims); matmul receives batch dims already broadcast.

Fused fast paths (softmax, log_softmax, layer_norm, rms_norm, rope, attention) are
optional: `Tensor` asks `has_fused(name)` and otherwise composes primitives.
"""
from ..errors import UnsupportedOp


class Backend:
    name = "abstract"

    def lacks(self, primitive, op=None, dtype=None):
        """The error for a primitive this backend does not provide: it names the
        primitive, the op and dtype asked for, and the backend."""
        what = primitive if op is None else f"{primitive} {op}"
        of = f" for {dtype.name}" if dtype is not None else ""
        return UnsupportedOp(
            f"{what}: not provided by the {self.name} backend{of}; run it on another "
            f"device (e.g. .to('cpu'))", op=op or primitive, backend=self.name)

    # --- memory ----------------------------------------------------------------------
    def from_host(self, data, dtype, shape):
        """Upload host data: a numpy array of dtype's storage type, or little-endian bytes."""
        raise self.lacks("from_host")

    def to_numpy(self, storage, layout, dtype):
        """A numpy array of the tensor (bf16 comes back as f32)."""
        raise self.lacks("to_numpy")

    def to_bytes(self, storage, layout, dtype):
        """The tensor's elements, contiguous, as little-endian bytes."""
        raise self.lacks("to_bytes")

    def full(self, shape, value, dtype):
        raise self.lacks("full")

    def empty(self, shape, dtype):
        """Storage whose every element the caller will overwrite (cat): no fill pass where
        the backend can skip it."""
        return self.full(shape, 0, dtype)

    def copy_strided(self, storage, layout, dtype):
        """A contiguous copy of the strided view."""
        raise self.lacks("copy_strided")

    def copy_into(self, dst, dst_layout, src, src_layout, dtype):
        """Write src (read through src_layout) into dst's view dst_layout, in place."""
        raise self.lacks("copy_into")

    def cast(self, storage, layout, src_dtype, dst_dtype):
        raise self.lacks("cast")

    # --- elementwise -----------------------------------------------------------------
    def unary(self, op, storage, layout, dtype, params=()):
        raise self.lacks("unary", op, dtype)

    def binary(self, op, a, la, b, lb, dtype):
        """`b` may be a Python scalar (then lb is None): it takes the tensor's dtype."""
        raise self.lacks("binary", op, dtype)

    def compare(self, op, a, la, b, lb, dtype):
        """Result is u8 (1 where true)."""
        raise self.lacks("compare", op, dtype)

    def where(self, cond, lc, a, la, b, lb, dtype):
        raise self.lacks("where")

    # --- reductions and scans -----------------------------------------------------------
    def reduce(self, op, storage, layout, dims, dtype):
        """Reduce over `dims` (sorted); the result keeps them as size-1 dims."""
        raise self.lacks("reduce", op, dtype)

    def cumsum(self, storage, layout, dim, dtype):
        raise self.lacks("cumsum")

    # --- linear algebra and indexing -------------------------------------------------------
    def matmul(self, a, la, b, lb, dtype):
        """la (..., M, K) and lb (..., K, N) with equal batch shapes (broadcast strides)."""
        raise self.lacks("matmul")

    def index_select(self, storage, layout, ids, lids, dim, dtype):
        raise self.lacks("index_select")

    def gather(self, storage, layout, ids, lids, dim, dtype):
        raise self.lacks("gather")

    def scatter_add(self, dst, ldst, ids, lids, src, lsrc, dim, dtype):
        """A new tensor: dst with src added at ids along dim."""
        raise self.lacks("scatter_add")

    # --- fused fast paths ---------------------------------------------------------------
    fused = frozenset()

    # Optional: rope(storage, layout, cos, lcos, sin, lsin, dtype, interleaved) -> storage.
    # Rotary embedding of x [..., T, D] (read through `layout`) with cos and sin tables
    # [T, D/2] (their layouts may be strided or broadcast). Pairs are (2i, 2i+1) when
    # `interleaved` (GPT-J, GGUF llama) and (i, i + D/2) otherwise (half-split, HF Llama):
    #     out[first] = x[first] * cos[t, i] - x[second] * sin[t, i]
    #     out[second] = x[second] * cos[t, i] + x[first] * sin[t, i]
    # Computed in f32, stored in dtype; the result is contiguous. Offered as "rope".

    def has_fused(self, name):
        return name in self.fused

    def synchronize(self):
        """Wait for queued work (a no-op on synchronous backends)."""
