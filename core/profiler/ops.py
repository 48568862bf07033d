"""Per-op host timing: while a profiler is active, every contract method of an instrumented
backend (backends/base.py declares them all) is shadowed by an instance attribute that times
the call and sizes what it read and wrote. Stopping deletes those attributes, so a backend
no profiler watches pays nothing.

Bytes in: the elements each (storage, Layout) argument is read through, times the storage's
element size, plus host data handed to from_host. Bytes out: the size of what the call
returns (a storage, a host array, bytes). A call made inside another (a composite's
primitives, a fused op's fallback) is recorded with its depth, so the summary counts each op
as its caller made it and the trace shows what it was made of.
"""

import functools
import inspect
import threading
import time

from ..backends.base import Backend
from ..dtype import DType, as_dtype
from ..layout import Layout

# Contract methods that answer a question rather than do work: left untimed.
_FACTS = frozenset(
    {"lacks", "keeps_quantized", "memory_stats", "start_kernel_timer", "stop_kernel_timer"}
)
# Contract methods that only schedule other contract calls, which are timed themselves (in
# their own threads' tracks when a backend runs them side by side): left untimed, so the
# summary keeps those calls as top-level ops.
_SCHEDULERS = frozenset({"map_independent"})


def contract_methods():
    """The names of the contract's working methods (plain functions declared on Backend)."""
    return sorted(
        name
        for name, value in vars(Backend).items()
        if not name.startswith("_")
        and name not in _FACTS | _SCHEDULERS
        and inspect.isfunction(value)
    )


def element_size(storage, fallback):
    """Bytes per element of a backend storage: numpy/cupy arrays say it, WebGPU storages
    name their dtype; else the call's dtype."""
    size = getattr(storage, "itemsize", None)
    if isinstance(size, int):
        return size
    name = getattr(storage, "dtype_name", None)
    if name:
        return as_dtype(name).itemsize
    return fallback


def nbytes(value):
    """Bytes of a result: a storage, host array or bytes, or a tuple holding them."""
    if isinstance(value, tuple):
        return sum(nbytes(v) for v in value)
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    size = getattr(value, "nbytes", None)
    if isinstance(size, int):
        return size
    numel, name = getattr(value, "numel", None), getattr(value, "dtype_name", None)
    if isinstance(numel, int) and name:
        return numel * as_dtype(name).itemsize
    return 0


def bytes_read(method, args, kwargs):
    values = list(args) + list(kwargs.values())
    fallback = next((v.itemsize for v in values if isinstance(v, DType)), 0)
    total = 0
    for i, value in enumerate(values):
        if isinstance(value, Layout) and i > 0 and values[i - 1] is not None:
            total += value.numel * element_size(values[i - 1], fallback)
    if method == "from_host" and values:
        total += nbytes(values[0])
    return total


def op_name(method, args, kwargs):
    """`unary.gelu`, `reduce.sum`, `linear.gelu`: the method and the op it was asked for."""
    if args and isinstance(args[0], str):
        return f"{method}.{args[0]}"
    if method == "linear":
        activation = kwargs.get("activation", args[7] if len(args) > 7 else None)
        if activation:
            return f"linear.{activation}"
    return method


class OpRecorder:
    """Wraps the contract methods of backends and collects one event per call."""

    def __init__(self, clock_origin):
        self.origin = clock_origin
        self.events = []
        self.lock = threading.Lock()
        self.depth = threading.local()
        self.wrapped = []  # (backend, names shadowed on it)

    def instrument(self, backend, device_name):
        names = [n for n in contract_methods() if n not in vars(backend)]
        cls = type(backend)
        for name in names:
            # The class's own implementation, bound: every name is declared on Backend.
            method = inspect.getattr_static(cls, name).__get__(backend, cls)
            setattr(backend, name, self._wrap(method, name, device_name))
        self.wrapped.append((backend, names))

    def restore(self):
        for backend, names in self.wrapped:
            for name in names:
                vars(backend).pop(name, None)
        self.wrapped = []

    def _record(self, name, device, start, end, depth, args, kwargs, result):
        event = {
            "name": op_name(name, args, kwargs),
            "cat": "op",
            "device": device,
            "tid": threading.get_ident(),
            "ts_ns": start - self.origin,
            "dur_ns": end - start,
            "depth": depth,
            "bytes_in": bytes_read(name, args, kwargs),
            "bytes_out": nbytes(result),
        }
        with self.lock:
            self.events.append(event)

    def _wrap(self, method, name, device):
        recorder = self

        def enter():
            depth = getattr(recorder.depth, "n", 0)
            recorder.depth.n = depth + 1
            return depth

        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def timed_async(*args, **kwargs):
                depth = enter()
                start = time.perf_counter_ns()
                try:
                    result = await method(*args, **kwargs)
                finally:
                    recorder.depth.n = depth
                recorder._record(
                    name, device, start, time.perf_counter_ns(), depth, args, kwargs, result
                )
                return result

            return timed_async

        @functools.wraps(method)
        def timed(*args, **kwargs):
            depth = enter()
            start = time.perf_counter_ns()
            try:
                result = method(*args, **kwargs)
            finally:
                recorder.depth.n = depth
            recorder._record(
                name, device, start, time.perf_counter_ns(), depth, args, kwargs, result
            )
            return result

        return timed
