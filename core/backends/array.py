"""The array backend: numpy on the CPU, cupy on NVIDIA GPUs, one class parametrized by `xp`.

A storage is a flat 1-D array of the dtype's storage type (bf16 keeps its raw bits in
uint16). A tensor's view is built from its layout without copying; ops compute on those
views directly. f16 and bf16 compute in f32 and round back, because numpy's f16 loops
are slow and bf16 does not exist there.
"""

from .. import dtype as dt
from ..errors import DimOutOfRange, OutOfMemory, ShapeMismatch, fmt_shape
from ..hostdata import bf16_to_f32, f32_to_bf16
from ..hostmem import host_memory_bytes, human_bytes
from ..ops import BINARY, COMPARE, INT_DIV, UNARY
from . import (
    array_attention,
    array_fast,
    array_small_attention,
    composites,
    llvm_attention,
    llvm_math,
    llvm_norm,
)
from .array_conv import conv2d as banded_conv2d
from .array_conv import conv2d_cat as banded_conv2d_cat
from .array_copy import contiguous_copy
from .array_fast import UNARY_INPLACE
from .array_qmatmul import qmatmul_rows
from .array_rows import linear_epilogue, norm_last_dim, softmax_last_dim
from .array_stacked import stacked_matmul
from .base import Backend
from .blas_threads import SMALL_GEMM_MACS
from .host_malloc import trim_heap
from .row_parallel import MIN_PARALLEL_ELEMENTS, map_tasks


