"""Devices are explicit: an op on tensors of two devices raises DeviceMismatch."""

from typing import ClassVar

from .errors import DeviceError


class Device:
    """A place tensors live: a kind ('cpu', 'wgpu', 'webgpu', 'cuda'), an index and its backend."""

    _cache: ClassVar[dict] = {}

    def __init__(self, kind, index, backend):
        self.kind = kind
        self.index = index
        self.backend = backend

    def __repr__(self):
        return f"Device({self})"

    def __str__(self):
        # "cpu" for the CPU; a second array device on the host (index > 0) keeps its index
        # so that error messages can tell the two apart.
        if self.kind == "cpu" and self.index == 0:
            return "cpu"
        return f"{self.kind}:{self.index}"

    def __eq__(self, other):
        if isinstance(other, str):
            other = Device.parse(other)
        return isinstance(other, Device) and (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self):
        return hash((self.kind, self.index))

    def memory_stats(self):
        """Device memory bookkeeping where the backend keeps it (WebGPU: bytes_in_use,
        bytes_pooled, buffers_created); an empty dict elsewhere."""
        return self.backend.memory_stats()

    def synchronize(self):
        """Wait until queued work has finished (a no-op on synchronous backends)."""
        self.backend.synchronize()

    def release_free_memory(self):
        """Hand memory held for freed temporaries back to the system where the backend
        can (the CPU: the C heap's free pages)."""
        self.backend.release_free_memory()

    # --- constructors ------------------------------------------------------------------------
    @classmethod
    def _get(cls, kind, index, make):
        key = (kind, index)
        dev = cls._cache.get(key)
        if dev is None:
            dev = cls(kind, index, make())
            cls._cache[key] = dev
        return dev

    @classmethod
    def cpu(cls):
        def make():
            from .backends.blas_threads import prepare_numpy_import

            prepare_numpy_import()
            try:
                import numpy
            except ImportError as exc:
                raise DeviceError(
                    "Device.cpu() needs numpy, which cannot be imported here "
                    f"({exc}); install it with `pip install numpy`, or use Device.webgpu() "
                    "in a browser",
                    device="cpu",
                ) from None
            from .backends.array import ArrayBackend
            from .backends.host_malloc import keep_freed_memory

            keep_freed_memory()
            return ArrayBackend(numpy, "cpu")

        return cls._get("cpu", 0, make)

    @classmethod
    def cuda(cls, index=0):
        def make():
            try:
                import cupy
            except ImportError as exc:
                raise DeviceError(
                    f"Device.cuda({index}) needs cupy ({exc}); install ember[cuda] on a "
                    "machine with an NVIDIA GPU and CUDA",
                    device="cuda",
                ) from None
            try:
                count = cupy.cuda.runtime.getDeviceCount()
            except Exception as exc:  # cupy raises its own runtime errors
                raise DeviceError(
                    f"Device.cuda({index}): no CUDA device ({exc})", device="cuda"
                ) from None
            if not 0 <= index < count:
                raise DeviceError(
                    f"Device.cuda({index}): only {count} CUDA device(s) here", device="cuda"
                )
            cupy.cuda.Device(index).use()
            from .backends.array import ArrayBackend

            return ArrayBackend(cupy, f"cuda:{index}")

        return cls._get("cuda", index, make)

    @classmethod
    def wgpu(cls, index=0):
        """A native WebGPU device through wgpu-py (Vulkan, Metal, DX12, or lavapipe)."""

        def make():
            try:
                from .backends.webgpu.native import open_native_backend
            except ImportError as exc:
                raise DeviceError(
                    f"Device.wgpu({index}) needs the wgpu package ({exc}); `pip install wgpu`",
                    device="wgpu",
                ) from None
            return open_native_backend(index)

        return cls._get("wgpu", index, make)

    @classmethod
    def webgpu(cls):
        """The browser's WebGPU device, inside Pyodide."""

        def make():
            try:
                from .backends.webgpu.browser import open_browser_backend
            except ImportError as exc:
                raise DeviceError(
                    f"Device.webgpu() runs inside a browser under Pyodide ({exc}); "
                    "natively use Device.wgpu()",
                    device="webgpu",
                ) from None
            return open_browser_backend()

        return cls._get("webgpu", 0, make)

    @classmethod
    def best(cls):
        """The fastest device that opens here: cuda, then a hardware WebGPU adapter, then
        the CPU. A software WebGPU adapter (lavapipe, SwiftShader) runs the same kernels
        far slower than numpy, so natively it is chosen only when numpy is missing; in a
        browser the page's WebGPU device is the only one there is."""
        import sys

        if sys.platform == "emscripten":
            return cls.webgpu()
        try:
            return cls.cuda()
        except DeviceError:
            pass
        software = None
        try:
            dev = cls.wgpu()
            if not dev.is_software():
                return dev
            software = dev
        except DeviceError:
            pass
        try:
            return cls.cpu()
        except DeviceError:
            if software is not None:
                return software
            raise

    def is_software(self):
        """True for a WebGPU device on a CPU adapter (lavapipe, SwiftShader)."""
        return self.backend.is_software_adapter

    @classmethod
    def parse(cls, spec):
        """'cpu', 'cuda', 'cuda:1', 'wgpu', 'wgpu:0', 'webgpu', 'best', or a Device."""
        if isinstance(spec, Device):
            return spec
        if spec is None:
            return cls.cpu()
        text = str(spec).strip().lower()
        kind, _, idx = text.partition(":")
        index = int(idx) if idx else 0
        if kind == "cpu":
            return cls.cpu()
        if kind == "cuda":
            return cls.cuda(index)
        if kind in ("wgpu", "gpu"):
            return cls.wgpu(index)
        if kind == "webgpu":
            return cls.webgpu()
        if kind == "best":
            return cls.best()
        raise DeviceError(
            f"device: unknown device {spec!r} (expected cpu, cuda[:N], wgpu[:N], webgpu, best)",
            device=spec,
        )


def as_device(device):
    return Device.parse(device)


def set_cpu_threads(n):
    """How many threads ember's own CPU work spreads over (row-wise ops, side-by-side
    micro-batches), as EMBER_CPU_THREADS=n does; that variable, when set, wins. BLAS keeps
    its own setting (OPENBLAS_NUM_THREADS)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DeviceError(f"set_cpu_threads: expected a whole number >= 1, got {n!r}", device="cpu")
    from .backends import row_parallel

    row_parallel.set_workers(n)


def exact_cpu_products():
    """A context manager: within it, the CPU's many-row products with quantized weights
    (a prompt's) keep x in f32, the weight decoded to f32 for BLAS, instead of rounding x
    to 16 bits for the integer kernels where the CPU has them (AVX-512 VNNI): for
    comparing with a reference that computes in f32 (ember.verify does). The difference
    is ~1e-5 relative a product; EMBER_INTEGER_GEMM=0 does the same for a process."""
    from .backends.array_qmatmul import exact_products

    return exact_products()
