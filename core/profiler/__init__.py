"""Where the time goes: per-op host time, call count and bytes moved on every device, and
per-kernel GPU time on WebGPU adapters with timestamp queries.

    from ember.profiler import profile
    with profile() as prof:
        model(x).numpy()
    print(prof.table())
    prof.save_trace("trace.json")       # Chrome trace: open it in https://ui.perfetto.dev

Every device opened before or during the block is watched (ops.py wraps its backend's
contract methods; WebGPU runtimes get a timestamps.GpuTimer). Outside a block nothing is
wrapped, so profiling costs nothing when it is off. One profiler at a time.
"""

import threading
import time

from ..device import Device
from ..errors import InvalidArgument
from .ops import OpRecorder
from .report import Profile

_active = []
_active_lock = threading.Lock()


class Profiler:
    """start() ... stop() -> Profile; `profile()` is the context-manager form."""

    def __init__(self):
        self.result = None

    def start(self):
        with _active_lock:
            if _active:
                raise InvalidArgument("profile: a profiler is already active; nest none")
            _active.append(self)
        self.origin = time.perf_counter_ns()
        self.ops = OpRecorder(self.origin)
        self.timers = []  # (device name, runtime, GpuTimer)
        self.devices = []
        self._open_device = Device.__dict__["_get"]
        try:
            for device in list(Device._cache.values()):
                self._watch(device)
        except BaseException:  # leave nothing wrapped behind
            self._detach()
            self._release()
            raise
        profiler = self

        def watched_get(cls, kind, index, make):
            known = (kind, index) in cls._cache
            device = profiler._open_device.__func__(cls, kind, index, make)
            if not known:
                profiler._watch(device)
            return device

        Device._get = classmethod(watched_get)
        return self

    def _watch(self, device):
        name = str(device)
        self.devices.append(name)
        self.ops.instrument(device.backend, name)
        timer = device.backend.start_kernel_timer()
        if timer is not None:
            self.timers.append((name, device.backend, timer))

    def stop(self):
        """Stop watching; read the GPU timestamps back (blocking) and return the Profile."""
        try:
            gpu = {name: timer.collect() for name, timer in self._detach()}
        finally:
            self._release()
        return self._finish(gpu)

    async def stop_async(self):
        """stop() without blocking, for a page without JSPI."""
        try:
            gpu = {name: await timer.collect_async() for name, timer in self._detach()}
        finally:
            self._release()
        return self._finish(gpu)

    def _detach(self):
        Device._get = self._open_device
        self.ops.restore()
        timers = []
        for name, backend, timer in self.timers:
            backend.stop_kernel_timer(timer)  # the last batch's queries are submitted
            timers.append((name, timer))
        return timers

    def _release(self):
        with _active_lock:
            _active.remove(self)

    def _finish(self, gpu):
        self.result = Profile(
            self.ops.events, gpu, self.origin, self.devices, time.perf_counter_ns() - self.origin
        )
        return self.result


class profile:
    """`with profile() as prof:` ... `prof.table()`, `prof.save_trace(path)`: a Profile once
    the block ends."""

    def __enter__(self):
        self.profiler = Profiler().start()
        self.result = None
        return self

    def __exit__(self, *exc):
        self.result = self.profiler.stop()
        return False

    def __getattr__(self, name):
        result = self.__dict__.get("result")
        if result is None:
            raise InvalidArgument(f"profile: .{name} is available once the block has ended")
        return getattr(result, name)
