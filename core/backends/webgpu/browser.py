"""The browser driver: the same dozen WebGPU calls as `native.py`, over `pyodide.ffi` and
the page's (or worker's) `navigator.gpu`. Everything above the driver is shared.

Readback is asynchronous in a browser: `read_async` awaits `mapAsync`. The synchronous
`read` blocks through `pyodide.ffi.run_sync` (JSPI) where `can_run_sync()` is true, and
otherwise raises an error naming the async form (`await t.tolist_async()`).

Opening the device is asynchronous too. A page calls `await request_device_async()` once
(the worker does it while loading); `Device.webgpu()` then opens on that device without
blocking. Without that call it requests one through `run_sync` where JSPI allows.

WebGPU reports validation and memory errors asynchronously; the driver catches them with
error scopes where it can block (pipeline creation) and records uncaptured ones, raising
them as a DeviceError at the next submit or readback instead of losing them.
"""

import contextlib

import js
from pyodide.ffi import JsProxy, create_proxy, to_js

from ...errors import DeviceError, OutOfMemory
from .backend import WebGPUBackend

try:
    from pyodide.ffi import jsnull as _jsnull
except ImportError:  # older Pyodide converted null to None
    _jsnull = None
try:
    from pyodide.ffi import can_run_sync, run_sync
except ImportError:  # Pyodide before 0.27: no JSPI bridge, only the async API works

    def can_run_sync():
        return False

    def run_sync(awaitable):
        raise RuntimeError("pyodide.ffi.run_sync is not available in this Pyodide")


# WebGPU's limits in JavaScript's spelling; the backend reads them as wgpu-py spells them
# ("max-storage-buffer-binding-size"), so both drivers hand it the same dict.
_LIMITS = (
    "maxStorageBufferBindingSize",
    "maxBufferSize",
    "maxComputeWorkgroupsPerDimension",
    "maxStorageBuffersPerShaderStage",
    "maxComputeInvocationsPerWorkgroup",
    "maxComputeWorkgroupStorageSize",
    "minStorageBufferOffsetAlignment",
    "minUniformBufferOffsetAlignment",
    "maxUniformBufferBindingSize",
    "maxComputeWorkgroupSizeX",
    "maxComputeWorkgroupSizeY",
    "maxComputeWorkgroupSizeZ",
    "maxBindGroups",
    "maxBindingsPerBindGroup",
    "maxDynamicUniformBuffersPerPipelineLayout",
    "maxUniformBuffersPerShaderStage",
)
_WANTED_FEATURES = ("shader-f16", "timestamp-query")  # the latter: profiling only


def _hyphenated(name):
    return "".join("-" + c.lower() if c.isupper() else c for c in name)


def _js(value):
    """A JS object/array from Python dicts/lists (JsProxies inside pass through)."""
    return to_js(value, dict_converter=js.Object.fromEntries)


def _is_null(value):
    # JS undefined arrives as None, JS null as pyodide.ffi.jsnull.
    return value is None or value is _jsnull


_DISPATCH_JS = """(pass, pipeline, bindGroup, offset, x, y, z) => {
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup, [offset]);
  pass.dispatchWorkgroups(x, y, z);
}"""
_dispatch_fn = []


def _timed_pass(query_set, begin, end):
    writes = {"querySet": query_set}
    if begin is not None:
        writes["beginningOfPassWriteIndex"] = int(begin)
    if end is not None:
        writes["endOfPassWriteIndex"] = int(end)
    return _js({"timestampWrites": writes})


def _dispatch_js():
    if not _dispatch_fn:
        from pyodide.code import run_js

        _dispatch_fn.append(run_js(_DISPATCH_JS))
    return _dispatch_fn[0]


_device_errors = {}


def _errors_of(device):
    """The list collecting a GPUDevice's uncaptured errors and its loss, one per device
    however many backends share it, so each error is raised once."""
    key = device.js_id
    errors = _device_errors.get(key)
    if errors is None:
        errors = _device_errors[key] = []

        def on_error(event):
            errors.append(str(getattr(event.error, "message", event.error)))

        def on_lost(info):
            errors.append(
                f"the GPU device was lost ({getattr(info, 'reason', '?')}: "
                f"{getattr(info, 'message', '')}); reload the page"
            )

        # The proxies live as long as the device: it calls them until it is gone.
        device.addEventListener("uncapturederror", create_proxy(on_error))
        device.lost.then(create_proxy(on_lost))
    return errors


