"""GPU buffers pooled by size class, and the storage object a tensor holds.

A tensor's storage returns its buffer to the pool when the tensor dies (CPython frees it
at once); the next allocation of the same class reuses it, so a repeated forward pass of
one shape creates no new buffers after the first.

The pool is shared by the threads using a device: each method runs under the runtime's
lock (a storage may die, and give its buffer back, in any thread).
"""

import threading

_MIB = 1 << 20


def size_class(nbytes):
    """Powers of two up to 64 MiB, then multiples of 16 MiB (bounded waste for weights)."""
    n = max(nbytes, 256)
    if n <= 64 * _MIB:
        return 1 << (n - 1).bit_length()
    step = 16 * _MIB
    return (n + step - 1) // step * step


class Buffer:
    """A driver buffer with the bookkeeping the backend needs."""

    __slots__ = ("handle", "size", "serial", "batch")

    def __init__(self, handle, size, serial):
        self.handle = handle
        self.size = size
        self.serial = serial
        self.batch = -1  # last command batch that referenced it


class Pool:
    def __init__(self, driver, max_buffer, lock=None):
        self.driver = driver
        self.lock = lock or threading.RLock()
        self.max_buffer = max_buffer
        self.free = {}
        # Every live buffer stays reachable from here: when the garbage collector frees a
        # cycle holding a Storage, wgpu's own finalizer must not release the buffer that
        # the Storage's finalizer is about to return to the pool.
        self.owned = {}
        self.bytes_in_use = 0
        self.bytes_pooled = 0
        self.buffers_created = 0

    def stats(self):
        return {
            "bytes_in_use": self.bytes_in_use,
            "bytes_pooled": self.bytes_pooled,
            "buffers_created": self.buffers_created,
        }

    def take(self, nbytes, what="tensor"):
        with self.lock:
            return self._take(nbytes, what)

    def _take(self, nbytes, what):
        from ...errors import OutOfMemory

        cls = size_class(nbytes)
        if cls > self.max_buffer:
            cls = max(nbytes, 4)
            cls = (cls + 3) // 4 * 4
            if cls > self.max_buffer:
                raise OutOfMemory(
                    f"wgpu: a {what} of {nbytes} bytes exceeds the adapter's maximum buffer "
                    f"size of {self.max_buffer} bytes",
                    size=nbytes,
                    device="wgpu",
                )
        bucket = self.free.get(cls)
        if bucket:
            buf = bucket.pop()
            self.bytes_pooled -= cls
        else:
            buf = self._create(cls)
        self.bytes_in_use += cls
        return buf

    def _create(self, size):
        self.buffers_created += 1
        buf = Buffer(self.driver.create_buffer(size), size, self.buffers_created)
        self.owned[buf.serial] = buf
        return buf

    def take_exact(self, nbytes):
        """A new buffer of exactly `nbytes` (a multiple of 4; a quantized weight, which a
        size class would round up to 2x), counted in use; given back, it is reused only
        at that exact size."""
        from ...errors import OutOfMemory

        if nbytes > self.max_buffer:
            raise OutOfMemory(
                f"wgpu: a buffer of {nbytes} bytes exceeds the adapter's maximum buffer "
                f"size of {self.max_buffer} bytes",
                size=nbytes,
                device="wgpu",
            )
        with self.lock:
            buf = self._create(nbytes)
            self.bytes_in_use += nbytes
            return buf

    def give(self, buf):
        with self.lock:
            self.bytes_in_use -= buf.size
            self.bytes_pooled += buf.size
            self.free.setdefault(buf.size, []).append(buf)

    def trim(self):
        """Destroy every pooled buffer (they are unreferenced by tensors)."""
        with self.lock:
            for bucket in self.free.values():
                for buf in bucket:
                    self.driver.destroy_buffer(buf.handle)
                    self.owned.pop(buf.serial, None)
            self.free.clear()
            self.bytes_pooled = 0


class Storage:
    """What a WebGPU tensor holds: a pooled buffer and its element count."""

    __slots__ = ("buf", "numel", "pool", "known_range", "dtype_name", "__weakref__")

    def __init__(self, buf, numel, pool, known_range=None):
        self.buf = buf
        self.numel = numel
        self.pool = pool
        self.known_range = known_range  # (min, max) of integer data uploaded from the host
        self.dtype_name = None

    def __del__(self):
        # At interpreter shutdown the device may already be gone, and so may this
        # module's globals (contextlib among them): a bare try needs no global.
        try:  # noqa: SIM105 (contextlib may be gone at shutdown)
            self.pool.give(self.buf)
        except Exception:
            pass

    def __repr__(self):
        return f"WebGPUStorage({self.numel} elements, {self.buf.size} bytes)"
