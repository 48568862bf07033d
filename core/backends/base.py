"""The primitive set every backend implements.

A storage is whatever the backend keeps (a flat numpy/cupy array, a GPU buffer); a
layout says how a tensor reads it. Every primitive receives layouts, so strided inputs
need no prior copy, and returns a new contiguous storage unless it says otherwise.
Binary, compare and where receive layouts already broadcast to the output shape
(stride 0 on broadcast dims); matmul receives batch dims already broadcast.

Every method a caller (Tensor, functional, nn, models) may call is declared here, and
`Tensor` always calls it: the fused ops (softmax, log_softmax, layer/RMS norm with a
residual, linear with bias/activation/residual, rope, scaled-dot-product attention,
quantized matmul, async readback) have default bodies that compose the primitives
(composites.py), so a backend overrides one only where it has something faster, and a
misspelled override is a method no one calls rather than a silent slow path. Device
facts (`info`, `is_software_adapter`, `kernel_set`) are declared properties too.
"""

from collections.abc import Callable, Sequence
from typing import Any

from ..dtype import DType
from ..errors import UnsupportedOp
from ..layout import Layout
from . import composites

# What a backend keeps for a tensor's elements (a flat numpy/cupy array, a GPU buffer):
# opaque to every caller, so typed as Any.
Storage = Any
Shape = tuple[int, ...]


