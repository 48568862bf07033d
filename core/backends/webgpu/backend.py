"""The WebGPU backend: every primitive as a WGSL dispatch, over a thin driver.

Runtime-agnostic: the driver (native.py on wgpu-py, or a browser driver over
pyodide.ffi) creates buffers and pipelines, records dispatches and copies, submits and
reads back; everything else lives here and needs neither wgpu nor numpy.

- Pipelines are cached per (kernel file, dtype, specialisation) (kernels.py).
- Buffers come from a pool by size class (pool.py); `memory_stats()` reports it.
- Dispatches are recorded into one command encoder and submitted when a result is read
  or when the batch's uniform arena fills. Shapes, strides and scalars of each dispatch
  are one 256-byte block of that arena, selected by a dynamic offset.
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
  and the norms' residual= (read by the norm kernel when laid out as x).
"""
import struct

from ... import dtype as dt
from ...errors import (DeviceError, EmberError, UnsupportedDType,
                       UnsupportedOp, fmt_shape)
from ...ops import BINARY, COMPARE, INT_DIV, UNARY
from ...layout import Layout
from ...shape import numel
from ..base import Backend
from . import index, kernels, longrows, loopcap, split
from . import reduce as reductions
from .dtypes import convert_expr, device_types, host_words, unsupported
from .pool import Pool, Storage
from .shapes import collapse, contiguous_strides, span

_BLOCK = 256               # bytes of uniform data per dispatch
_ARENA = 256 * 1024        # uniform arena per batch: up to 1,024 dispatches
_WG = 256                  # invocations per workgroup of elementwise kernels
_EPT = 8                   # elements per invocation of elementwise kernels
_MAX_DIMS = 10
_SCAN_CHUNK = 4096         # prefix-sum elements per invocation before carries


