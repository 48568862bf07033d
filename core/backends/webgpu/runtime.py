"""The WebGPU runtime: what every op module launches its kernels through.

One `Runtime` per device, over a driver (native.py or browser.py). Its public API:

- facts: `max_binding`, `max_groups`, `storage_align`, `split_limit`, `has_f16`, `types`,
  `info` (the adapter's), `is_cpu_adapter`, `kernel_set` (which kernel family runs here);
- memory: `type_of(dtype, op)`, `alloc(numel, dtype, op)` (a pooled Storage),
  `scratch(nbytes, what)` / `give(buf)` (a raw pooled buffer), `exact_storage(nbytes)` (a
  buffer of exactly that size, for quantized weights), `write(buf, data)`;
- kernels: `kernel(name, t, spec, op)` / `pipeline(name, compute, spec, op, f16)` (cached
  per (file, compute type, specialisation)), `bind(storage, lo, hi, size, op)` (a binding
  of elements [lo, hi)), `bind_words(buf, w0, w1)` (a binding of 32-bit words),
  `launch(pipe, values, ranges, groups)` (parameter `values` by name, as the kernel's block in
  params.py declares them), `grid(n, wg)`;
- batches: `flush()`, `read(buf, offset, length)`, `read_async(...)`, `synchronize()`;
- i64 results: `overflow_binding()`, the binding of the flag word that the checked i64
  kernels set (overflow.py); every read raises, and clears them, when one was set;
- `lock`: a re-entrant lock. Recording, submitting and reading are done under it, and the
  backend holds it for the whole of each op, so threads may share one device: one op's
  dispatches never interleave with another's, and no thread ends an encoder another one
  is recording into.

Dispatches are recorded into one command encoder and submitted when a result is read or
when the batch's uniform arena fills. Shapes, strides and scalars of each dispatch are one
256-byte block of that arena, selected by a dynamic offset. Every parameter must fit 32
bits (a u32, or an i32 as its bits): a larger one (an element count past 2^32) is refused
with UnsupportedOp naming the kernel, never wrapped.
"""

import struct
import threading

from ...errors import DeviceError, EmberError, UnsupportedOp
from ...intmath import ceil_div
from . import kernels, overflow, params
from .dtypes import device_types, unsupported
from .pool import Pool, Storage

BLOCK = 256  # bytes of uniform data per dispatch
ARENA = 256 * 1024  # uniform arena per batch: up to 1,024 dispatches
WG = 256  # invocations per workgroup of elementwise kernels

# The two kernel families (DESIGN.md): "cpu-adapter" for software adapters (lavapipe,
# SwiftShader: vectorised across invocations, no shared-memory tiles) and "gpu" for
# discrete and integrated GPUs (shared-memory tiles, workgroup reductions, any subgroup
# size). Chosen by the adapter's type, never its name; EMBER_WGPU_KERNELS (or a driver's
# `kernel_set`) forces one, so the GPU family is tested on lavapipe and SwiftShader.
KERNEL_SETS = ("cpu-adapter", "gpu")
KERNEL_SET_ENV = "EMBER_WGPU_KERNELS"


def choose_kernel_set(info, forced=None):
    """The kernel family for an adapter whose info is `info`: `forced` (or the
    EMBER_WGPU_KERNELS variable) when given, else by adapter type."""
    import os

    forced = forced or os.environ.get(KERNEL_SET_ENV) or None
    if forced is not None:
        if forced not in KERNEL_SETS:
            raise DeviceError(
                f"{KERNEL_SET_ENV}={forced!r}: the WebGPU kernel set is one of {', '.join(KERNEL_SETS)}"
            )
        return forced
    return "cpu-adapter" if info.get("adapter_type") == "CPU" else "gpu"


