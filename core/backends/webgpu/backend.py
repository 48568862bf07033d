"""The WebGPU backend: the backend contract mapped onto the runtime and the op modules.

This module only maps: runtime.py holds the device state (pool, arena, pipeline cache,
bind groups, batching, readback, the lock that makes a device safe to share between
threads); elementwise.py, transfer.py, rows.py, scan.py, rope.py, matmul.py, reduce.py,
index.py and qmatmul.py hold the ops. The driver (native.py on wgpu-py, browser.py over
pyodide.ffi) creates buffers and pipelines, records, submits and reads back; nothing else
needs wgpu or numpy. Each op runs under the runtime's lock.

- Pipelines are cached per (kernel file, dtype, specialisation) (kernels.py).
- Buffers come from a pool by size class (pool.py); `memory_stats()` reports it.
- Limits: operands larger than the adapter's max storage binding (128 MiB on lavapipe
  and many browsers) are split into parts that each fit, planned by split.py:
  elementwise ops, fills, uploads and bf16/f16/u8/i64 readback by ranges of rows (a
  permuted input whose rows do not fit, such as a transposed view, is first copied
  contiguous by the copy kernel, which cuts source and destination into tiles); matmul
  by rows, K or columns (matmul.py); reductions over any dims by ranges of outputs, or
  by pieces of a reduced dim combined in a last pass, argmax/argmin keeping global
  indices (reduce.py); softmax and norms by rows (strided rows run on a contiguous
  copy); index_select and gather by boxes of the output and ranges of the source's rows
  (index.py). Still refused with UnsupportedOp naming the op and the sizes: a softmax
  or norm row that alone exceeds a binding, and cumsum, rope and scatter_add of such
  tensors. Grids of more than 65,535 workgroups fold into two dimensions.
- Loops: lavapipe ends every loop of an invocation once it has run 65,535 iterations in
  total (over all its loops, nested ones counted) and returns what was written, with no
  error; each launch bounds its invocations' loops under loopcap.BUDGET (60,000):
  reductions fold chunks of at most 65,536 elements with 256 lanes (2,048 per
  invocation on the one-invocation CPU path), longer ones in two passes (argmax/argmin
  through per-chunk extremes and a gather); scans run 4,096 elements an invocation with
  carries; matmul K in accumulated parts of at most 32,768; scatter_add scans its ids
  in pieces along dim, each adding into the last; elementwise, copy, index, rope and
  pack kernels loop only over 8 elements and their dims. softmax/log_softmax (3 passes)
  and layer_norm (3) / rms_norm (2) rows that would loop past the budget even with 256
  invocations sharing them (over ~5.1M elements, rms_norm ~7.7M) run as a chain of
  those kernels in f32 instead of the fused one (longrows.py).
- Row kernels (reductions, softmax, norms) give each short row one invocation on CPU
  adapters, where barriers are expensive, and a workgroup tree elsewhere.
- Fused: linear (bias, activation and residual applied by the matmul kernel, epilogue.py),
  conv2d (an implicit GEMM with bias and activation, conv.py), and the norms' residual=
  (read by the norm kernel when laid out as x).
"""

import functools

from ..base import Backend
from . import conv, elementwise, index, matmul, rows, scan, transfer
from . import qmatmul as quantized
from . import reduce as reductions
from . import rope as rotary
from .runtime import Runtime