class WebGPUBackend(Backend):
    fused = frozenset({"softmax", "log_softmax", "layer_norm", "rms_norm", "rope", "linear",
                       "layer_norm_residual", "rms_norm_residual"})

    def __init__(self, driver, name):
        self.driver = driver
        self.name = name
        lim = driver.limits
        self.max_binding = int(lim["max-storage-buffer-binding-size"])
        self.max_groups = int(lim["max-compute-workgroups-per-dimension"])
        self.storage_align = int(lim.get("min-storage-buffer-offset-alignment", 256))
        self.block = max(_BLOCK, int(lim.get("min-uniform-buffer-offset-alignment", 256)))
        self.has_f16 = "shader-f16" in driver.features
        self.types = device_types(self.has_f16)
        self.pool = Pool(driver, int(lim["max-buffer-size"]))
        self.arena = driver.create_buffer(_ARENA, "uniform")
        self.arena_host = bytearray(_ARENA)
        self.arena_used = 0
        self.batch = 0
        self.pipelines = {}
        self.labels = {}
        self.bind_groups = {}
        self.counters = {"pipeline_hits": 0, "pipeline_misses": 0, "submits": 0,
                         "dispatches": 0, "readbacks": 0}

    # --- bookkeeping --------------------------------------------------------------------------
    def memory_stats(self):
        return {"bytes_in_use": self.pool.bytes_in_use, "bytes_pooled": self.pool.bytes_pooled,
                "buffers_created": self.pool.buffers_created}

    def kernel_stats(self):
        return dict(self.counters, pipelines=len(self.pipelines))

    def empty_cache(self):
        self.flush()
        self.bind_groups.clear()
        self.pool.trim()

    @property
    def adapter_info(self):
        return dict(self.driver.info)

    def _type(self, dtype, op):
        t = self.types.get(dtype.name)
        if t is None:
            raise unsupported(op, dtype)
        return t

    def _alloc(self, numel, dtype, op):
        t = self._type(dtype, op)
        out = Storage(self.pool.take(max(numel, 1) * t.size, f"{op} result"), numel, self.pool)
        out.dtype_name = dtype.name
        return out

    # --- pipelines and dispatch -------------------------------------------------------------
    def _pipeline(self, name, compute, spec, op=None, f16=False):
        key = (name, compute, f16, tuple(sorted(spec.items())))
        pipe = self.pipelines.get(key)
        if pipe is not None:
            self.counters["pipeline_hits"] += 1
            return pipe
        self.counters["pipeline_misses"] += 1
        code = kernels.render(name, compute, spec, enable_f16=f16)
        ro = kernels.bindings(name, spec)
        label = kernels.label(name, spec, op)
        pipe = self.driver.create_pipeline(code, label, len(ro), ro)
        self.pipelines[key] = pipe
        self.labels[id(pipe[0])] = label
        return pipe

    def _kernel(self, name, t, spec, op=None):
        """Pipeline for kernel `name` whose main operand has device type `t`."""
        return self._pipeline(name, t.compute, spec, op, f16=self.has_f16)

    def _bind(self, storage, lo, hi, size, op):
        """(buffer range, element offset inside it) covering elements [lo, hi)."""
        buf = storage.buf
        start = lo * size // self.storage_align * self.storage_align
        end = max(hi * size, start + 4)
        length = min((end - start + 3) // 4 * 4, buf.size - start)
        if length > self.max_binding:
            raise UnsupportedOp(
                f"{op}: an operand spans {length} bytes, more than the adapter's maximum "
                f"storage binding of {self.max_binding} bytes, and this op cannot split it",
                op=op)
        buf.batch = self.batch
        return (buf, start, length), lo - start // size

    def _launch(self, pipe, params, ranges, groups):
        if len(params) > _BLOCK // 4:
            raise UnsupportedOp(f"wgpu: {len(params)} kernel parameters exceed one uniform "
                                f"block (too many dims)", op="launch")
        if self.arena_used + self.block > _ARENA:
            self.flush()
        for buf, _, _ in ranges:
            # Marked here, after any flush: a later upload into one of these buffers must
            # wait for the batch that holds this dispatch (see _write).
            buf.batch = self.batch
        off = self.arena_used
        data = struct.pack(f"<{len(params)}I", *[v & 0xFFFFFFFF for v in params])
        self.arena_host[off:off + len(data)] = data
        self.arena_used += self.block
        key = (id(pipe[0]),) + tuple((b.serial, o, n) for b, o, n in ranges)
        try:
            bg = self.bind_groups.get(key)
            if bg is None:
                if len(self.bind_groups) > 4096:
                    self.bind_groups.clear()
                bg = self.driver.create_bind_group(
                    pipe, self.arena, _BLOCK, [(b.handle, o, n) for b, o, n in ranges])
                self.bind_groups[key] = bg
            self.driver.dispatch(pipe, bg, off, groups)
        except EmberError:
            raise
        except Exception as exc:  # a validation error from the driver: name the kernel
            label = self.labels.get(id(pipe[0]), "?")
            raise DeviceError(f"wgpu: dispatching kernel {label} with groups {groups} and "
                              f"bindings {[(o, n) for _, o, n in ranges]} failed: {exc}",
                              kernel=label, device="wgpu") from None
        self.counters["dispatches"] += 1

    def _grid(self, n, wg=_WG):
        groups = max(1, -(-n // wg))
        if groups <= self.max_groups:
            return (groups, 1, 1)
        y = -(-groups // self.max_groups)
        if y > self.max_groups:
            raise UnsupportedOp(f"wgpu: {n} invocations exceed the adapter's grid", op="grid")
        return (self.max_groups, y, 1)

    def flush(self):
        """Submit the recorded batch (the uniform arena is written just before)."""
        if self.arena_used:
            self.driver.write_buffer(self.arena, 0, memoryview(self.arena_host)[:self.arena_used])
        self.arena_used = 0
        if self.driver.submit():
            self.counters["submits"] += 1
        self.batch += 1

    def synchronize(self):
        self.flush()
        scratch = self.pool.take(256, "sync")
        try:
            self.driver.read(scratch.handle, 0, 4)
        finally:
            self.pool.give(scratch)

    # --- elementwise launcher -------------------------------------------------------------
    def _split_limit(self):
        """Bytes an operand may span and still bind once its start is aligned down."""
        return self.max_binding - self.storage_align - 4

    def _elementwise(self, name, t, spec, op, shape, inputs, out, out_strides=None,
                     scalars=(0, 0)):
        """Launch an elementwise kernel over `shape`.

        inputs: list of (storage, strides, offset, device type); out: (storage, offset,
        size) written contiguously, or at `out_strides` (a strided destination). Dims are
        collapsed first. Operands larger than the max binding are split into row-major
        boxes (split.py); where one row of a permuted input (a transposed view) is
        already too large, that input is first copied contiguous by the copy kernel, which
        cuts both its source and destination into tiles.
        """
        n = 1
        for d in shape:
            n *= d
        if n == 0:
            return
        strided_out = out_strides is not None
        all_strides = [s for _, s, _, _ in inputs] + ([out_strides] if strided_out else [])
        cshape, cstrides = collapse(shape, all_strides)
        if len(cshape) > _MAX_DIMS:
            raise UnsupportedOp(f"{op}: more than {_MAX_DIMS} dims after collapsing", op=op)
        nd = len(cshape)
        ostr = cstrides[-1] if strided_out else contiguous_strides(cshape)
        operands = [(st, cs, off, it.size) for (st, _, off, it), cs in zip(inputs, cstrides)]
        operands.append((out[0], ostr, out[1], out[2]))
        limit = self._split_limit()
        plans = [(cs, 1, size) for _, cs, _, size in operands]
        plan = split.row_plan(cshape, plans, limit)
        boxes = None
        if plan[0] > 0 and strided_out:
            boxes = split.tile_boxes(cshape, split.tile_plan(cshape, plans, limit))
        elif plan[0] > 0:
            done = {}    # a scalar binary op passes its one input twice: copy it once
            copied = []
            for inp, cs in zip(inputs, cstrides):
                key = (id(inp[0]), tuple(inp[1]), inp[2])
                if key not in done:
                    done[key] = self._contiguous_input(shape, inp, cs, cshape, limit)
                copied.append(done[key])
            if any(c is not inp for c, inp in zip(copied, inputs)):
                return self._elementwise(name, t, spec, op, shape, copied, out,
                                         scalars=scalars)
        if boxes is None:
            boxes = split.row_boxes(cshape, *plan)
        spec = dict(spec, ND=nd, WG=_WG, EPT=_EPT)
        pipe = self._kernel(name, t, spec, op)
        for starts, sub in boxes:
            ranges, offs = [], []
            for st, cs, off, size in operands:
                lo = off + split.offset_of(starts, cs)
                rng, rel = self._bind(st, lo, lo + span(sub, cs), size, op)
                ranges.append(rng)
                offs.append(rel)
            count = 1
            for d in sub:
                count *= d
            params = [0] * (8 + nd * (1 + len(operands)))
            params[0] = count
            params[1], params[2] = scalars
            params[3] = offs[-1]
            for j, o in enumerate(offs[:-1]):
                params[4 + j] = o
            params[8:8 + nd] = sub
            for j, (_, cs, _, _) in enumerate(operands[:-1] if not strided_out else operands):
                params[8 + nd * (1 + j):8 + nd * (2 + j)] = cs
            self._launch(pipe, params, ranges, self._grid(-(-count // _EPT)))

    def _contiguous_input(self, shape, inp, cstrides, cshape, limit):
        """`inp` copied contiguous when one row of it does not fit a binding and its dims
        are permuted (a transposed view), else `inp` itself."""
        st, strides, off, it = inp
        row = [1] + list(cshape[1:])
        moving = [s for d, s in zip(cshape, cstrides) if d > 1 and s > 0]
        if span(row, cstrides) * it.size <= limit or moving == sorted(moving, reverse=True):
            return inp
        copy = self.copy_strided(st, Layout(shape, strides, off), it.dtype)
        return (copy, contiguous_strides(shape), 0, it)

    def _input(self, storage, layout, t):
        return (storage, layout.strides, layout.offset, t)

    # --- memory ---------------------------------------------------------------------------
    def from_host(self, data, dtype, shape, copy=True):
        op = "from_host"
        t = self._type(dtype, op)
        n = 1
        for d in shape:
            n *= d
        mv = memoryview(data)
        if mv.nbytes and not mv.c_contiguous:
            mv = memoryview(mv.tobytes())      # one C-order copy of a strided host view
        raw = mv.cast("B") if mv.nbytes and (mv.format != "B" or mv.ndim != 1) else mv
        if raw.nbytes != n * dtype.itemsize:
            raise UnsupportedOp(
                f"from_host: {raw.nbytes} bytes for shape {fmt_shape(shape)} of {dtype.name} "
                f"(expected {n * dtype.itemsize})", op=op)
        known = _int_range(data, raw, dtype) if dtype.is_int and n else None
        if dtype is dt.i64 and known and (known[0] < -2 ** 31 or known[1] >= 2 ** 31):
            raise UnsupportedDType(
                f"from_host: i64 values {known[0]}..{known[1]} do not fit in 32 bits; the "
                f"WebGPU backend keeps i64 as i32 on the device (WGSL has no 64-bit "
                f"integers)", op=op, dtype=dtype)
        out = self._alloc(n, dtype, op)
        out.known_range = known
        if n == 0:
            return out
        if not t.packed:
            self._write(out.buf, raw)
            return out
        # Converted dtypes: upload the host words as they are, widen them in a kernel.
        hs = dtype.itemsize
        tmp = self.pool.take(host_words(dtype, n) * 4, "upload")
        self._write(tmp, raw)
        pipe = self._kernel("unpack", t, {"SO": t.storage, "UNPACK": t.unpack, "WG": _WG}, op)
        per = (self.max_binding - 2 * self.storage_align) // max(hs, t.size) // 4 * 4
        for s in range(0, n, per):
            e = min(n, s + per)
            wrng, wrel = self._raw_range(tmp, s * hs // 4, -(-e * hs // 4))
            orng, orel = self._bind(out, s, e, t.size, op)
            self._launch(pipe, [e - s, 0, 0, orel, wrel], [wrng, orng], self._grid(e - s))
        self.pool.give(tmp)   # reused only after this batch (see _write)
        return out

    def _raw_range(self, buf, w0, w1):
        start = w0 * 4 // self.storage_align * self.storage_align
        length = min(max(w1 * 4 - start, 4), buf.size - start)
        buf.batch = self.batch
        return (buf, start, (length + 3) // 4 * 4), w0 - start // 4

    def _write(self, buf, raw):
        if buf.batch == self.batch:
            # The buffer was used by recorded work: queue writes run before the batch.
            self.flush()
        if len(raw) % 4:
            raw = bytes(raw) + b"\0" * (4 - len(raw) % 4)
        self.driver.write_buffer(buf.handle, 0, raw)

    def empty(self, shape, dtype):
        self._type(dtype, "empty")
        n = 1
        for d in shape:
            n *= d
        return self._alloc(n, dtype, "empty")

    def full(self, shape, value, dtype):
        t = self._type(dtype, "full")
        n = 1
        for d in shape:
            n *= d
        out = self._alloc(n, dtype, "full")
        if n == 0:
            return out
        bits = _param_bits(_host_round(value, dtype), t)
        pipe = self._kernel("fill", t, {"S": t.storage, "PARAM": t.param, "WG": _WG, "EPT": _EPT},
                            "full")
        per = (self.max_binding - self.storage_align) // t.size
        for s in range(0, n, per):
            e = min(n, s + per)
            rng, rel = self._bind(out, s, e, t.size, "full")
            self._launch(pipe, [e - s, bits, 0, rel], [rng], self._grid(-(-(e - s) // _EPT)))
        if dtype.is_int:
            out.known_range = (int(value), int(value))
        return out

    def _read_bytes(self, storage, layout, dtype, op):
        """(buffer, byte offset, byte length, host length) of the host form, after any
        copy/pack kernels are recorded."""
        t = self._type(dtype, op)
        n = layout.numel
        if t.packed:
            if not layout.is_contiguous():
                storage = self.copy_strided(storage, layout, dtype)
                off = 0
            else:
                off = layout.offset
            words = host_words(dtype, n)
            out = self.pool.take(words * 4, "readback")
            pipe = self._kernel("pack", t, {"SX": t.storage, "PACK": t.pack, "WG": _WG}, op)
            # Ranges of 4 elements at a time: a whole number of words for every packing
            # (2 bf16/f16 or 4 u8 per word, 2 words per i64).
            per = (self._split_limit() // max(t.size, dtype.itemsize)) // 4 * 4
            for s in range(0, n, per):
                e = min(n, s + per)
                w0, w1 = s * dtype.itemsize // 4, host_words(dtype, e)
                rng, rel = self._bind(storage, off + s, off + e, t.size, op)
                wrng, wrel = self._raw_range(out, w0, w1)
                self._launch(pipe, [w1 - w0, e - s, 0, wrel, rel], [rng, wrng],
                             self._grid(w1 - w0))
            out.batch = self.batch
            return out, 0, words * 4, n * dtype.itemsize, storage
        if not layout.is_contiguous():
            storage = self.copy_strided(storage, layout, dtype)
            start = 0
        else:
            start = layout.offset * t.size
        begin = start // 4 * 4
        end = (start + n * t.size + 3) // 4 * 4
        return storage.buf, begin, end - begin, n * t.size, (storage, start - begin)

    def to_bytes(self, storage, layout, dtype):
        if layout.numel == 0:
            return b""
        buf, off, length, nbytes, keep = self._read_bytes(storage, layout, dtype, "to_bytes")
        self.flush()
        self.counters["readbacks"] += 1
        data = self.driver.read(buf.handle, off, length)
        return self._finish_read(buf, data, nbytes, keep)

    async def to_bytes_async(self, storage, layout, dtype):
        if layout.numel == 0:
            return b""
        buf, off, length, nbytes, keep = self._read_bytes(storage, layout, dtype, "to_bytes")
        self.flush()
        self.counters["readbacks"] += 1
        data = await self.driver.read_async(buf.handle, off, length)
        return self._finish_read(buf, data, nbytes, keep)

    def _finish_read(self, buf, data, nbytes, keep):
        skip = keep[1] if isinstance(keep, tuple) else 0
        if not isinstance(keep, tuple):
            self.pool.give(buf)   # the pack output is ours alone
        mv = memoryview(data).cast("B")
        return mv[skip:skip + nbytes].tobytes() if (skip or len(mv) != nbytes) else bytes(mv)

    def to_numpy(self, storage, layout, dtype):
        import numpy
        raw = bytearray(self.to_bytes(storage, layout, dtype))
        arr = numpy.frombuffer(raw, dtype=dtype.numpy_name).reshape(layout.shape)
        if dtype is dt.bf16:
            arr = (arr.astype(numpy.uint32) << 16).view(numpy.float32)
        return arr

    def copy_strided(self, storage, layout, dtype):
        return self.cast(storage, layout, dtype, dtype)

    def copy_into(self, dst, dst_layout, src, src_layout, dtype):
        t = self._type(dtype, "copy_into")
        if src.buf is dst.buf:
            # One buffer cannot be bound read-only and writable in a dispatch (WebGPU
            # rejects the whole batch), and overlapping views would race: copy src first,
            # which also gives numpy's semantics for overlapping assignment.
            src = self.copy_strided(src, src_layout, dtype)
            src_layout = Layout(src_layout.shape)
        spec = {"SX": t.storage, "SO": t.storage, "CONVERT": "x"}
        self._elementwise("copy", t, spec, "copy_into", src_layout.shape,
                          [self._input(src, src_layout, t)],
                          (dst, dst_layout.offset, t.size), out_strides=dst_layout.strides)

    def cast(self, storage, layout, src_dtype, dst_dtype):
        ts = self._type(src_dtype, "cast")
        td = self._type(dst_dtype, "cast")
        out = self._alloc(layout.numel, dst_dtype, "cast")
        spec = {"SX": ts.storage, "SO": td.storage, "CONVERT": convert_expr(ts, td)}
        self._elementwise("copy", ts, spec, "cast", layout.shape,
                          [self._input(storage, layout, ts)], (out, 0, td.size),
                          out_strides=contiguous_strides(layout.shape))
        if src_dtype is dst_dtype:
            out.known_range = storage.known_range
        return out

    # --- elementwise --------------------------------------------------------------------------
    def unary(self, op, storage, layout, dtype, params=()):
        t = self._type(dtype, op)
        row = UNARY[op]
        out = self._alloc(layout.numel, dtype, op)
        bits = [_param_bits(p, t) for p in params] + [0, 0]
        spec = {"S": t.storage, "OP": row.wgsl, "PARAM": t.param, "ROUND": t.round}
        self._elementwise("unary", t, spec, op, layout.shape, [self._input(storage, layout, t)],
                          (out, 0, t.size), scalars=(bits[0], bits[1]))
        return out

    def _binary_like(self, op, expr, result, so, a, la, b, lb, dtype, out_dtype):
        t = self._type(dtype, op)
        shape = la.shape
        n = la.numel
        out = self._alloc(n, out_dtype, op)
        ot = self._type(out_dtype, op)
        if lb is None:
            load_b = f"T({t.param}(1u))"
            scalar = _param_bits(b, t)
            inputs = [self._input(a, la, t), self._input(a, la, t)]
        else:
            load_b = "T(B[strided(i, {{ND}}u, 8u, 8u + 2u * {{ND}}u, p(5u))])"
            scalar = 0
            inputs = [self._input(a, la, t), self._input(b, lb, t)]
        spec = {"S": t.storage, "SO": so, "RESULT": result.replace("{{OP}}", expr),
                "LOAD_B": load_b}
        self._elementwise("binary", t, spec, op, shape, inputs, (out, 0, ot.size),
                          scalars=(scalar, 0))
        return out

    def binary(self, op, a, la, b, lb, dtype):
        t = self._type(dtype, op)
        expr = INT_DIV.wgsl if (op == "div" and dtype.is_int) else BINARY[op].wgsl
        return self._binary_like(op, expr, f"{t.round}({{{{OP}}}})", t.storage, a, la, b, lb,
                                 dtype, dtype)

    def compare(self, op, a, la, b, lb, dtype):
        result = "select(0u, 1u, {{OP}})"
        if dtype.is_float:
            # IEEE: every comparison with NaN is false except `!=` (tested on the bits).
            nan = "(nan_f(f32(a)) || nan_f(f32(b)))"
            result = (f"select(0u, 1u, ({{{{OP}}}}) || {nan})" if op == "ne" else
                      f"select(0u, 1u, ({{{{OP}}}}) && !{nan})")
        return self._binary_like(op, COMPARE[op].wgsl, result, "u32", a, la, b, lb, dtype, dt.u8)

    def where(self, cond, lc, a, la, b, lb, dtype):
        t = self._type(dtype, "where")
        c_dtype = index.storage_dtype_of(cond)
        tc = self.types.get(c_dtype) if c_dtype else self.types["u8"]
        out = self._alloc(la.numel, dtype, "where")
        spec = {"S": t.storage, "SC": tc.storage}
        self._elementwise("where", t, spec, "where", la.shape,
                          [(cond, lc.strides, lc.offset, tc), self._input(a, la, t),
                           self._input(b, lb, t)], (out, 0, t.size))
        return out

    # --- reductions -------------------------------------------------------------------------
    def reduce(self, op, storage, layout, dims, dtype):
        return reductions.reduce(self, op, storage, layout, dims, dtype)

    def _row_split(self, rows, length, passes):
        """(workgroup size, invocations per row) for row kernels. CPU adapters give each
        of many short rows one invocation (no barriers; sequential f32 sums stay accurate
        up to a few thousand terms, and `passes` loops over the row stay within the loop
        budget, loopcap.py); GPUs, and few or long rows, share a row among a workgroup
        tree (rows too long even for that are _row_too_long)."""
        if (self.driver.info.get("adapter_type") == "CPU" and rows >= 64
                and length <= 2048 and passes * length <= min(16384, loopcap.BUDGET)):
            return 64, 1
        lanes = min(256 if length >= 2048 else 64, 1 << max(0, length - 1).bit_length())
        return max(64, lanes), lanes     # short rows: several per workgroup

    def _row_too_long(self, n, passes):
        """Whether a row kernel's `passes` over rows of n elements would loop past the
        budget (loopcap.py) in some invocation. Long rows share a workgroup tree (the
        one-invocation rows of CPU adapters are short by construction), so the lanes are
        those of a single row."""
        _, lanes = self._row_split(1, n, passes)
        return not loopcap.fits(loopcap.strided_loops(n, lanes, passes))

    def _rows(self, layout, dim):
        """Kept dims (all but `dim`) of layout, and the output's contiguous strides."""
        ostr = contiguous_strides(layout.shape)
        kept = [d for d in range(layout.ndim) if d != dim]
        kshape = [layout.shape[d] for d in kept]
        kx = [layout.strides[d] for d in kept]
        ko = [ostr[d] for d in kept]
        if not kshape:
            kshape, kx, ko = [1], [0], [0]
        kshape, (kx, ko) = collapse(kshape, [kx, ko])
        return kshape, kx, ko, ostr[dim]

    def cumsum(self, storage, layout, dim, dtype):
        t = self._type(dtype, "cumsum")
        out = self._alloc(layout.numel, dtype, "cumsum")
        if layout.numel == 0:
            return out
        length = layout.shape[dim]
        kshape, kx, ko, os_ = self._rows(layout, dim)
        rows = layout.numel // length
        chunks = -(-length // _SCAN_CHUNK)
        spec = {"S": t.storage, "ROUND": t.round, "NK": len(kshape), "WG": 64}
        pipe = self._kernel("cumsum", t, spec, "cumsum")
        rng, rel = self._bind(storage, layout.offset,
                              layout.offset + span(layout.shape, layout.strides), t.size, "cumsum")
        orng, _ = self._bind(out, 0, layout.numel, t.size, "cumsum")
        params = [rows * chunks, length, rel, 0, layout.strides[dim], os_, _SCAN_CHUNK, chunks] \
            + kshape + kx + ko
        self._launch(pipe, params, [rng, rng, orng], self._grid(rows * chunks, 64))
        if chunks > 1:
            # Carries: the scan of each row's chunk totals (the last element of every chunk
            # but the final one), then added to the chunks after them.
            ostr = contiguous_strides(layout.shape)
            kept = [d for d in range(layout.ndim) if d != dim]
            totals = Layout([layout.shape[d] for d in kept] + [chunks - 1],
                            [ostr[d] for d in kept] + [_SCAN_CHUNK * os_],
                            (_SCAN_CHUNK - 1) * os_)
            carries = self.cumsum(out, totals, len(kept), dtype)
            crng, _ = self._bind(carries, 0, rows * (chunks - 1), t.size, "cumsum")
            params[3] = 1
            self._launch(pipe, params, [crng, crng, orng], self._grid(rows * chunks, 64))
        return out

    # --- fused paths --------------------------------------------------------------------------
    def softmax(self, storage, layout, dim, dtype, log=False):
        op = "log_softmax" if log else "softmax"
        t = self._type(dtype, op)
        n = layout.shape[dim]
        if layout.numel and self._row_too_long(n, 3) and n * t.size <= self._split_limit():
            return longrows.softmax(self, storage, layout, dim, dtype, log)
        out = self._alloc(layout.numel, dtype, op)
        if layout.numel == 0:
            return out
        kshape, kx, ko, os_ = self._rows(layout, dim)
        xs = layout.strides[dim]
        plan = split.row_plan(kshape, [(kx, (n - 1) * xs + 1, t.size),
                                       (ko, (n - 1) * os_ + 1, t.size)], self._split_limit())
        if plan is None:
            return self._rows_apart(op, storage, layout, dim, dtype, out, lambda st, lay: (
                self.softmax(st, lay, lay.ndim - 1, dtype, log)))
        for rows, sub, pipe, (rng, rel), (orng, orel), grid in self._row_launches(
                "softmax", t, op, storage, layout.offset, out, kshape, kx, ko, plan, n, xs,
                os_, 3):
            params = [rows, n, rel, int(log), xs, os_, orel, 0] + sub + kx + ko
            self._launch(pipe, params, [rng, orng], grid)
        return out

    def _row_launches(self, kernel, t, op, storage, offset, out, kshape, kx, ko, plan, n, xs,
                      os_, passes, also=None):
        """Per box of rows of a row kernel's split plan (rows of n elements, strides xs in
        the input and os_ in the output): (rows, the box's shape, the pipeline, the
        input's and the output's (range, offset) bindings, the grid); with `also`
        (storage, offset) of a second input laid out as the first, its binding too."""
        for starts, sub in split.row_boxes(kshape, *plan):
            rows = numel(sub)
            wg, lanes = self._row_split(rows, n, passes)
            spec = {"S": t.storage, "ROUND": t.round, "NK": len(kshape), "WG": wg,
                    "LANES": lanes}
            pipe = self._kernel(kernel, t, spec, op)
            x0 = offset + split.offset_of(starts, kx)
            o0 = split.offset_of(starts, ko)
            bind_x = self._bind(storage, x0, x0 + span(sub, kx) + (n - 1) * xs, t.size, op)
            bind_o = self._bind(out, o0, o0 + span(sub, ko) + (n - 1) * os_, t.size, op)
            grid = self._grid(rows, wg // lanes)
            if also is None:
                yield rows, sub, pipe, bind_x, bind_o, grid
                continue
            a0 = also[1] + split.offset_of(starts, kx)
            bind_a = self._bind(also[0], a0, a0 + span(sub, kx) + (n - 1) * xs, t.size, op)
            yield rows, sub, pipe, bind_x, bind_o, grid, bind_a

    def _rows_apart(self, op, storage, layout, dim, dtype, out, last_dim_op):
        """A row kernel whose single row does not fit a binding as laid out (a softmax
        down the columns, a transposed view): when the row itself fits, run it on a copy
        with `dim` last and contiguous, and copy the result back into place."""
        n = layout.shape[dim]
        t = self._type(dtype, op)
        if n * t.size > self._split_limit():
            raise UnsupportedOp(
                f"{op}: one row of {n} elements ({n * t.size} bytes) along dim {dim} of shape "
                f"{fmt_shape(layout.shape)} exceeds the adapter's maximum storage binding of "
                f"{self.max_binding} bytes", op=op)
        perm = [d for d in range(layout.ndim) if d != dim] + [dim]
        moved = layout.permute(perm)
        rows = self.copy_strided(storage, moved, dtype)
        result = last_dim_op(rows, Layout(moved.shape))
        self.copy_into(out, Layout(layout.shape).permute(perm), result, Layout(moved.shape),
                       dtype)
        return out

    def layer_norm(self, storage, layout, w, lw, b, lb, eps, dtype, rms=False, residual=None,
                   lres=None):
        """Norm over the last dim, of x + residual where given: the norm kernel adds a
        residual laid out as x (same strides) as it reads; any other (or a row taking the
        long-row or rows-apart paths) is added first."""
        op = "rms_norm" if rms else "layer_norm"
        t = self._type(dtype, op)
        dim = layout.ndim - 1
        n = layout.shape[dim]
        passes = 2 if rms else 3     # rms_norm skips the mean
        long_rows = layout.numel and self._row_too_long(n, passes) and \
            n * t.size <= self._split_limit()
        if residual is not None and (long_rows or tuple(lres.strides) != tuple(layout.strides)):
            storage = self.binary("add", storage, layout, residual, lres, dtype)
            layout, residual = Layout(layout.shape), None
        if long_rows:
            return longrows.layer_norm(self, storage, layout, w, lw, b, lb, eps, dtype, rms)
        out = self._alloc(layout.numel, dtype, op)
        if layout.numel == 0:
            return out
        kshape, kx, ko, _ = self._rows(layout, dim)
        xs = layout.strides[dim]
        plan = split.row_plan(kshape, [(kx, (n - 1) * xs + 1, t.size), (ko, n, t.size)],
                              self._split_limit())
        if plan is None and residual is not None:
            summed = self.binary("add", storage, layout, residual, lres, dtype)
            return self.layer_norm(summed, Layout(layout.shape), w, lw, b, lb, eps, dtype, rms)
        if plan is None:
            return self._rows_apart(op, storage, layout, dim, dtype, out, lambda st, lay: (
                self.layer_norm(st, lay, w, lw, b, lb, eps, dtype, rms)))
        flags = 4 if rms else 0
        extra, affine = [], []
        for bit, (s, l) in ((1, (w, lw)), (2, (b, lb))):
            if s is None:
                extra.append((0, 0))
                affine.append(None)
                continue
            flags |= bit
            r, o = self._bind(s, l.offset, l.offset + span(l.shape, l.strides), t.size, op)
            affine.append(r)
            extra.append((o, l.strides[0] if l.ndim else 0))
        eps_bits = struct.unpack("<I", struct.pack("<f", eps))[0]
        also = None
        if residual is not None:
            flags |= 8
            also = (residual, lres.offset)
        for rows, sub, pipe, (rng, rel), (orng, orel), grid, *bind_r in self._row_launches(
                "norm", t, op, storage, layout.offset, out, kshape, kx, ko, plan, n, xs, 1,
                passes, also):
            # Without a residual, binding 5 repeats x (read-only, never read).
            (rrng, rrel), = bind_r or [(rng, 0)]
            ranges = [rng] + [r or rng for r in affine] + [orng, rrng]
            params = [rows, n, rel, eps_bits, xs, flags, extra[0][0], extra[1][0], extra[0][1],
                      extra[1][1], orel, rrel] + sub + kx
            self._launch(pipe, params, ranges, grid)
        return out

    def rope(self, storage, layout, cos, lcos, sin, lsin, dtype, interleaved=False):
        """See Backend.rope: x [..., T, D], cos/sin [T, D/2]."""
        op = "rope"
        t = self._type(dtype, op)
        out = self._alloc(layout.numel, dtype, op)
        if layout.numel == 0:
            return out
        shape = layout.shape
        d_model, t_len = shape[-1], shape[-2]
        spec = {"S": t.storage, "ROUND": t.round, "ND": layout.ndim,
                "INTERLEAVED": "true" if interleaved else "false", "WG": _WG}
        pipe = self._kernel("rope", t, spec, op)
        rng, rel = self._bind(storage, layout.offset,
                              layout.offset + span(shape, layout.strides), t.size, op)
        crng, co = self._bind(cos, lcos.offset, lcos.offset + span(lcos.shape, lcos.strides),
                              t.size, op)
        srng, so = self._bind(sin, lsin.offset, lsin.offset + span(lsin.shape, lsin.strides),
                              t.size, op)
        orng, _ = self._bind(out, 0, layout.numel, t.size, op)
        n = layout.numel
        params = [n, d_model, t_len, rel, co, so, lcos.strides[0], lcos.strides[1],
                  lsin.strides[0], lsin.strides[1], 0, 0] + list(shape) + list(layout.strides)
        self._launch(pipe, params, [rng, crng, srng, orng], self._grid(n))
        return out

    # --- matmul ---------------------------------------------------------------------------------
    def matmul(self, a, la, b, lb, dtype):
        from .matmul import matmul
        return matmul(self, a, la, b, lb, dtype)

    def linear(self, a, la, b, lb, bias, lbias, dtype, activation=None, residual=None,
               lres=None):
        """activation(a @ b + bias) + residual, applied as the matmul kernel stores."""
        from .matmul import linear
        return linear(self, a, la, b, lb, bias, lbias, dtype, activation, residual, lres)

    # --- quantized weights (qmatmul.py) ----------------------------------------------------------
    def upload_quantized(self, raw, ggml_type, shape):
        from . import qmatmul
        return qmatmul.upload(self, raw, ggml_type, shape)

    def qmatmul(self, x, lx, qweight, dtype):
        from . import qmatmul
        return qmatmul.qmatmul(self, x, lx, qweight, dtype)

    # --- indexing ------------------------------------------------------------------------------
    def index_select(self, storage, layout, ids, lids, dim, dtype):
        return index.index_select(self, storage, layout, ids, lids, dim, dtype)

    def gather(self, storage, layout, ids, lids, dim, dtype):
        return index.gather(self, storage, layout, ids, lids, dim, dtype)

    def scatter_add(self, dst, ldst, ids, lids, src, lsrc, dim, dtype):
        return index.scatter_add(self, dst, ldst, ids, lids, src, lsrc, dim, dtype)


def _param_bits(value, t):
    if t.compute == "f32":
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    v = int(value)
    if t.compute == "i32":
        v = max(-2 ** 31, min(2 ** 31 - 1, v))
    else:
        v = max(0, min(2 ** 32 - 1, v))
    return v & 0xFFFFFFFF


def _host_round(value, dtype):
    """A fill value as the dtype holds it (the device keeps bf16/f16 widened)."""
    if dtype is dt.bf16:
        from ...hostdata import pack, unpack
        return unpack(pack([float(value)], dtype), dtype, (1,))[0]
    if dtype is dt.f16:
        return struct.unpack("<e", struct.pack("<e", float(value)))[0]
    return value


def _int_range(data, raw, dtype):
    """(min, max) of integer host data, in C: numpy's own methods when `data` is an
    array, else builtins over a typed memoryview."""
    if hasattr(data, "min") and hasattr(data, "max"):
        return int(data.min()), int(data.max())
    code = {"i64": "q", "i32": "i", "u32": "I", "u8": "B"}[dtype.name]
    values = raw.cast(code)
    return min(values), max(values)
