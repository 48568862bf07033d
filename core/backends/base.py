"""The primitive set every backend implements.

A storage is whatever the backend keeps (a flat numpy/cupy array, a GPU buffer); a
layout says how a tensor reads it. Every primitive receives layouts, so strided inputs
need no prior copy, and returns a new contiguous storage unless it says otherwise.
Binary, compare and where receive layouts already broadcast to the output shape
(stride 0 on broadcast dims); matmul receives batch dims already broadcast.

Fused fast paths (softmax, log_softmax, layer_norm, rms_norm, rope, attention) are
optional: `Tensor` asks `has_fused(name)` and otherwise composes primitives.
"""


class Backend:
    name = "abstract"

    # --- memory ----------------------------------------------------------------------
    def from_host(self, data, dtype, shape):
        """Upload host data: a numpy array of dtype's storage type, or little-endian bytes."""
        raise NotImplementedError

    def to_numpy(self, storage, layout, dtype):
        """A numpy array of the tensor (bf16 comes back as f32)."""
        raise NotImplementedError

    def to_bytes(self, storage, layout, dtype):
        """The tensor's elements, contiguous, as little-endian bytes."""
        raise NotImplementedError

    def full(self, shape, value, dtype):
        raise NotImplementedError

    def copy_strided(self, storage, layout, dtype):
        """A contiguous copy of the strided view."""
        raise NotImplementedError

    def copy_into(self, dst, dst_layout, src, src_layout, dtype):
        """Write src (read through src_layout) into dst's view dst_layout, in place."""
        raise NotImplementedError

    def cast(self, storage, layout, src_dtype, dst_dtype):
        raise NotImplementedError

    # --- elementwise -----------------------------------------------------------------
    def unary(self, op, storage, layout, dtype, params=()):
        raise NotImplementedError

    def binary(self, op, a, la, b, lb, dtype):
        """`b` may be a Python scalar (then lb is None): it takes the tensor's dtype."""
        raise NotImplementedError

    def compare(self, op, a, la, b, lb, dtype):
        """Result is u8 (1 where true)."""
        raise NotImplementedError

    def where(self, cond, lc, a, la, b, lb, dtype):
        raise NotImplementedError

    # --- reductions and scans -----------------------------------------------------------
    def reduce(self, op, storage, layout, dims, dtype):
        """Reduce over `dims` (sorted); the result keeps them as size-1 dims."""
        raise NotImplementedError

    def cumsum(self, storage, layout, dim, dtype):
        raise NotImplementedError

    # --- linear algebra and indexing -------------------------------------------------------
    def matmul(self, a, la, b, lb, dtype):
        """la (..., M, K) and lb (..., K, N) with equal batch shapes (broadcast strides)."""
        raise NotImplementedError

    def index_select(self, storage, layout, ids, lids, dim, dtype):
        raise NotImplementedError

    def gather(self, storage, layout, ids, lids, dim, dtype):
        raise NotImplementedError

    def scatter_add(self, dst, ldst, ids, lids, src, lsrc, dim, dtype):
        """A new tensor: dst with src added at ids along dim."""
        raise NotImplementedError

    # --- fused fast paths ---------------------------------------------------------------
    fused = frozenset()

    def has_fused(self, name):
        return name in self.fused

    def synchronize(self):
        """Wait for queued work (a no-op on synchronous backends)."""