class _Opened:
    """The adapter and device that `request_device_async` obtained, kept for Device.webgpu()."""

    adapter = None
    device = None
    max_binding_size = None


async def request_device_async(max_binding_size=None):
    """Request the adapter and a device with the adapter's full limits (and shader-f16 where
    offered); returns a JSON-able description (adapter name, features, limits).
    `max_binding_size` caps the storage binding size ember plans with (tests use it to
    exercise the split of large tensors on adapters that allow 1 GiB)."""
    gpu = getattr(js.navigator, "gpu", None)
    if _is_null(gpu):
        raise DeviceError(
            "Device.webgpu(): this browser has no WebGPU (navigator.gpu is "
            "undefined); use a recent Chrome/Edge, or Chromium with "
            "--enable-unsafe-webgpu on Linux",
            device="webgpu",
        )
    adapter = await gpu.requestAdapter()
    if _is_null(adapter):
        raise DeviceError(
            "Device.webgpu(): navigator.gpu.requestAdapter() returned null "
            "(WebGPU is disabled here; Chromium on Linux needs "
            "--enable-unsafe-webgpu)",
            device="webgpu",
        )
    limits = {
        n: int(getattr(adapter.limits, n))
        for n in _LIMITS
        if not _is_null(getattr(adapter.limits, n, None))
    }
    features = [f for f in _WANTED_FEATURES if adapter.features.has(f)]
    try:
        device = await adapter.requestDevice(
            _js({"label": "ember", "requiredFeatures": features, "requiredLimits": limits})
        )
    except Exception as exc:  # a JsException: requestDevice rejected
        raise DeviceError(
            f"Device.webgpu(): requestDevice failed: {exc}", device="webgpu"
        ) from None
    _Opened.adapter, _Opened.device = adapter, device
    _Opened.max_binding_size = max_binding_size
    return describe(adapter, device)


def describe(adapter, device):
    info = adapter.info
    adapter_info = {
        k: str(getattr(info, k, "") or "")
        for k in ("vendor", "architecture", "device", "description")
    }
    return {
        "adapter": adapter_info,
        "features": sorted(str(f) for f in js.Array.from_(device.features)),
        "limits": {
            n: int(getattr(device.limits, n))
            for n in _LIMITS
            if not _is_null(getattr(device.limits, n, None))
        },
        "can_run_sync": bool(can_run_sync()),
    }


def open_browser_backend(max_binding_size=None):
    """ember's WebGPU backend on the browser's device (what `Device.webgpu()` opens)."""
    if _Opened.device is None:
        if not can_run_sync():
            raise DeviceError(
                "Device.webgpu(): the device must be requested asynchronously first: "
                "`await ember.backends.webgpu.browser.request_device_async()` (synchronous "
                "opening needs JSPI, which this context lacks)",
                device="webgpu",
            )
        run_sync(request_device_async(max_binding_size))
    cap = max_binding_size or _Opened.max_binding_size
    return WebGPUBackend(BrowserDriver(_Opened.adapter, _Opened.device, cap), "webgpu")