class Runtime:
    def __init__(self, driver):
        self.driver = driver
        lim = driver.limits
        self.max_binding = int(lim["max-storage-buffer-binding-size"])
        self.max_groups = int(lim["max-compute-workgroups-per-dimension"])
        self.storage_align = int(lim.get("min-storage-buffer-offset-alignment", 256))
        self.block = max(BLOCK, int(lim.get("min-uniform-buffer-offset-alignment", 256)))
        self.has_f16 = "shader-f16" in driver.features
        self.types = device_types(self.has_f16)
        self.kernel_set = choose_kernel_set(driver.info, getattr(driver, "kernel_set", None))
        self.lock = threading.RLock()
        self.pool = Pool(driver, int(lim["max-buffer-size"]), self.lock)
        self.arena = driver.create_buffer(ARENA, "uniform")
        self.arena_host = bytearray(ARENA)
        self.arena_used = 0
        self.batch = 0
        self.pipelines = {}
        self.labels = {}
        self.slots = {}  # pipeline -> its parameter block's slots (params.py)
        self.overflow = None  # the i64 overflow flag word, made on first use
        self.overflow_armed = False  # a checked kernel ran since the flags were last read
        self.bind_groups = {}
        self.timer = None  # a timestamps.GpuTimer while a profiler watches this device
        self.counters = {
            "pipeline_hits": 0,
            "pipeline_misses": 0,
            "submits": 0,
            "dispatches": 0,
            "readbacks": 0,
        }

    # --- facts -------------------------------------------------------------------------------
    @property
    def info(self):
        return self.driver.info

    @property
    def is_cpu_adapter(self):
        return self.driver.info.get("adapter_type") == "CPU"

    @property
    def split_limit(self):
        """Bytes an operand may span and still bind once its start is aligned down."""
        return self.max_binding - self.storage_align - 4

    def memory_stats(self):
        return self.pool.stats()

    def kernel_stats(self):
        return dict(self.counters, pipelines=len(self.pipelines))

    # --- memory --------------------------------------------------------------------------------
    def type_of(self, dtype, op):
        """How `dtype` is held on this device (dtypes.py), or UnsupportedDType naming op."""
        t = self.types.get(dtype.name)
        if t is None:
            raise unsupported(op, dtype)
        return t

    def alloc(self, numel, dtype, op):
        t = self.type_of(dtype, op)
        out = Storage(self.pool.take(max(numel, 1) * t.size, f"{op} result"), numel, self.pool)
        out.dtype_name = dtype.name
        return out

    def scratch(self, nbytes, what):
        """A raw pooled buffer for transient use; hand it back with `give`."""
        return self.pool.take(nbytes, what)

    def give(self, buf):
        """Return a `scratch` buffer: it is reused only after the batch that last used it
        (see `write`)."""
        self.pool.give(buf)

    def exact_storage(self, nbytes, dtype_name):
        """A Storage of exactly `nbytes` (a multiple of 4), not rounded to a size class."""
        out = Storage(self.pool.take_exact(nbytes), nbytes // 4, self.pool)
        out.dtype_name = dtype_name
        return out

    def write(self, buf, raw):
        """Queue `raw` bytes into `buf` from offset 0 (padded to a whole word)."""
        with self.lock:
            if buf.batch == self.batch:
                # The buffer was used by recorded work: queue writes run before the batch.
                self.flush()
            if len(raw) % 4:
                raw = bytes(raw) + b"\0" * (4 - len(raw) % 4)
            self.driver.write_buffer(buf.handle, 0, raw)

    def empty_cache(self):
        with self.lock:
            self.flush()
            self.bind_groups.clear()
            self.pool.trim()

    # --- kernels -------------------------------------------------------------------------------
    def pipeline(self, name, compute, spec, op=None, f16=False):
        key = (name, compute, f16, tuple(sorted(spec.items())))
        with self.lock:
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
            self.slots[id(pipe[0])] = params.BLOCKS[name].slots(spec)
            return pipe

    def kernel(self, name, t, spec, op=None):
        """Pipeline for kernel `name` whose main operand has device type `t`."""
        return self.pipeline(name, t.compute, spec, op, f16=self.has_f16)

    def bind(self, storage, lo, hi, size, op):
        """(buffer range, element offset inside it) covering elements [lo, hi) of
        `storage` whose elements are `size` bytes."""
        buf = storage.buf
        start = lo * size // self.storage_align * self.storage_align
        end = max(hi * size, start + 4)
        length = min((end - start + 3) // 4 * 4, buf.size - start)
        if length > self.max_binding:
            raise UnsupportedOp(
                f"{op}: an operand spans {length} bytes, more than the adapter's maximum "
                f"storage binding of {self.max_binding} bytes, and this op cannot split it",
                op=op,
            )
        buf.batch = self.batch
        return (buf, start, length), lo - start // size

    def bind_words(self, buf, w0, w1):
        """(buffer range, word offset inside it) covering 32-bit words [w0, w1) of a raw
        buffer."""
        start = w0 * 4 // self.storage_align * self.storage_align
        length = min(max(w1 * 4 - start, 4), buf.size - start)
        buf.batch = self.batch
        return (buf, start, (length + 3) // 4 * 4), w0 - start // 4

    def grid(self, n, wg=WG):
        """Workgroups for n invocations of `wg` each, folded into two dimensions past the
        adapter's per-dimension limit."""
        groups = max(1, ceil_div(n, wg))
        if groups <= self.max_groups:
            return (groups, 1, 1)
        y = ceil_div(groups, self.max_groups)
        if y > self.max_groups:
            raise UnsupportedOp(f"wgpu: {n} invocations exceed the adapter's grid", op="grid")
        return (self.max_groups, y, 1)

    def launch(self, pipe, values, ranges, groups):
        """Record one dispatch of `pipe`: `values` ({name: value}, packed by the kernel's
        block: params.py) as its uniform block, `ranges` from `bind`/`bind_words` as its
        storage bindings."""
        params = self.slots[id(pipe[0])].pack(values)
        if len(params) > BLOCK // 4:
            raise UnsupportedOp(
                f"wgpu: {len(params)} kernel parameters exceed one uniform block (too many dims)",
                op="launch",
            )
        for i, v in enumerate(params):
            if not -(2**31) <= v < 2**32:
                label = self.labels.get(id(pipe[0]), "?")
                raise UnsupportedOp(
                    f"wgpu: kernel {label}: parameter {self.slots[id(pipe[0])].name_of(i)} "
                    f"is {v}, which does not fit the "
                    f"32 bits WGSL indexes with (an operand of more than 2^32 elements?)",
                    op=label,
                )
        data = struct.pack(f"<{len(params)}I", *[v & 0xFFFFFFFF for v in params])
        with self.lock:
            if self.arena_used + self.block > ARENA:
                self.flush()
            for buf, _, _ in ranges:
                # Marked here, after any flush: a later upload into one of these buffers
                # must wait for the batch that holds this dispatch (see write).
                buf.batch = self.batch
            off = self.arena_used
            self.arena_host[off : off + len(data)] = data
            key = (id(pipe[0]),) + tuple((b.serial, o, n) for b, o, n in ranges)
            try:
                bg = self.bind_groups.get(key)
                if bg is None:
                    if len(self.bind_groups) > 4096:
                        self.bind_groups.clear()
                    bg = self.driver.create_bind_group(
                        pipe, self.arena, BLOCK, [(b.handle, o, n) for b, o, n in ranges]
                    )
                    self.bind_groups[key] = bg
                if self.timer is None:
                    self.driver.dispatch(pipe, bg, off, groups)
                else:  # profiling: the dispatch timed in a pass of its own
                    self.timer.dispatch(
                        pipe, bg, off, groups, self.labels.get(id(pipe[0]), "?"), ranges
                    )
            except EmberError:
                raise
            except Exception as exc:  # a validation error from the driver: name the kernel
                label = self.labels.get(id(pipe[0]), "?")
                self._recover()
                raise DeviceError(
                    f"wgpu: dispatching kernel {label} with groups {groups} and "
                    f"bindings {[(o, n) for _, o, n in ranges]} failed: {exc}",
                    kernel=label,
                    device="wgpu",
                ) from None
            self.arena_used += self.block
            self.counters["dispatches"] += 1

    # --- i64 overflow flags (overflow.py) ----------------------------------------------------
    def overflow_binding(self):
        """The binding of the flag word, for a kernel whose i64 arithmetic is checked."""
        with self.lock:
            if self.overflow is None:
                self.overflow = self.pool.take(256, "i64 overflow flags")
                self.driver.write_buffer(self.overflow.handle, 0, bytes(4))
            self.overflow_armed = True
            rng, _ = self.bind_words(self.overflow, 0, 1)
            return rng

    def _overflow_word(self, raw):
        """After the flag word `raw` was read: clear it, and raise if an op set it."""
        self.overflow_armed = False
        word = int.from_bytes(bytes(raw[:4]), "little")
        if word:
            self.driver.write_buffer(self.overflow.handle, 0, bytes(4))
            raise overflow.error(word)

    # --- profiling -------------------------------------------------------------------------
    def start_timer(self):
        """Time each dispatch from now on (timestamps.GpuTimer), or None where the adapter
        has no timestamp queries. Earlier work is submitted first, outside the timing."""
        from . import timestamps

        if not timestamps.supported(self.driver):
            return None
        with self.lock:
            self.flush()
            self.timer = timestamps.GpuTimer(self.driver, ARENA // self.block)
            return self.timer

    def stop_timer(self, timer):
        """Submit the last timed batch (its queries resolved) and stop timing."""
        with self.lock:
            try:
                if self.timer is timer:
                    self.flush()
            finally:
                self.timer = None

    # --- batches -----------------------------------------------------------------------------
    def flush(self):
        """Submit the recorded batch (the uniform arena is written just before)."""
        with self.lock:
            if self.arena_used:
                self.driver.write_buffer(
                    self.arena, 0, memoryview(self.arena_host)[: self.arena_used]
                )
            self.arena_used = 0
            if self.timer is not None:
                self.timer.close_batch()
            try:
                submitted = self.driver.submit()
            except Exception:
                self._recover()
                raise
            finally:
                self.batch += 1
            if submitted:
                self.counters["submits"] += 1

    def _recover(self):
        """After a driver failure: submit what was recorded before it if the driver still
        can, else drop it, so that the next op starts on a fresh encoder instead of
        failing on this one's state."""
        try:
            self.driver.submit()
        except Exception:
            self.driver.discard()
        if self.timer is not None:
            self.timer.drop_batch()
        self.arena_used = 0
        self.batch += 1

    def read(self, buf, offset, length):
        """Bytes of `buf` after all recorded work (flushed first), blocking."""
        with self.lock:
            self.flush()
            if self.overflow_armed:
                self._overflow_word(self.driver.read(self.overflow.handle, 0, 4))
            self.counters["readbacks"] += 1
            return self.driver.read(buf.handle, offset, length)

    async def read_async(self, buf, offset, length):
        # Held across the await: another thread's ops wait for this readback rather than
        # record into the driver meanwhile (in a page there is one thread).
        with self.lock:
            self.flush()
            if self.overflow_armed:
                self._overflow_word(await self.driver.read_async(self.overflow.handle, 0, 4))
            self.counters["readbacks"] += 1
            return await self.driver.read_async(buf.handle, offset, length)

    def synchronize(self):
        with self.lock:
            scratch = self.scratch(256, "sync")
            try:
                self.read(scratch, 0, 4)
            finally:
                self.give(scratch)