def _locked(method):
    """Run a contract method under the runtime's lock: one op's dispatches never
    interleave with another thread's."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.runtime.lock:
            return method(self, *args, **kwargs)

    return run


class WebGPUBackend(Backend):
    def __init__(self, driver, name):
        self.driver = driver
        self.name = name
        self.runtime = Runtime(driver)
        # Device facts, read by callers and tests (the runtime's own objects, kept live).
        self.max_binding = self.runtime.max_binding
        self.has_f16 = self.runtime.has_f16
        self.types = self.runtime.types
        self.pipelines = self.runtime.pipelines
        self.counters = self.runtime.counters
        self.labels = self.runtime.labels

    # --- bookkeeping --------------------------------------------------------------------------
    def memory_stats(self):
        return self.runtime.memory_stats()

    @property
    def kernel_set(self):
        return self.runtime.kernel_set

    def start_kernel_timer(self):
        return self.runtime.start_timer()

    def stop_kernel_timer(self, timer):
        self.runtime.stop_timer(timer)

    def kernel_stats(self):
        return self.runtime.kernel_stats()

    def empty_cache(self):
        self.runtime.empty_cache()

    @property
    def adapter_info(self):
        return dict(self.driver.info)

    @property
    def info(self):
        return dict(self.driver.info, name=self.driver.name)

    def flush(self):
        self.runtime.flush()

    def synchronize(self):
        self.runtime.synchronize()

    # --- memory ---------------------------------------------------------------------------
    @_locked
    def from_host(self, data, dtype, shape, copy=True):
        return transfer.from_host(self, data, dtype, shape)

    def empty(self, shape, dtype):
        return transfer.empty(self, shape, dtype)

    @_locked
    def full(self, shape, value, dtype):
        return transfer.full(self, shape, value, dtype)

    def to_bytes(self, storage, layout, dtype):
        return transfer.to_bytes(self, storage, layout, dtype)

    async def to_bytes_async(self, storage, layout, dtype):
        return await transfer.to_bytes_async(self, storage, layout, dtype)

    def to_numpy(self, storage, layout, dtype):
        return transfer.to_numpy(self, storage, layout, dtype)

    @_locked
    def copy_strided(self, storage, layout, dtype):
        return elementwise.cast(self, storage, layout, dtype, dtype)

    @_locked
    def copy_into(self, dst, dst_layout, src, src_layout, dtype):
        elementwise.copy_into(self, dst, dst_layout, src, src_layout, dtype)

    @_locked
    def cast(self, storage, layout, src_dtype, dst_dtype):
        return elementwise.cast(self, storage, layout, src_dtype, dst_dtype)

    # --- elementwise --------------------------------------------------------------------------
    @_locked
    def unary(self, op, storage, layout, dtype, params=()):
        return elementwise.unary(self, op, storage, layout, dtype, params)

    @_locked
    def binary(self, op, a, la, b, lb, dtype):
        return elementwise.binary(self, op, a, la, b, lb, dtype)

    @_locked
    def compare(self, op, a, la, b, lb, dtype):
        return elementwise.compare(self, op, a, la, b, lb, dtype)

    @_locked
    def where(self, cond, lc, a, la, b, lb, dtype):
        return elementwise.where(self, cond, lc, a, la, b, lb, dtype)

    # --- reductions and scans -----------------------------------------------------------------
    @_locked
    def reduce(self, op, storage, layout, dims, dtype):
        return reductions.reduce(self, op, storage, layout, dims, dtype)

    @_locked
    def cumsum(self, storage, layout, dim, dtype):
        return scan.cumsum(self, storage, layout, dim, dtype)

    # --- fused paths --------------------------------------------------------------------------
    @_locked
    def softmax(self, storage, layout, dim, dtype, log=False):
        return rows.softmax(self, storage, layout, dim, dtype, log)

    @_locked
    def layer_norm(
        self, storage, layout, w, lw, b, lb, eps, dtype, rms=False, residual=None, lres=None
    ):
        """Norm over the last dim, of x + residual where given (rows.py)."""
        return rows.layer_norm(self, storage, layout, w, lw, b, lb, eps, dtype, rms, residual, lres)

    @_locked
    def rope(self, storage, layout, cos, lcos, sin, lsin, dtype, interleaved=False):
        """See Backend.rope: x [..., T, D], cos/sin [T, D/2] in the kernel; per-row
        [B, T, D/2] tables take the contract's composite."""
        if len(lcos.shape) != 2:
            return super().rope(storage, layout, cos, lcos, sin, lsin, dtype, interleaved)
        return rotary.rope(self, storage, layout, cos, lcos, sin, lsin, dtype, interleaved)

    # --- matmul ---------------------------------------------------------------------------------
    @_locked
    def matmul(self, a, la, b, lb, dtype):
        return matmul.matmul(self, a, la, b, lb, dtype)

    @_locked
    def linear(self, a, la, b, lb, bias, lbias, dtype, activation=None, residual=None, lres=None):
        """activation(a @ b + bias) + residual, applied as the matmul kernel stores (floats;
        integers take the contract's composite)."""
        if not dtype.is_float:
            return super().linear(a, la, b, lb, bias, lbias, dtype, activation, residual, lres)
        return matmul.linear(self, a, la, b, lb, bias, lbias, dtype, activation, residual, lres)

    @_locked
    def conv2d(
        self, x, lx, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation=None
    ):
        """Floats: the implicit-GEMM kernel with bias and activation fused (conv.py) where
        it is the faster (conv.runs_here); integers and the rest take the contract's
        composite."""
        if not (
            dtype.is_float
            and conv.runs_here(self, lx, lw, stride, padding, dilation, groups, dtype)
        ):
            return super().conv2d(
                x, lx, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation
            )
        return conv.conv2d(
            self, x, lx, w, lw, bias, lbias, dtype, stride, padding, dilation, groups, activation
        )

    # --- quantized weights (qmatmul.py) ----------------------------------------------------------
    def keeps_quantized(self, ggml_type):
        return quantized.supports(ggml_type)

    @_locked
    def upload_quantized(self, raw, ggml_type, shape):
        return quantized.upload(self, raw, ggml_type, shape)

    @_locked
    def qmatmul(self, x, lx, qweight, dtype):
        if not isinstance(qweight, quantized.QWeight):  # dense or host: the composites
            return super().qmatmul(x, lx, qweight, dtype)
        return quantized.qmatmul(self, x, lx, qweight, dtype)

    # --- indexing ------------------------------------------------------------------------------
    @_locked
    def index_select(self, storage, layout, ids, lids, dim, dtype):
        return index.index_select(self, storage, layout, ids, lids, dim, dtype)

    @_locked
    def gather(self, storage, layout, ids, lids, dim, dtype):
        return index.gather(self, storage, layout, ids, lids, dim, dtype)

    @_locked
    def scatter_add(self, dst, ldst, ids, lids, src, lsrc, dim, dtype):
        return index.scatter_add(self, dst, ldst, ids, lids, src, lsrc, dim, dtype)