class BrowserDriver:
    """Buffers, pipelines, one open command encoder and a queue, on the browser's GPUDevice."""

    kind = "browser"

    def __init__(self, adapter, device, max_binding_size=None):
        self.adapter = adapter
        self.device = device
        self.queue = device.queue
        described = describe(adapter, device)
        self.info = dict(described["adapter"])
        # The backend picks barrier-free kernels for CPU adapters, as wgpu-py reports
        # lavapipe; the browser's counterpart is SwiftShader, its fallback adapter.
        if self.info.get("architecture") == "swiftshader" or bool(
            getattr(adapter.info, "isFallbackAdapter", False)
        ):
            self.info["adapter_type"] = "CPU"
        self.features = set(described["features"])
        self.limits = {_hyphenated(k): v for k, v in described["limits"].items()}
        if max_binding_size:  # plan as if bindings were smaller (buffers stay as large)
            key = "max-storage-buffer-binding-size"
            self.limits[key] = min(self.limits[key], int(max_binding_size))
        self._encoder = None
        self._pass = None
        self._staging = {}
        self._errors = _errors_of(device)
        self._usage = js.GPUBufferUsage
        self._storage_usage = self._usage.STORAGE | self._usage.COPY_SRC | self._usage.COPY_DST
        self._uniform_usage = self._usage.UNIFORM | self._usage.COPY_DST

    @property
    def name(self):
        described = self.info.get("description") or self.info.get("device")
        return (
            described
            or " ".join(filter(None, (self.info.get("vendor"), self.info.get("architecture"))))
            or "browser adapter"
        )

    def _raise_recorded(self, doing):
        if self._errors:
            messages = list(self._errors)
            self._errors.clear()
            raise DeviceError(
                f"webgpu: {doing} on {self.name} failed: " + "; ".join(messages), device="webgpu"
            )

    # --- resources ------------------------------------------------------------------------
    def create_buffer(self, size, kind="storage"):
        usage = (
            self._uniform_usage
            if kind == "uniform"
            else (self._usage.QUERY_RESOLVE | self._usage.COPY_SRC)
            if kind == "query"
            else self._storage_usage
        )
        max_size = self.limits.get("max-buffer-size")
        if max_size and size > max_size and kind != "uniform":
            raise OutOfMemory(
                f"webgpu: cannot allocate a buffer of {size} bytes on {self.name}"
                f" (maxBufferSize is {max_size})",
                size=size,
                device="webgpu",
            )
        try:
            return self.device.createBuffer(_js({"size": int(size), "usage": usage}))
        except Exception as exc:
            raise OutOfMemory(
                f"webgpu: cannot allocate a buffer of {size} bytes on {self.name}: {exc}",
                size=size,
                device="webgpu",
            ) from None

    def destroy_buffer(self, buf):
        buf.destroy()

    def write_buffer(self, buf, offset, data):
        """`data`: bytes-like (copied once into the GPU queue), or a JS ArrayBuffer/typed
        array (a fetched weights file), which goes to the GPU without touching Python."""
        if isinstance(data, JsProxy):
            self.queue.writeBuffer(buf, int(offset), data)
            return
        view = memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B") if view.c_contiguous else memoryview(bytes(view))
        self.queue.writeBuffer(buf, int(offset), to_js(view))

    def create_pipeline(self, code, label, n_storage, read_only):
        """Group 0: binding 0 a uniform block with a dynamic offset, bindings 1..n_storage
        storage buffers (read-only where `read_only[i]`)."""
        checked = can_run_sync()
        if checked:
            self.device.pushErrorScope("validation")
        stage = js.GPUShaderStage.COMPUTE
        entries = [
            {
                "binding": 0,
                "visibility": stage,
                "buffer": {"type": "uniform", "hasDynamicOffset": True},
            }
        ]
        for i in range(n_storage):
            entries.append(
                {
                    "binding": i + 1,
                    "visibility": stage,
                    "buffer": {"type": "read-only-storage" if read_only[i] else "storage"},
                }
            )
        try:
            module = self.device.createShaderModule(_js({"code": code, "label": label}))
            bgl = self.device.createBindGroupLayout(_js({"entries": entries, "label": label}))
            layout = self.device.createPipelineLayout(_js({"bindGroupLayouts": [bgl]}))
            pipeline = self.device.createComputePipeline(
                _js(
                    {
                        "layout": layout,
                        "label": label,
                        "compute": {"module": module, "entryPoint": "main"},
                    }
                )
            )
        except Exception as exc:
            if checked:
                run_sync(self.device.popErrorScope())
            raise DeviceError(
                f"webgpu: kernel {label!r} failed on {self.name}: {exc}",
                kernel=label,
                device="webgpu",
            ) from None
        if checked:
            error = run_sync(self.device.popErrorScope())
            if not _is_null(error):
                detail = self._compilation_messages(module) or str(error.message)
                raise DeviceError(
                    f"webgpu: kernel {label!r} failed to compile or validate on "
                    f"{self.name}:\n{detail}",
                    kernel=label,
                    device="webgpu",
                )
        return (pipeline, bgl)

    def _compilation_messages(self, module):
        try:
            info = run_sync(module.getCompilationInfo())
            return "\n".join(
                f"{m.lineNum}:{m.linePos}: {m.type}: {m.message}" for m in info.messages
            )
        except Exception:  # the validation error's own message is then the best we have
            return ""

    def create_bind_group(self, pipeline, uniform, uniform_size, ranges):
        """ranges: (buffer, byte offset, byte size) per storage binding."""
        entries = [
            {"binding": 0, "resource": {"buffer": uniform, "offset": 0, "size": int(uniform_size)}}
        ]
        for i, (buf, off, size) in enumerate(ranges):
            entries.append(
                {
                    "binding": i + 1,
                    "resource": {"buffer": buf, "offset": int(off), "size": int(size)},
                }
            )
        return self.device.createBindGroup(_js({"layout": pipeline[1], "entries": entries}))

    # --- recording --------------------------------------------------------------------------
    def _enc(self):
        if self._encoder is None:
            self._encoder = self.device.createCommandEncoder()
        return self._encoder

    def dispatch(self, pipeline, bind_group, uniform_offset, groups, timestamps=None):
        if timestamps is not None:  # profiling: a pass of its own, timed (timestamps.py)
            self._end_pass()
            self._pass = self._enc().beginComputePass(_timed_pass(*timestamps))
        if self._pass is None:
            self._pass = self._enc().beginComputePass()
        x, y, z = (tuple(groups) + (1, 1))[:3]
        # One crossing into JS instead of three (about 3 µs instead of 24 in Chromium).
        _dispatch_js()(
            self._pass, pipeline[0], bind_group, int(uniform_offset), int(x), int(y), int(z)
        )
        if timestamps is not None:
            self._end_pass()

    # --- timestamp queries (used only while profiling: timestamps.py) -------------------------
    def create_query_set(self, count):
        return self.device.createQuerySet(_js({"type": "timestamp", "count": int(count)}))

    def timestamp_pass(self, query_set, begin, end):
        """Record an empty compute pass writing timestamps `begin` and/or `end`."""
        self._end_pass()
        self._enc().beginComputePass(_timed_pass(query_set, begin, end)).end()

    def resolve_queries(self, query_set, count, buf):
        self._end_pass()
        self._enc().resolveQuerySet(query_set, 0, int(count), buf, 0)

    def copy(self, src, src_off, dst, dst_off, size):
        self._end_pass()
        self._enc().copyBufferToBuffer(src, int(src_off), dst, int(dst_off), int(size))

    def _end_pass(self):
        if self._pass is not None:
            self._pass.end()
            self._pass = None

    def submit(self):
        """Submit what was recorded; returns whether anything was."""
        self._end_pass()
        self._raise_recorded("recording work")
        if self._encoder is None:
            return False
        enc, self._encoder = self._encoder, None
        self.queue.submit(to_js([enc.finish()]))
        return True

    def discard(self):
        """Drop the open pass and encoder unsubmitted (after a failure inside them), so
        that the next dispatch starts a fresh encoder."""
        self._pass = None
        self._encoder = None

    # --- readback -----------------------------------------------------------------------------
    def _staging_for(self, size):
        cls = 1 << max(8, (size - 1).bit_length())
        free = self._staging.setdefault(cls, [])
        if free:
            return free.pop()
        return self.device.createBuffer(
            _js({"size": cls, "usage": self._usage.MAP_READ | self._usage.COPY_DST})
        )

    def _start_read(self, buf, offset, size):
        staging = self._staging_for(size)
        enc = self.device.createCommandEncoder()
        enc.copyBufferToBuffer(buf, int(offset), staging, 0, int(size))
        self.queue.submit(to_js([enc.finish()]))
        return staging

    def _finish_read(self, staging, size):
        # One copy: the mapped ArrayBuffer straight into a Python bytearray.
        out = bytearray(size)
        js.Uint8Array.new(staging.getMappedRange(0, size)).assign_to(out)
        staging.unmap()
        self._staging.setdefault(int(staging.size), []).append(staging)
        self._raise_recorded("running kernels")
        return out

    def read(self, buf, offset, size):
        """Bytes of buf[offset:offset+size], blocking through JSPI."""
        if not can_run_sync():
            raise DeviceError(
                "webgpu: a synchronous readback (tolist(), numpy(), item(), print) cannot "
                "block in this browser context (no JSPI: pyodide.ffi.can_run_sync() is "
                "False); use the async form: `await t.tolist_async()`, "
                "`await t.numpy_async()` or `await t.item_async()`",
                device="webgpu",
            )
        staging = self._start_read(buf, offset, size)
        with self._mapping(size):
            run_sync(staging.mapAsync(js.GPUMapMode.READ, 0, int(size)))
        return self._finish_read(staging, size)

    async def read_async(self, buf, offset, size):
        staging = self._start_read(buf, offset, size)
        with self._mapping(size):
            await staging.mapAsync(js.GPUMapMode.READ, 0, int(size))
        return self._finish_read(staging, size)

    @contextlib.contextmanager
    def _mapping(self, size):
        """The one place a failed map becomes a DeviceError (sync and async alike)."""
        try:
            yield
        except Exception as exc:
            raise DeviceError(
                f"webgpu: reading back {size} bytes failed on {self.name}: {exc}", device="webgpu"
            ) from None
