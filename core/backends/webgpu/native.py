"""The native driver: the dozen WebGPU calls the backend needs, on wgpu-py.

This is the only module of the WebGPU backend that imports wgpu; the browser driver
implements the same calls over `pyodide.ffi` and reuses everything else. Every wgpu
exception becomes a DeviceError that names what was being built, so a bad shader never
crashes the interpreter.
"""

import contextlib
import os

from ...errors import DeviceError, OutOfMemory
from .backend import WebGPUBackend

try:
    import wgpu
except ImportError as exc:  # Device.wgpu() turns this into a DeviceError naming the package
    raise ImportError(f"wgpu-py is not installed ({exc})") from None

_NO_ADAPTER_HELP = (
    "no WebGPU adapter found. Install a GPU driver with Vulkan, Metal or DX12 support, or "
    "Mesa's software Vulkan (lavapipe) on Debian/Ubuntu: `sudo apt-get install "
    "mesa-vulkan-drivers`"
)

# Limits the backend reads, in WebGPU's spelling.
_LIMIT_NAMES = (
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-compute-workgroups-per-dimension",
    "max-storage-buffers-per-shader-stage",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-storage-size",
    "min-storage-buffer-offset-alignment",
    "min-uniform-buffer-offset-alignment",
    "max-uniform-buffer-binding-size",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-size-z",
)


def _quiet_env():
    # lavapipe/wgpu-native print warnings when XDG_RUNTIME_DIR is unset.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        path = f"/tmp/ember-xdg-{os.getuid()}" if hasattr(os, "getuid") else None
        if path:
            os.makedirs(path, mode=0o700, exist_ok=True)
            os.environ["XDG_RUNTIME_DIR"] = path


def list_native_adapters():
    """The adapters wgpu-py sees, best first (Vulkan/Metal/DX12 before OpenGL)."""
    _quiet_env()
    try:
        adapters = wgpu.gpu.enumerate_adapters_sync()
    except Exception as exc:  # wgpu-native raises plain RuntimeErrors when no backend loads
        raise DeviceError(f"Device.wgpu: {_NO_ADAPTER_HELP} ({exc})", device="wgpu") from None
    rank = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 2}
    kind_rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    return sorted(
        adapters,
        key=lambda a: (
            rank.get(a.info.get("backend_type"), 1),
            kind_rank.get(a.info.get("adapter_type"), 4),
        ),
    )


def open_native_backend(index=0):
    adapters = list_native_adapters()
    if not adapters:
        raise DeviceError(f"Device.wgpu({index}): {_NO_ADAPTER_HELP}", device="wgpu")
    if not 0 <= index < len(adapters):
        raise DeviceError(
            f"Device.wgpu({index}): only {len(adapters)} adapter(s) here", device="wgpu"
        )
    return WebGPUBackend(NativeDriver(adapters[index]), f"wgpu:{index}")


def _timestamp_writes(query_set, begin, end):
    writes = {"query_set": query_set}
    if begin is not None:
        writes["beginning_of_pass_write_index"] = begin
    if end is not None:
        writes["end_of_pass_write_index"] = end
    return writes