class ArrayBackend(Backend):
    def __init__(self, xp, name):
        self.xp = xp
        self.name = name
        self._is_numpy = xp.__name__ == "numpy"
        self._errstate = getattr(xp, "errstate", None)

    @property
    def info(self):
        return {"name": self.xp.__name__, "device": self.name}

    @property
    def kernel_set(self):
        return self.xp.__name__

    @property
    def attention_tile_elements(self):
        # Larger tiles than a GPU's: fewer, fuller GEMMs, still a bounded 16 MiB of scores.
        return composites.CPU_ATTENTION_TILE_ELEMENTS

    def map_independent(self, fn, items):
        """numpy: the calls spread over the cores, each on one thread inside (see
        row_parallel.map_tasks); cupy (one device queue) runs them in turn."""
        if not self._is_numpy:
            return [fn(item) for item in items]
        return map_tasks(fn, items)

    def release_free_memory(self):
        """numpy: the C heap's free pages (host_malloc.trim_heap); cupy keeps its pool."""
        if self._is_numpy:
            trim_heap()

    # --- views and conversions ----------------------------------------------------------
    def view(self, storage, layout):
        """The strided array that `layout` reads from `storage`, without a copy."""
        xp = self.xp
        shape = layout.shape
        if layout.is_contiguous():  # a slice of the storage (a decode step's views mostly)
            return storage[layout.offset : layout.offset + layout.numel].reshape(shape)
        item = storage.itemsize
        strides = tuple(s * item for s in layout.strides)
        if layout.numel == 0:
            return xp.empty(shape, storage.dtype)
        if self._is_numpy:
            return xp.ndarray(
                shape, storage.dtype, buffer=storage, offset=layout.offset * item, strides=strides
            )
        return xp.lib.stride_tricks.as_strided(storage[layout.offset :], shape, strides)

    def load(self, storage, layout, dtype):
        """The view in its compute dtype: f16 and bf16 widen to f32."""
        x = self.view(storage, layout)
        if dtype is dt.bf16:
            return bf16_to_f32(self.xp, x)
        if dtype is dt.f16:
            return x.astype(self.xp.float32)
        return x

    def store(self, array, dtype):
        """A flat contiguous storage of `dtype` holding `array` (narrowing f32 if needed)."""
        xp = self.xp
        if dtype is dt.bf16:
            if array.dtype != xp.uint16:
                array = f32_to_bf16(xp, xp.asarray(array, dtype=xp.float32))
        else:
            array = xp.asarray(array, dtype=dtype.numpy_name)
        return xp.ascontiguousarray(array).reshape(-1)

    def from_host(self, data, dtype, shape, copy=True):
        xp = self.xp
        storage_type = dtype.numpy_name
        if isinstance(data, (bytes, bytearray, memoryview)):
            import numpy

            host = numpy.frombuffer(data, dtype=storage_type)
        else:
            host = data
        arr = xp.asarray(host, dtype=storage_type)
        flat = xp.ascontiguousarray(arr).reshape(-1)
        if copy and (flat is host or getattr(flat, "base", None) is not None):
            flat = flat.copy()
        return flat

    def to_numpy(self, storage, layout, dtype):
        x = self.view(storage, layout)
        if dtype is dt.bf16:
            x = bf16_to_f32(self.xp, x)
        return x if self._is_numpy else self.xp.asnumpy(x)

    def to_bytes(self, storage, layout, dtype):
        x = self.view(storage, layout)
        if not self._is_numpy:
            x = self.xp.asnumpy(x)
        import numpy

        return numpy.ascontiguousarray(x).tobytes()

    def host_bytes(self, storage, layout, dtype):
        if not self._is_numpy:
            return self.to_bytes(storage, layout, dtype)
        raw = self.xp.ascontiguousarray(self.view(storage, layout))  # bf16 stays raw bits
        return memoryview(raw).cast("B") if raw.size else b""

    def full(self, shape, value, dtype):
        xp = self.xp
        n = 1
        for d in shape:
            n *= d
        if dtype is dt.bf16:
            value = int(f32_to_bf16(xp, xp.asarray([value], dtype=xp.float32))[0])
        self.check_allocation("full", shape, dtype)
        try:
            if value == 0 and self._is_numpy and n * dtype.itemsize >= LAZY_ZEROS_BYTES:
                return _lazy_zeros(xp, n, dtype.numpy_name)
            return xp.full((n,), value, dtype=dtype.numpy_name)
        except MemoryError:  # cupy's OutOfMemoryError is a MemoryError too
            raise self.out_of_memory("full", shape, dtype) from None

    def empty(self, shape, dtype):
        n = 1
        for d in shape:
            n *= d
        self.check_allocation("empty", shape, dtype)
        try:
            return self.xp.empty((n,), dtype=dtype.numpy_name)
        except MemoryError:
            raise self.out_of_memory("empty", shape, dtype) from None

    def check_allocation(self, op, shape, dtype):
        """Refuse up front what cannot fit in the host's memory: with overcommit, the
        allocation itself may succeed and the first write kill the process instead."""
        n = 1
        for d in shape:
            n *= d
        limit = host_memory_bytes() if self._is_numpy else None
        if limit is not None and n * dtype.itemsize > limit:
            raise self.out_of_memory(op, shape, dtype, limit)

    def out_of_memory(self, op, shape, dtype, limit=None):
        n = 1
        for d in shape:
            n *= d
        nbytes = n * dtype.itemsize
        have = f"; this host has {human_bytes(limit)} of memory" if limit else ""
        return OutOfMemory(
            f"{op}: out of memory allocating {fmt_shape(shape)} {dtype.name} "
            f"({nbytes} bytes, {human_bytes(nbytes)}) on {self.name}{have}",
            op=op,
            shape=tuple(shape),
            dtype=dtype,
            nbytes=nbytes,
            device=self.name,
        )

    def copy_strided(self, storage, layout, dtype):
        return contiguous_copy(self.xp, self.view(storage, layout)).reshape(-1)

    def copy_into(self, dst, dst_layout, src, src_layout, dtype):
        self.view(dst, dst_layout)[...] = self.view(src, src_layout)

    def cast(self, storage, layout, src_dtype, dst_dtype):
        x = self.load(storage, layout, src_dtype)
        return self.store(x, dst_dtype)

    # --- elementwise -------------------------------------------------------------------------
    def _quiet(self):
        # Overflow to inf, log(0) and integer division by zero give IEEE/numpy results
        # without warnings, as they would on a GPU.
        return self._errstate(all="ignore") if self._errstate else _Null()

    def unary(self, op, storage, layout, dtype, params=()):
        x = self.load(storage, layout, dtype)
        # In-place forms skip the page faults of one fresh array per step. A 0-d array
        # runs as one element (numpy scalars have no `out=`, and their loops may round
        # differently from the array loops every other size takes).
        fast = UNARY_INPLACE.get(op)
        with self._quiet():
            if fast is not None:
                y = fast(self.xp, x.reshape(-1) if x.ndim == 0 else x).reshape(x.shape)
            else:
                y = UNARY[op].array(self.xp, x, *params)
        return self.store(y, dtype)

    def binary(self, op, a, la, b, lb, dtype):
        x = self.load(a, la, dtype)
        y = self.load(b, lb, dtype) if lb is not None else b
        row = INT_DIV if (op == "div" and dtype.is_int) else BINARY[op]
        with self._quiet():
            z = row.array(self.xp, x, y)
        return self.store(z, dtype)

    def compare(self, op, a, la, b, lb, dtype):
        x = self.load(a, la, dtype)
        y = self.load(b, lb, dtype) if lb is not None else b
        with self._quiet():
            z = COMPARE[op].array(self.xp, x, y)
        return self.store(z, dt.u8)

    def where(self, cond, lc, a, la, b, lb, dtype):
        c = self.view(cond, lc)
        x = self.view(a, la)
        y = self.view(b, lb)
        return self.store(self.xp.where(c != 0, x, y), dtype)

    # --- reductions -----------------------------------------------------------------------
    def reduce(self, op, storage, layout, dims, dtype):
        xp = self.xp
        x = self.load(storage, layout, dtype)
        axis = tuple(dims)
        if op in ("argmax", "argmin"):
            fn = xp.argmax if op == "argmax" else xp.argmin
            return self.store(fn(x, axis=axis[0], keepdims=True), dt.i64)
        compute = x.dtype
        with self._quiet():
            if op == "sum":
                y = xp.sum(x, axis=axis, keepdims=True, dtype=compute)
            elif op == "prod":
                y = xp.prod(x, axis=axis, keepdims=True, dtype=compute)
            elif op == "mean":
                n = 1
                for d in axis:
                    n *= layout.shape[d]
                y = xp.sum(x, axis=axis, keepdims=True, dtype=compute) / max(n, 1)
                if n == 0:
                    y = y * float("nan")
            elif op == "max":
                y = xp.max(x, axis=axis, keepdims=True)
            elif op == "min":
                y = xp.min(x, axis=axis, keepdims=True)
            else:
                raise ValueError(f"reduce: unknown op {op!r}")
        return self.store(y, dtype)

    def cumsum(self, storage, layout, dim, dtype):
        x = self.load(storage, layout, dtype)
        return self.store(self.xp.cumsum(x, axis=dim, dtype=x.dtype), dtype)

    # --- matmul ---------------------------------------------------------------------------
    def matmul(self, a, la, b, lb, dtype):
        xp = self.xp
        x = self.load(a, la, dtype)
        w = self.load(b, lb, dtype)
        batch = la.shape[:-2]
        shared = batch and all(
            s == 0 or n == 1 for s, n in zip(lb.strides[:-2], batch, strict=True)
        )
        rows = la.numel // max(la.shape[-1], 1) if shared else la.shape[-2]
        macs = rows * la.shape[-1] * lb.shape[-1]

        def compute():
            if shared:
                # A weight shared across the batch: one large GEMM instead of one per row.
                w2 = w[(0,) * len(batch)]
                x2 = x.reshape(-1, la.shape[-1])
                y = _blasable(xp, x2) @ _blasable(xp, w2)
                return y.reshape(batch + (la.shape[-2], lb.shape[-1]))
            if batch and self._is_numpy and macs < SMALL_GEMM_MACS:
                return stacked_matmul(xp, _blasable(xp, x), _blasable(xp, w))
            return xp.matmul(_blasable(xp, x), _blasable(xp, w))

        return self.store(self._product(compute, macs, x, w, shared), dtype)

    def _product(self, compute, macs, x, w, kind=None):
        """compute() on as many BLAS threads as blas_threads.product says for its size
        (numpy only): the operands' shapes, strides and dtype name the product."""
        if not self._is_numpy:
            return compute()
        from .blas_threads import product

        key = (x.shape, x.strides, w.shape, w.strides, x.dtype.str, kind)
        return product(compute, macs, key)

    # --- indexing ---------------------------------------------------------------------------
    def _check_ids(self, ids, size, op, dim):
        if ids.size == 0:
            return
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= size:
            bad = lo if lo < 0 else hi
            raise DimOutOfRange(
                f"{op}: index {bad} out of range for dim {dim} of size {size}",
                op=op,
                index=bad,
                size=size,
            )

    def index_select(self, storage, layout, ids, lids, dim, dtype):
        x = self.view(storage, layout)
        idx = self.view(ids, lids)
        self._check_ids(idx, layout.shape[dim], "index_select", dim)
        # indexing, not xp.take: take copies a strided view whole before it gathers (a
        # token lookup in a transposed 51,864 x 384 embedding: 67 ms against 4 us)
        return self.store(x[(slice(None),) * dim + (idx,)], dtype)

    def gather(self, storage, layout, ids, lids, dim, dtype):
        x = self.view(storage, layout)
        idx = self.view(ids, lids)
        self._check_ids(idx, layout.shape[dim], "gather", dim)
        # torch.gather reads only the leading part of the other dims.
        crop = tuple(slice(0, n) if d != dim else slice(None) for d, n in enumerate(lids.shape))
        return self.store(
            self.xp.take_along_axis(x[crop], idx.astype(self.xp.int64), axis=dim), dtype
        )

    def scatter_add(self, dst, ldst, ids, lids, src, lsrc, dim, dtype):
        xp = self.xp
        out = self.load(dst, ldst, dtype).copy()
        idx = self.view(ids, lids).astype(xp.int64)
        self._check_ids(idx, ldst.shape[dim], "scatter_add", dim)
        values = self.load(src, lsrc, dtype)[tuple(slice(0, n) for n in lids.shape)]
        coords = list(xp.indices(lids.shape, sparse=True))
        coords[dim] = idx
        xp.add.at(out, tuple(coords), values)
        return self.store(out, dtype)

    # --- fused ops (Backend's declarations) ---------------------------------------------
    def softmax(self, storage, layout, dim, dtype, log=False):
        xp = self.xp
        x = self.load(storage, layout, dtype)
        if x.size == 0:
            return self.store(x.copy(), dtype)
        # Any dim runs as the last one (a moved view), so every path has one algorithm.
        y = softmax_last_dim(xp, xp.moveaxis(x, dim, -1) if x.ndim else x.reshape(1), log)
        return self.store(xp.moveaxis(y, -1, dim) if x.ndim else y.reshape(()), dtype)

    def scaled_dot_product_attention(
        self, q, lq, k, lk, v, lv, mask, lmask, scale, dtype, causal=False, grid_bias=None
    ):
        """numpy, f32, not causal (a ViT's attention, SAM's, a language model's prompt
        under its mask): the composite's tiles with every step on all cores and BLAS on one
        thread (array_attention); the rest takes the composite."""
        if not (self._is_numpy and dtype is dt.f32 and not causal):
            return super().scaled_dot_product_attention(
                q, lq, k, lk, v, lv, mask, lmask, scale, dtype, causal, grid_bias
            )
        added = self.view(mask, lmask) if mask is not None else None
        bias = None
        if grid_bias is not None:
            rows, lrows, cols, lcols = grid_bias
            bias = (self.view(rows, lrows), self.view(cols, lcols))
        q, k, v = (self.view(s, lay) for s, lay in ((q, lq), (k, lk), (v, lv)))
        return self._attention(q, k, v, added, bias, scale, dtype).reshape(-1)

    def _attention(self, q, k, v, added, bias, scale, dtype):
        """numpy attention of the f32 arrays q, k, v under the mask `added` and the grid
        `bias` (each or None): a decode step's few queries on this thread, the rest in
        array_attention's tiles. Returns a contiguous array."""
        xp = self.xp
        q, k, v = _blasable(xp, q), _blasable(xp, k), _blasable(xp, v)
        if bias is None and array_small_attention.is_small(q, k):  # a decode step's
            return array_small_attention.attention(xp, q, k, v, scale, added)
        return array_attention.attention(self, q, k, v, bias, scale, dtype, added)

    def rope(self, storage, layout, cos, lcos, sin, lsin, dtype, interleaved=False):
        """Backend.rope in four in-place passes over the output (the composite's nine ops
        cost a decode step about 5%): a*cos - b*sin and b*cos + a*sin, in f32."""
        xp = self.xp
        shape = layout.shape
        x = self.load(storage, layout, dtype)
        c = self.load(cos, composites.table_layout(lcos, shape), dtype)
        s = self.load(sin, composites.table_layout(lsin, shape), dtype)
        out = xp.empty(shape, x.dtype)
        if not _compiled_rope(xp, x, c, s, out, interleaved):
            _rotate_into(xp, x, c, s, out, interleaved)
        return self.store(out, dtype)

    def attention_step(
        self,
        qkv,
        lqkv,
        keys,
        lkeys,
        values,
        lvalues,
        length,
        n_heads,
        scale,
        dtype,
        rope=None,
        interleaved=False,
    ):
        """numpy, f32: the default's rope, cache writes and attention on the arrays
        themselves (the same arithmetic: _rotate_into, then _attention), without the
        loads, stores and views of three backend calls: 0.13 -> 0.08 ms a SmolLM2 layer."""
        if not (self._is_numpy and dtype is dt.f32):
            return super().attention_step(
                qkv,
                lqkv,
                keys,
                lkeys,
                values,
                lvalues,
                length,
                n_heads,
                scale,
                dtype,
                rope,
                interleaved,
            )
        xp = self.xp
        b, _, heads, d = lqkv.shape
        kv = (heads - n_heads) // 2
        heads_of = self.view(qkv, lqkv)[:, 0]  # [B, heads, D]
        if b == 1:
            out = self._compiled_step(
                heads_of[0], keys, lkeys, values, lvalues, length, n_heads, scale, rope, interleaved
            )
            if out is not None:
                return out
        qk = heads_of[:, : n_heads + kv]
        if rope is not None:
            cos, lcos, sin, lsin = rope
            qk = xp.empty((b, n_heads + kv, d), xp.float32)
            # the tables [1, D/2] or [B, 1, D/2] broadcast over [B, heads, D/2] as they are
            c, s = self.view(cos, lcos), self.view(sin, lsin)
            _rotate_into(xp, heads_of[:, : n_heads + kv], c, s, qk, interleaved)
        cached_keys, cached_values = self.view(keys, lkeys), self.view(values, lvalues)
        cached_keys[:, :, length] = qk[:, n_heads:]
        cached_values[:, :, length] = heads_of[:, n_heads + kv :]
        end = length + 1
        q = qk[:, :n_heads].reshape(b, kv, n_heads // kv, d)
        return self._attention(
            q, cached_keys[:, :, :end], cached_values[:, :, :end], None, None, scale, dtype
        ).reshape(-1)

    def _compiled_step(
        self, qkv, keys, lkeys, values, lvalues, length, n_heads, scale, rope, inter
    ):
        """attention_step for a batch of one in one compiled call (llvm_attention's
        attend_step: the rotation, the cache writes and the attention below, the same
        bits), where the kernels are built and the step stays on array_small_attention's
        one unsplit call; else None. SmolLM2-135M's shapes over 30 layers' caches: 99 -> 52
        us a layer with the caches in L3, 121 -> 89 us evicted (numpy's rotation, views
        and checks had been most of it); decode 1.06-1.11x, Gemma 3 270M 1.07-1.11x."""
        heads, d = qkv.shape
        kv = (heads - n_heads) // 2
        if not array_small_attention.takes_step(n_heads, kv, length + 1, d):
            return None
        kernels = llvm_attention.kernels()
        if kernels is None:
            return None
        tables = None
        if rope is not None:
            cos, lcos, sin, lsin = rope
            tables = (self.view(cos, lcos).reshape(-1), self.view(sin, lsin).reshape(-1))
        cached_keys, cached_values = self.view(keys, lkeys)[0], self.view(values, lvalues)[0]
        done = kernels.attend_step(
            qkv, cached_keys, cached_values, length, n_heads, scale, tables, inter
        )
        if done is None:
            return None
        out, rot = done
        if out is None:  # a row undone (no finite maximum): the path below's redo, in numpy
            q = rot[:n_heads].reshape(1, kv, n_heads // kv, d)
            end = length + 1
            k, v = cached_keys[None, :, :end], cached_values[None, :, :end]
            out = self._attention(q, k, v, None, None, scale, dt.f32).reshape(-1)
        return out

    def layer_norm(
        self, storage, layout, w, lw, b, lb, eps, dtype, rms=False, residual=None, lres=None
    ):
        """Normalize over the last dim (of x + residual when given); w and b (or None)
        are 1-D."""
        if residual is None and dtype is dt.f32 and self._is_numpy:
            out = self._small_norm(storage, layout, w, lw, b, lb, eps, rms)
            if out is not None:
                return out
        x = self.load(storage, layout, dtype)
        weight = self.load(w, lw, dtype) if w is not None else None
        bias = self.load(b, lb, dtype) if b is not None else None
        res = self.load(residual, lres, dtype) if residual is not None else None
        if x.ndim == 0 or x.size == 0:
            if res is not None:
                x = x + res
            return (
                self.store(x.copy(), dtype)
                if x.size == 0
                else self.store(
                    norm_last_dim(self.xp, x.reshape(1), weight, bias, eps, rms).reshape(()), dtype
                )
            )
        return self.store(norm_last_dim(self.xp, x, weight, bias, eps, rms, res), dtype)

    def _small_norm(self, storage, layout, w, lw, b, lb, eps, rms):
        """A decode step's norm (f32, contiguous, fewer than MIN_PARALLEL_ELEMENTS values,
        so one block on this thread) straight to llvm_norm's kernel: norm_last_dim's
        compiled path, the same call on the same rows, without its views, checks and
        blocks (19.5 -> 9-13 us a call; SmolLM2-135M makes 61 a step, Gemma 3 108).
        None where it does not apply."""
        n = layout.numel
        if not 0 < n < MIN_PARALLEL_ELEMENTS or not layout.is_contiguous():
            return None
        cols = layout.shape[-1] if layout.shape else 1
        x = self.view(storage, layout).reshape(-1, cols)
        weight = None if w is None else self.view(w, lw)
        bias = None if b is None else self.view(b, lb)
        kernels = llvm_norm.for_rows(self.xp, x, weight, bias)  # None: a strided weight
        if kernels is None:
            return None
        out = self.xp.empty(n, self.xp.float32)
        kernels.norm(x, out.reshape(-1, cols), weight, bias, eps, rms)
        return out

    def linear(self, a, la, b, lb, bias, lbias, dtype, activation=None, residual=None, lres=None):
        """activation(a @ b + bias) + residual for a 2-D `a` (rows, in) and `b` (in, out):
        one GEMM, then the rest in place on its output (array_rows.linear_epilogue)."""
        xp = self.xp
        x = self.load(a, la, dtype)
        w = self.load(b, lb, dtype)
        y = self._product(
            lambda: _blasable(xp, x) @ _blasable(xp, w), la.numel * lb.shape[-1], x, w
        )
        if not y.flags.c_contiguous:  # cupy may hand back another order
            y = xp.ascontiguousarray(y)
        linear_epilogue(
            xp,
            y,
            self.load(bias, lbias, dtype) if bias is not None else None,
            activation,
            self.load(residual, lres, dtype) if residual is not None else None,
        )
        return self.store(y, dtype)

    def gated_activation(self, storage, layout, activation, dtype):
        """f32: the activation of the gate half into a fresh array, then its product with
        the up half in place there: the default's unary and binary in one call, the same
        bits. Other dtypes round between the two steps, so they take the default."""
        if dtype is not dt.f32:
            return super().gated_activation(storage, layout, activation, dtype)
        xp = self.xp
        x = self.view(storage, layout)
        y = array_fast.gated(xp, activation, x)  # one compiled pass, the same bits
        if y is not None:
            return self.store(y, dtype)
        n = layout.shape[-1] // 2
        gate, up = x[..., :n], x[..., n:]
        fast = UNARY_INPLACE.get(activation)
        with self._quiet():
            if fast is not None:  # a fresh array: the product can go into it
                y = fast(xp, gate)
                xp.multiply(y, up, out=y)
            else:
                y = xp.asarray(UNARY[activation].array(xp, gate), dtype=xp.float32) * up
        return self.store(y, dtype)

    def conv2d(
        self, x, lx, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation=None
    ):
        """numpy: im2col in bands of output rows, bias and activation on each band's
        product (array_conv); integer dtypes and cupy take the contract's default."""
        if not (self._is_numpy and dtype.is_float):
            return super().conv2d(
                x, lx, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation
            )
        y = banded_conv2d(
            self.xp, self.load(x, lx, dtype), *self._conv_weights(w, lw, bias, lbias, dtype),
            stride, padding, dilation, groups, activation,
        )  # fmt: skip
        return self.store(y, dtype)

    def conv2d_cat(
        self, parts, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation=None
    ):
        """numpy f32: a 1 x 1 convolution of the concatenation reads each part where it
        lies (array_conv.conv2d_cat); otherwise the contract's default."""
        if self._is_numpy and dtype is dt.f32:
            y = banded_conv2d_cat(
                self.xp, [self.load(s, layout, dtype) for s, layout in parts],
                *self._conv_weights(w, lw, bias, lbias, dtype), stride, padding, dilation,
                groups, activation,
            )  # fmt: skip
            if y is not None:
                return self.store(y, dtype)
        return super().conv2d_cat(
            parts, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation
        )

    def _conv_weights(self, w, lw, bias, lbias, dtype):
        """A convolution's weight and bias (or None) as arrays in their compute dtype."""
        return self.load(w, lw, dtype), None if bias is None else self.load(bias, lbias, dtype)

    # --- quantized weights --------------------------------------------------------------------
    def place_quantized(self, weight):
        """numpy reads the host weight where it lies (a view of the file's memory map):
        qmatmul dequantizes it a chunk of rows at a time, so the dense form never exists.
        Other array modules (cupy) take the dense device weight of the default."""
        if not self._is_numpy:
            return super().place_quantized(weight)
        from .array_qmatmul import prepare

        prepare(weight)  # its type's kernels loaded before any weight is read
        return weight

    def computes_quantized(self, ggml_type):
        """numpy with the jit extra: F16 and every ggml block type where their compiled
        kernels (llvm_f16's, llvm_quant's) build here (llvmlite imported now: 0.04 s)."""
        from .array_qmatmul import compiled_kernels

        return self._is_numpy and compiled_kernels(ggml_type) is not None

    def qmatmul(self, x, lx, qweight, dtype):
        """x @ dequantize(qweight).T for a host weight (Backend.qmatmul), numpy only:
        array_qmatmul's compiled kernels where the jit extra is installed (fused dot
        products for a decode step's few rows, decoded chunks and GEMMs for more), else
        rows of the weight dequantized a chunk at a time into one reused f32 buffer,
        each chunk one GEMM into its columns of the output."""
        if not self._is_numpy:
            return super().qmatmul(x, lx, qweight, dtype)
        xp = self.xp
        n_out, n_in = qweight.shape
        if lx.shape[-1] != n_in:
            raise ShapeMismatch(
                f"qmatmul: x of shape {fmt_shape(lx.shape)} does not match weight "
                f"{fmt_shape(qweight.shape)} (needs last dim {n_in})",
                op="qmatmul",
                shapes=(lx.shape, tuple(qweight.shape)),
            )
        lead = lx.shape[:-1]
        x2 = xp.ascontiguousarray(self.load(x, lx, dtype), dtype=xp.float32).reshape(-1, n_in)
        out = xp.empty((x2.shape[0], n_out), xp.float32)
        qmatmul_rows(x2, qweight, out, chunk_bytes=_QMATMUL_CHUNK_BYTES)
        if dtype is dt.f32:  # already the flat contiguous f32 storage store() makes
            return out.reshape(-1), lead + (n_out,)
        return self.store(out, dtype), lead + (n_out,)

    def qlinear(
        self, x, lx, qweight, bias, lbias, dtype, residual=None, lres=None, activation=None
    ):
        """numpy, f32: qmatmul, then the bias, the activation and the residual in place on
        its fresh output (array_rows.linear_epilogue): the default's steps, in its order."""
        if not self._is_numpy or dtype is not dt.f32:
            return super().qlinear(x, lx, qweight, bias, lbias, dtype, residual, lres, activation)
        storage, shape = self.qmatmul(x, lx, qweight, dtype)
        n = shape[-1]
        linear_epilogue(
            self.xp,
            storage.reshape(-1, n),
            self.load(bias, lbias, dtype) if bias is not None else None,
            activation,
            self.load(residual, lres, dtype).reshape(-1, n) if residual is not None else None,
        )
        return storage, shape


# Zeros from this many bytes on are pages the kernel maps in as they are first written
# (_lazy_zeros); below it, numpy's full.
LAZY_ZEROS_BYTES = 1 << 16


def _lazy_zeros(xp, n, dtype):
    """n zeros in an anonymous mapping of their own: resident only where written, and
    handed back whole when the array goes. numpy's full writes every zero, so a KV cache
    was resident in full from its creation, and from malloc's heap its memory stayed
    there after it went: a 193-position SmolLM2-135M cache is 8.9 MB, of which a
    128-token prompt writes two thirds."""
    import mmap

    # private: a shared anonymous mapping would be one memory with a forked child
    private = getattr(mmap, "MAP_PRIVATE", None)
    nbytes = n * xp.dtype(dtype).itemsize
    buf = mmap.mmap(-1, nbytes) if private is None else mmap.mmap(-1, nbytes, flags=private)
    return xp.frombuffer(buf, dtype=dtype)


# f32 bytes of weight rows per GEMM where numpy dequantizes (array_qmatmul.CHUNK_BYTES)
_QMATMUL_CHUNK_BYTES = 1 << 20


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _compiled_rope(xp, x, c, s, out, interleaved=False):
    """out = x rotated through llvm_math's rope (either pairing), one pass with
    _rotate_into's arithmetic (the same bits): a prompt's four numpy passes over its
    q and k heads, broadcast over the heads, took 0.4-0.6 ms a layer of a 128-token
    SmolLM2 or Gemma 3 prompt. False where the kernel does not take the arrays (not
    numpy float32, fewer than 2 or more than 4 dims, a last dim not contiguous)."""
    if x.ndim > 4 or x.ndim < 2 or x.dtype != xp.float32:
        return False
    kernels = llvm_math.for_array(xp, x)
    if kernels is None:
        return False
    lead = (1,) * (4 - x.ndim)
    x4, out4 = x.reshape(lead + x.shape), out.reshape(lead + out.shape)  # views: unit dims
    c4, s4 = c.reshape(lead + c.shape), s.reshape(lead + s.shape)
    try:
        kernels.rope(x4, c4, s4, out4, interleaved)
    except ValueError:
        return False
    return True


def _rotate_into(xp, x, c, s, out, interleaved):
    """out = x rotated by the tables c, s (broadcast to x's shape with D halved), in four
    in-place passes: a*cos - b*sin and b*cos + a*sin over the pair halves a, b of every
    D (pairs (2i, 2i+1) when interleaved, else (i, i + D/2))."""
    if interleaved:
        a, b, first, second = x[..., 0::2], x[..., 1::2], out[..., 0::2], out[..., 1::2]
    else:
        half = x.shape[-1] // 2
        a, b, first, second = x[..., :half], x[..., half:], out[..., :half], out[..., half:]
    xp.multiply(a, c, out=first)
    first -= b * s
    xp.multiply(b, c, out=second)
    second += a * s


def _blasable(xp, x):
    """Make the last two dims BLAS-friendly; numpy's matmul falls back to a slow loop
    for operands whose inner matrices have no unit stride."""
    if x.ndim < 2:
        return x
    item = x.itemsize
    s0, s1 = x.strides[-2], x.strides[-1]
    n0, n1 = x.shape[-2], x.shape[-1]
    if (s1 == item and s0 >= max(n1, 1) * item) or (s0 == item and s1 >= max(n0, 1) * item):
        return x
    return xp.ascontiguousarray(x)


__all__ = ["ArrayBackend"]