class Backend:
    name: str = "abstract"

    def lacks(
        self, primitive: str, op: str | None = None, dtype: DType | None = None
    ) -> UnsupportedOp:
        """The error for a primitive this backend does not provide: it names the
        primitive, the op and dtype asked for, and the backend."""
        what = primitive if op is None else f"{primitive} {op}"
        of = f" for {dtype.name}" if dtype is not None else ""
        return UnsupportedOp(
            f"{what}: not provided by the {self.name} backend{of}; run it on another "
            f"device (e.g. .to('cpu'))",
            op=op or primitive,
            backend=self.name,
        )

    # --- memory ----------------------------------------------------------------------
    def from_host(self, data: Any, dtype: DType, shape: Shape) -> Storage:
        """Upload host data: a numpy array of dtype's storage type, or little-endian bytes."""
        raise self.lacks("from_host")

    def to_numpy(self, storage: Storage, layout: Layout, dtype: DType) -> Any:
        """A numpy array of the tensor (bf16 comes back as f32)."""
        raise self.lacks("to_numpy")

    def to_bytes(self, storage: Storage, layout: Layout, dtype: DType) -> bytes:
        """The tensor's elements, contiguous, as little-endian bytes."""
        raise self.lacks("to_bytes")

    async def to_bytes_async(self, storage: Storage, layout: Layout, dtype: DType) -> bytes:
        """to_bytes without blocking the event loop (a browser page may not block); the
        default reads synchronously."""
        return self.to_bytes(storage, layout, dtype)

    def host_bytes(self, storage: Storage, layout: Layout, dtype: DType) -> bytes | memoryview:
        """The tensor's elements, contiguous and little-endian, as a bytes-like object:
        a view of the storage without a copy where it already is host memory in that
        form (the numpy backend), else to_bytes."""
        return self.to_bytes(storage, layout, dtype)

    def full(self, shape: Shape, value: float, dtype: DType) -> Storage:
        raise self.lacks("full")

    def empty(self, shape: Shape, dtype: DType) -> Storage:
        """Storage whose every element the caller will overwrite (cat): no fill pass where
        the backend can skip it."""
        return self.full(shape, 0, dtype)

    def copy_strided(self, storage: Storage, layout: Layout, dtype: DType) -> Storage:
        """A contiguous copy of the strided view."""
        raise self.lacks("copy_strided")

    def copy_into(
        self, dst: Storage, dst_layout: Layout, src: Storage, src_layout: Layout, dtype: DType
    ) -> None:
        """Write src (read through src_layout) into dst's view dst_layout, in place."""
        raise self.lacks("copy_into")

    def cast(self, storage: Storage, layout: Layout, src_dtype: DType, dst_dtype: DType) -> Storage:
        raise self.lacks("cast")

    # --- elementwise -----------------------------------------------------------------
    def unary(
        self, op: str, storage: Storage, layout: Layout, dtype: DType, params: Sequence[float] = ()
    ) -> Storage:
        raise self.lacks("unary", op, dtype)

    def binary(
        self, op: str, a: Storage, la: Layout, b: Storage | float, lb: Layout | None, dtype: DType
    ) -> Storage:
        """`b` may be a Python scalar (then lb is None): it takes the tensor's dtype."""
        raise self.lacks("binary", op, dtype)

    def compare(
        self, op: str, a: Storage, la: Layout, b: Storage | float, lb: Layout | None, dtype: DType
    ) -> Storage:
        """Result is u8 (1 where true)."""
        raise self.lacks("compare", op, dtype)

    def where(
        self,
        cond: Storage,
        lc: Layout,
        a: Storage,
        la: Layout,
        b: Storage,
        lb: Layout,
        dtype: DType,
    ) -> Storage:
        raise self.lacks("where")

    # --- reductions and scans -----------------------------------------------------------
    def reduce(
        self, op: str, storage: Storage, layout: Layout, dims: Sequence[int], dtype: DType
    ) -> Storage:
        """Reduce over `dims` (sorted); the result keeps them as size-1 dims."""
        raise self.lacks("reduce", op, dtype)

    def cumsum(self, storage: Storage, layout: Layout, dim: int, dtype: DType) -> Storage:
        raise self.lacks("cumsum")

    # --- linear algebra and indexing -------------------------------------------------------
    def matmul(self, a: Storage, la: Layout, b: Storage, lb: Layout, dtype: DType) -> Storage:
        """la (..., M, K) and lb (..., K, N) with equal batch shapes (broadcast strides)."""
        raise self.lacks("matmul")

    def index_select(
        self, storage: Storage, layout: Layout, ids: Storage, lids: Layout, dim: int, dtype: DType
    ) -> Storage:
        raise self.lacks("index_select")

    def gather(
        self, storage: Storage, layout: Layout, ids: Storage, lids: Layout, dim: int, dtype: DType
    ) -> Storage:
        raise self.lacks("gather")

    def scatter_add(
        self,
        dst: Storage,
        ldst: Layout,
        ids: Storage,
        lids: Layout,
        src: Storage,
        lsrc: Layout,
        dim: int,
        dtype: DType,
    ) -> Storage:
        """A new tensor: dst with src added at ids along dim."""
        raise self.lacks("scatter_add")

    # --- fused ops: defaults composed from the primitives (composites.py) -----------------
    def softmax(
        self, storage: Storage, layout: Layout, dim: int, dtype: DType, log: bool = False
    ) -> Storage:
        """Softmax along `dim` (log-softmax with `log`), for a non-empty float tensor."""
        return composites.softmax(self, storage, layout, dim, dtype, log)

    def log_softmax(self, storage: Storage, layout: Layout, dim: int, dtype: DType) -> Storage:
        return self.softmax(storage, layout, dim, dtype, log=True)

    def layer_norm(
        self,
        storage: Storage,
        layout: Layout,
        w: Storage | None,
        lw: Layout | None,
        b: Storage | None,
        lb: Layout | None,
        eps: float,
        dtype: DType,
        rms: bool = False,
        residual: Storage | None = None,
        lres: Layout | None = None,
    ) -> Storage:
        """Layer norm over the last dim of x (+ residual, same shape, when given); w and b
        are 1-D or None. With `rms`, RMS norm (b unused)."""
        return composites.layer_norm(
            self, storage, layout, w, lw, b, lb, eps, dtype, rms, residual, lres
        )

    def rms_norm(
        self,
        storage: Storage,
        layout: Layout,
        w: Storage | None,
        lw: Layout | None,
        eps: float,
        dtype: DType,
        residual: Storage | None = None,
        lres: Layout | None = None,
    ) -> Storage:
        return self.layer_norm(
            storage, layout, w, lw, None, None, eps, dtype, rms=True, residual=residual, lres=lres
        )

    def linear(
        self,
        a: Storage,
        la: Layout,
        b: Storage,
        lb: Layout,
        bias: Storage | None,
        lbias: Layout | None,
        dtype: DType,
        activation: str | None = None,
        residual: Storage | None = None,
        lres: Layout | None = None,
    ) -> Storage:
        """activation(a @ b + bias) + residual for a 2-D `a` (rows, in) and `b` (in, out);
        bias (out,) and residual (rows, out) may be None; activation is a parameterless
        unary op name (functional.LINEAR_ACTIVATIONS) or None."""
        return composites.linear(self, a, la, b, lb, bias, lbias, dtype, activation, residual, lres)

    def gated_activation(
        self, storage: Storage, layout: Layout, activation: str, dtype: DType
    ) -> Storage:
        """activation(x[..., :n]) * x[..., n:] for x [..., 2n] (a gated MLP's gate and up
        projections side by side, as one GEMM makes them): a new [..., n] storage.
        `activation` is a parameterless unary op name (functional.LINEAR_ACTIVATIONS).
        The default is that unary op, then the product."""
        return composites.gated_activation(self, storage, layout, activation, dtype)

    def conv2d(
        self,
        x: Storage,
        lx: Layout,
        w: Storage,
        lw: Layout,
        bias: Storage | None,
        lbias: Layout | None,
        dtype: DType,
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
        groups: int,
        activation: str | None = None,
    ) -> Storage:
        """activation of the (N, O, OH, OW) convolution of x (N, C, H, W) with w
        (O, C/groups, KH, KW), zero padding on both sides of H and W, plus bias (O,) if
        given; activation is a parameterless unary op name (functional.LINEAR_ACTIVATIONS)
        or None. The arguments are validated by functional.conv2d (output at least 1x1)."""
        return composites.conv2d(
            self, x, lx, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation
        )

    def conv2d_cat(
        self,
        parts: list[tuple[Storage, Layout]],
        w: Storage,
        lw: Layout,
        bias: Storage | None,
        lbias: Layout | None,
        dtype: DType,
        stride: tuple[int, int],
        padding: tuple[int, int],
        dilation: tuple[int, int],
        groups: int,
        activation: str | None = None,
    ) -> Storage:
        """conv2d of the channel concatenation of `parts` ((storage, layout) of (N, C_j,
        H, W) each): the default makes the concatenation, then runs conv2d; a backend
        may read the parts where they lie (numpy: llvm_conv's 1 x 1 kernel). Validated
        by functional.conv2d_cat."""
        n, _, h, width = parts[0][1].shape
        shape = (n, sum(layout.shape[1] for _, layout in parts), h, width)
        joined, at = self.empty(shape, dtype), 0
        out_layout = Layout(shape)
        for storage, layout in parts:
            c = layout.shape[1]
            if c:
                self.copy_into(joined, out_layout.narrow(1, at, c), storage, layout, dtype)
            at += c
        return self.conv2d(
            joined, out_layout, w, lw, bias, lbias, dtype, stride, padding, dilation, groups,
            activation,
        )  # fmt: skip

    def rope(
        self,
        storage: Storage,
        layout: Layout,
        cos: Storage,
        lcos: Layout,
        sin: Storage,
        lsin: Layout,
        dtype: DType,
        interleaved: bool = False,
    ) -> Storage:
        """Rotary embedding of x [..., T, D] (read through `layout`) with cos and sin tables
        [T, D/2], or [B, T, D/2] for an x [B, ..., T, D] whose rows have positions of their
        own (a left-padded batch); table layouts may be strided or broadcast. Pairs are
        (2i, 2i+1) when `interleaved` (GPT-J, GGUF llama) and (i, i + D/2) otherwise
        (half-split, HF Llama):
            out[first] = x[first] * cos[t, i] - x[second] * sin[t, i]
            out[second] = x[second] * cos[t, i] + x[first] * sin[t, i]
        The result is contiguous."""
        return composites.rope(self, storage, layout, cos, lcos, sin, lsin, dtype, interleaved)

    def scaled_dot_product_attention(
        self,
        q: Storage,
        lq: Layout,
        k: Storage,
        lk: Layout,
        v: Storage,
        lv: Layout,
        mask: Storage | None,
        lmask: Layout | None,
        scale: float,
        dtype: DType,
        causal: bool = False,
        grid_bias: tuple | None = None,
    ) -> Storage:
        """softmax(q @ k^T * scale + mask + grid bias) @ v: q [..., Tq, D], k [..., Tk, D],
        v [..., Tk, Dv] with equal batch dims (broadcast strides), mask (or None) laid out
        as [..., Tq, Tk] and added to the scores; `causal` hides the keys after each
        query's position. `grid_bias` (or None) is (rows, lrows, cols, lcols) for keys on
        a Kh x Kw grid (Tk = Kh * Kw, row-major): rows laid out as [..., Tq, Kh] and cols
        as [..., Tq, Kw], adding rows[i, j // Kw] + cols[i, j % Kw] to score (i, j) (the
        decomposed relative positions of ViT-Det / Segment Anything), so that bias is never
        whole either. The default computes the scores in tiles of queries."""
        return composites.scaled_dot_product_attention(
            self, q, lq, k, lk, v, lv, mask, lmask, scale, dtype, causal, grid_bias
        )

    def attention_step(
        self,
        qkv: Storage,
        lqkv: Layout,
        keys: Storage,
        lkeys: Layout,
        values: Storage,
        lvalues: Layout,
        length: int,
        n_heads: int,
        scale: float,
        dtype: DType,
        rope: tuple | None = None,
        interleaved: bool = False,
    ) -> Storage:
        """One decode step's self-attention over a KV cache: qkv laid out as [B, 1,
        n_heads + 2 * KV, D] (the q, k and v heads of one projection), the cache's keys
        and values as [B, KV, max_len, D]. With `rope` = (cos, lcos, sin, lsin), tables
        [1, D/2] or [B, 1, D/2], the q and k heads are rotated first (Backend.rope). The
        k and v heads are written at position `length` of the cache (in place), and the
        q heads attend, unmasked, over its first length + 1 positions: each KV head's
        n_heads / KV query heads as rows of one matrix. Returns the output [B, 1,
        n_heads * D], contiguous. The default makes exactly the calls a model's own steps
        make (rope, copy_into, scaled_dot_product_attention, on the same layouts): the
        same bits."""
        return composites.attention_step(
            self,
            qkv,
            lqkv,
            (keys, lkeys),
            (values, lvalues),
            length,
            n_heads,
            scale,
            dtype,
            rope,
            interleaved,
        )

    # --- quantized weights ------------------------------------------------------------------
    def keeps_quantized(self, ggml_type: int) -> bool:
        """Whether upload_quantized keeps weights of this ggml type quantized here (a kernel
        decodes its blocks inside the matmul)."""
        return False

    def computes_quantized(self, ggml_type: int) -> bool:
        """Whether qmatmul here computes with weights of this ggml type as they are stored,
        a decode step's few rows as fast as with their f32 form, so that a loader may keep
        a checkpoint's weights in that type instead of widening them (whisper_load keeps
        f16 halves this way). The default: the types keeps_quantized keeps."""
        return self.keeps_quantized(ggml_type)

    def upload_quantized(self, raw: Any, ggml_type: int, shape: Shape) -> Any:
        """The raw ggml blocks of a 2-D weight (out, in) as this backend's quantized weight,
        for qmatmul; only for types `keeps_quantized` accepts."""
        raise self.lacks("upload_quantized")

    def place_quantized(self, weight: Any) -> Any:
        """What qmatmul takes for the host weight `weight` (an object with `ggml_type`,
        `shape` (N, K), `raw` and `dequantize_rows(start, stop)`: ember.io.quant.QTensor).
        Where `keeps_quantized` accepts its type: the raw blocks on the device
        (upload_quantized). Elsewhere the default dequantizes it once, a chunk of rows at a
        time, into a dense f32 weight on the device (composites.DenseWeight), so a token
        does not pay for decoding the whole matrix again; a backend that reads host
        memory directly (numpy) returns the host weight itself."""
        if self.keeps_quantized(weight.ggml_type):
            return self.upload_quantized(weight.raw, weight.ggml_type, weight.shape)
        return composites.dense_weight(self, weight)

    def qmatmul(self, x: Storage, lx: Layout, qweight: Any, dtype: DType) -> tuple[Storage, Shape]:
        """x [..., K] @ dequantize(qweight).T -> (storage, shape [..., N]). `qweight` is
        what place_quantized returned: a dense weight (a matmul), or a host weight, which
        the default dequantizes a chunk of rows at a time and multiplies (composites.py)."""
        if isinstance(qweight, composites.DenseWeight):
            return composites.qmatmul_dense(self, x, lx, qweight, dtype)
        return composites.qmatmul_host_weight(self, x, lx, qweight, dtype)

    def qlinear(
        self,
        x: Storage,
        lx: Layout,
        qweight: Any,
        bias: Storage | None,
        lbias: Layout | None,
        dtype: DType,
        residual: Storage | None = None,
        lres: Layout | None = None,
        activation: str | None = None,
    ) -> tuple[Storage, Shape]:
        """activation(x [..., K] @ dequantize(qweight).T + bias) + residual -> (storage,
        shape [..., N]), `qweight` as qmatmul takes it; bias (N,), the unary op name
        `activation` and residual (laid out as [..., N]) may be None: linear's order. The
        default is qmatmul, then the bias, the activation and the residual."""
        return composites.qlinear(
            self, x, lx, qweight, bias, lbias, dtype, residual, lres, activation
        )

    # --- device facts -----------------------------------------------------------------------
    @property
    def info(self) -> dict[str, Any]:
        """What the device is, for people and for choosing kernels: a dict with at least
        "name"; WebGPU adds the adapter's (device, description, backend_type,
        adapter_type, vendor)."""
        return {"name": self.name}

    @property
    def is_software_adapter(self) -> bool:
        """True for a GPU API running on the CPU (lavapipe, SwiftShader): the same kernels
        run far slower there than the numpy backend."""
        return self.info.get("adapter_type") == "CPU"

    @property
    def attention_tile_elements(self) -> int:
        """About how many attention scores scaled_dot_product_attention's default computes
        at a time (composites.attention_tiles): a bound on its memory, sized for the
        device."""
        return composites.ATTENTION_TILE_ELEMENTS

    @property
    def kernel_set(self) -> str:
        """The kernel family this backend runs for the device: "cpu-adapter" (one
        invocation per short row, no shared-memory tiles) on a software adapter, "gpu"
        otherwise; array backends name their array module."""
        return "cpu-adapter" if self.is_software_adapter else "gpu"

    def memory_stats(self) -> dict[str, int]:
        """Device memory bookkeeping where the backend keeps it (WebGPU: bytes_in_use,
        bytes_pooled, buffers_created); empty elsewhere."""
        return {}

    def start_kernel_timer(self) -> Any:
        """Start timing every kernel this device runs (ember.profiler's hook): a timer
        whose `collect()` / `await collect_async()` give each kernel's GPU time, or None
        where there are no kernels to time or no timestamp queries (the default)."""
        return None

    def stop_kernel_timer(self, timer: Any) -> None:
        """Stop what start_kernel_timer started, submitting the work recorded so far."""

    def synchronize(self) -> None:
        """Wait for queued work (a no-op on synchronous backends)."""

    def release_free_memory(self) -> None:
        """Hand memory that only freed temporaries held back to the system: called by a
        model after work that freed many large ones (a prompt's layers), before what
        follows. A no-op by default."""

    def map_independent(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list:
        """[fn(item) for item in items], in order. The calls share nothing (each builds
        its own tensors: the micro-batches of an embedding job, say), so a backend may run
        them at the same time; this default runs them one after the other."""
        return [fn(item) for item in items]
