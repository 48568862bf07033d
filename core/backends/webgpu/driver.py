"""The driver interface: the only part of the WebGPU backend that differs between a
native process (native.py, wgpu-py) and a web page (browser.py, pyodide.ffi).

This class documents the contract; drivers need not inherit from it. Everything else
(kernels, pipeline cache, buffer pool, batching, limits) lives in runtime.py and the
op modules above it.
"""

from types import MappingProxyType


class Driver:
    kind = "abstract"  # "native" or "browser"
    # Read-only class defaults: a driver sets its own dict and set when it opens a device.
    info = MappingProxyType({})  # adapter info: device, description, backend_type, adapter_type...
    features = frozenset()  # enabled device features, e.g. {"shader-f16"}
    limits = MappingProxyType({})  # device limits in WebGPU's hyphenated spelling

    @property
    def name(self):
        """A human name of the adapter, for error messages."""
        raise NotImplementedError

    def create_buffer(self, size, kind="storage"):
        """A buffer of `size` bytes: "storage" (STORAGE | COPY_SRC | COPY_DST),
        "uniform" (UNIFORM | COPY_DST) or "query" (QUERY_RESOLVE | COPY_SRC, for
        timestamps). Raises OutOfMemory when it cannot."""
        raise NotImplementedError

    def destroy_buffer(self, buf):
        raise NotImplementedError

    def write_buffer(self, buf, offset, data):
        """Queue a write of bytes-like `data` (length a multiple of 4); it runs before the
        next submit."""
        raise NotImplementedError

    def create_pipeline(self, code, label, n_storage, read_only):
        """Compile WGSL `code` (entry point `main`) into a compute pipeline whose group 0 is
        binding 0: a uniform block with a dynamic offset, bindings 1..n_storage: storage
        buffers (read-only where read_only[i]). Returns a tuple whose first item is the
        pipeline. Raises DeviceError naming `label` when compilation or validation fails."""
        raise NotImplementedError

    def create_bind_group(self, pipeline, uniform, uniform_size, ranges):
        """Bind `uniform` (size `uniform_size`) and `ranges`: (buffer, offset, size) per
        storage binding."""
        raise NotImplementedError

    def dispatch(self, pipeline, bind_group, uniform_offset, groups, timestamps=None):
        """Record a dispatch of `groups` (x, y, z) into the open command encoder. With
        `timestamps` (query set, begin index, end index), as while profiling, it runs in a
        compute pass of its own whose beginning and end write those timestamps."""
        raise NotImplementedError

    # Timestamp queries, used only while a profiler watches the device (timestamps.py) and
    # only where `features` has "timestamp-query".
    def create_query_set(self, count):
        """A timestamp query set of `count` queries."""
        raise NotImplementedError

    def timestamp_pass(self, query_set, begin, end):
        """Record an empty compute pass writing timestamp `begin` and/or `end` (None: no
        write) of `query_set`."""
        raise NotImplementedError

    def resolve_queries(self, query_set, count, buf):
        """Record the resolve of queries [0, count) into `buf` (a "query" buffer)."""
        raise NotImplementedError

    def copy(self, src, src_off, dst, dst_off, size):
        """Record a buffer-to-buffer copy (offsets and size multiples of 4)."""
        raise NotImplementedError

    def submit(self):
        """Submit what was recorded; returns whether there was anything."""
        raise NotImplementedError

    def discard(self):
        """Drop what was recorded and not submitted (after a failure while recording or
        submitting), so that the next dispatch starts on a fresh encoder."""
        raise NotImplementedError

    def read(self, buf, offset, size):
        """Bytes of buf[offset:offset + size] after all submitted work (blocking)."""
        raise NotImplementedError

    async def read_async(self, buf, offset, size):
        """The same without blocking (the only form a browser always allows)."""
        raise NotImplementedError