class NativeDriver:
    """Buffers, pipelines, one open command encoder and a queue, on wgpu-py."""

    kind = "native"

    def __init__(self, adapter):
        self.adapter = adapter
        self.info = dict(adapter.info)
        wanted = {n: adapter.limits[n] for n in _LIMIT_NAMES if n in adapter.limits}
        features = []
        if "shader-f16" in adapter.features:
            features.append("shader-f16")
        if "subgroup" in adapter.features:
            features.append("subgroup")  # matmul on CPU adapters broadcasts A across lanes
        if "timestamp-query" in adapter.features:
            features.append("timestamp-query")  # per-kernel GPU times while profiling
        try:
            self.device = adapter.request_device_sync(
                label="ember", required_features=features, required_limits=wanted
            )
        except Exception as exc:
            raise DeviceError(
                f"Device.wgpu: requestDevice failed on {self.name}: {exc}", device="wgpu"
            ) from None
        self.features = set(self.device.features)
        self.limits = dict(self.device.limits)
        self.queue = self.device.queue
        self._encoder = None
        self._pass = None
        self._staging = {}

    @property
    def name(self):
        return self.info.get("device") or self.info.get("description") or "adapter"

    # --- resources ------------------------------------------------------------------------
    def create_buffer(self, size, kind="storage"):
        usage = (
            (wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
            if kind == "uniform"
            else (wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
            if kind == "query"
            else (wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
        )
        try:
            return self.device.create_buffer(size=size, usage=usage)
        except Exception as exc:
            raise OutOfMemory(
                f"wgpu: cannot allocate a buffer of {size} bytes on {self.name}: {exc}",
                size=size,
                device="wgpu",
            ) from None

    def destroy_buffer(self, buf):
        buf.destroy()

    def write_buffer(self, buf, offset, data):
        self.queue.write_buffer(buf, offset, data)

    def create_pipeline(self, code, label, n_storage, read_only):
        """A compute pipeline whose group 0 is: binding 0 a uniform block with a dynamic
        offset, bindings 1..n_storage storage buffers (read-only where `read_only[i]`)."""
        try:
            module = self.device.create_shader_module(code=code, label=label)
            entries = [
                {
                    "binding": 0,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True},
                }
            ]
            for i in range(n_storage):
                kind = (
                    wgpu.BufferBindingType.read_only_storage
                    if read_only[i]
                    else wgpu.BufferBindingType.storage
                )
                entries.append(
                    {
                        "binding": i + 1,
                        "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": kind},
                    }
                )
            bgl = self.device.create_bind_group_layout(entries=entries, label=label)
            layout = self.device.create_pipeline_layout(bind_group_layouts=[bgl], label=label)
            pipeline = self.device.create_compute_pipeline(
                layout=layout, compute={"module": module, "entry_point": "main"}, label=label
            )
        except Exception as exc:
            raise DeviceError(
                f"wgpu: kernel {label!r} failed to compile or validate on {self.name}:\n{exc}",
                kernel=label,
                device="wgpu",
            ) from None
        return (pipeline, bgl)

    def create_bind_group(self, pipeline, uniform, uniform_size, ranges):
        """ranges: (buffer, byte offset, byte size) per storage binding."""
        entries = [
            {"binding": 0, "resource": {"buffer": uniform, "offset": 0, "size": uniform_size}}
        ]
        for i, (buf, off, size) in enumerate(ranges):
            entries.append(
                {"binding": i + 1, "resource": {"buffer": buf, "offset": off, "size": size}}
            )
        return self.device.create_bind_group(layout=pipeline[1], entries=entries)

    # --- recording --------------------------------------------------------------------------
    def _enc(self):
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        return self._encoder

    def dispatch(self, pipeline, bind_group, uniform_offset, groups, timestamps=None):
        if timestamps is not None:  # profiling: a pass of its own, timed (timestamps.py)
            self._end_pass()
            self._pass = self._enc().begin_compute_pass(
                timestamp_writes=_timestamp_writes(*timestamps)
            )
        if self._pass is None:
            self._pass = self._enc().begin_compute_pass()
        p = self._pass
        p.set_pipeline(pipeline[0])
        p.set_bind_group(0, bind_group, [uniform_offset])
        p.dispatch_workgroups(*groups)
        if timestamps is not None:
            self._end_pass()

    # --- timestamp queries (used only while profiling: timestamps.py) -------------------------
    def create_query_set(self, count):
        return self.device.create_query_set(type=wgpu.QueryType.timestamp, count=count)

    def timestamp_pass(self, query_set, begin, end):
        """Record an empty compute pass writing timestamps `begin` and/or `end`."""
        self._end_pass()
        self._enc().begin_compute_pass(
            timestamp_writes=_timestamp_writes(query_set, begin, end)
        ).end()

    def resolve_queries(self, query_set, count, buf):
        self._end_pass()
        self._enc().resolve_query_set(query_set, 0, count, buf, 0)

    def copy(self, src, src_off, dst, dst_off, size):
        self._end_pass()
        self._enc().copy_buffer_to_buffer(src, src_off, dst, dst_off, size)

    def _end_pass(self):
        if self._pass is not None:
            self._pass.end()
            self._pass = None

    def submit(self):
        """Submit what was recorded; returns whether anything was."""
        self._end_pass()
        if self._encoder is None:
            return False
        enc, self._encoder = self._encoder, None
        try:
            self.queue.submit([enc.finish()])
        except Exception as exc:
            raise DeviceError(
                f"wgpu: submitting work failed on {self.name}: {exc}", device="wgpu"
            ) from None
        return True

    def discard(self):
        """Drop the open pass and encoder unsubmitted (after a failure inside them), so
        that the next dispatch starts a fresh encoder."""
        self._pass = None
        self._encoder = None

    # --- readback -----------------------------------------------------------------------------
    def _staging_for(self, size):
        # Staging buffers are pooled by power-of-two class; one in flight is not shared,
        # so concurrent async reads each get their own.
        cls = 1 << max(8, (size - 1).bit_length())
        free = self._staging.setdefault(cls, [])
        if free:
            return free.pop()
        return self.device.create_buffer(
            size=cls, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
        )

    def _give_back(self, staging):
        self._staging.setdefault(staging.size, []).append(staging)

    def _start_read(self, buf, offset, size):
        staging = self._staging_for(size)
        enc = self.device.create_command_encoder()
        enc.copy_buffer_to_buffer(buf, offset, staging, 0, size)
        self.queue.submit([enc.finish()])
        return staging

    def read(self, buf, offset, size):
        """Bytes of buf[offset:offset+size] (offset and size multiples of 4)."""
        staging = self._start_read(buf, offset, size)
        with self._mapping(size):
            staging.map_sync(wgpu.MapMode.READ, 0, size)
        return self._finish_read(staging, size)

    async def read_async(self, buf, offset, size):
        staging = self._start_read(buf, offset, size)
        with self._mapping(size):
            await staging.map_async(wgpu.MapMode.READ, 0, size)
        return self._finish_read(staging, size)

    @contextlib.contextmanager
    def _mapping(self, size):
        """The one place a failed map becomes a DeviceError (sync and async alike)."""
        try:
            yield
        except Exception as exc:
            raise DeviceError(
                f"wgpu: reading back {size} bytes failed on {self.name}: {exc}", device="wgpu"
            ) from None

    def _finish_read(self, staging, size):
        data = staging.read_mapped(0, size)
        staging.unmap()
        self._give_back(staging)
        return data
