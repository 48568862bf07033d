"""Seeded random tensors. Numbers are drawn on the host (numpy's PCG64, or Python's
Mersenne Twister where numpy is absent) and uploaded, so a seed gives the same values
on every device of one host."""

import numbers
import operator

from . import dtype as dt
from .errors import InvalidArgument, OutOfMemory, fmt_shape
from .hostmem import host_memory_bytes, human_bytes
from .tensor import _device, _new_shape, _scalar_value, tensor


class Generator:
    """A seeded source of host random numbers. The engine is made on first use, so
    `import ember` does not import numpy just to seed the default generator."""

    def __init__(self, seed=None):
        self.manual_seed(seed)

    def manual_seed(self, seed):
        """Seed with a non-negative integer (None: fresh entropy from the OS). Both
        engines accept exactly these, so a seed means the same on every host."""
        self.seed = None if seed is None else _seed(seed)
        self._engine = None
        return self

    def _rng(self):
        """(numpy Generator, None) where numpy imports, else (None, random.Random)."""
        if self._engine is None:
            try:
                import numpy

                self._engine = (numpy.random.Generator(numpy.random.PCG64(self.seed)), None)
            except ImportError:
                import random as pyrandom

                self._engine = (None, pyrandom.Random(self.seed))
        return self._engine

    def normal(self, shape, mean=0.0, std=1.0):
        np_rng, py_rng = self._rng()
        n = _count(shape)
        if np_rng is not None:
            import numpy

            return (
                np_rng.standard_normal(n, dtype=numpy.float32) * numpy.float32(std)
                + numpy.float32(mean)
            ).reshape(shape)
        return [py_rng.gauss(mean, std) for _ in range(n)]

    def uniform(self, shape, low=0.0, high=1.0):
        np_rng, py_rng = self._rng()
        n = _count(shape)
        if np_rng is not None:
            import numpy

            u = np_rng.random(n, dtype=numpy.float32)
            return (u * numpy.float32(high - low) + numpy.float32(low)).reshape(shape)
        return [py_rng.uniform(low, high) for _ in range(n)]

    def integers(self, shape, low, high):
        np_rng, py_rng = self._rng()
        n = _count(shape)
        if np_rng is not None:
            return np_rng.integers(low, high, size=n).reshape(shape)
        return [py_rng.randrange(low, high) for _ in range(n)]


def _seed(seed):
    if isinstance(seed, bool):
        raise InvalidArgument(
            f"manual_seed: seed must be an integer, got {seed!r}", op="manual_seed", value=seed
        )
    try:
        seed = operator.index(seed)
    except TypeError:
        raise InvalidArgument(
            f"manual_seed: seed must be an integer, got {seed!r}", op="manual_seed", value=seed
        ) from None
    if seed < 0:
        raise InvalidArgument(
            f"manual_seed: seed must be non-negative, got {seed}", op="manual_seed", value=seed
        )
    return seed


def _count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


default_generator = Generator(0)


def manual_seed(seed):
    default_generator.manual_seed(seed)
    return default_generator


def _check_size(op, shape, itemsize=8):
    """Random numbers are drawn on the host: refuse a draw larger than its memory, naming
    the shape and bytes, before numpy tries (and, with overcommit, kills the process)."""
    n = 1
    for d in shape:
        n *= d
    limit = host_memory_bytes()
    if limit is not None and n * itemsize > limit:
        raise OutOfMemory(
            f"{op}: out of memory drawing {fmt_shape(shape)} random values on the host "
            f"({n * itemsize} bytes, {human_bytes(n * itemsize)}; this host has {human_bytes(limit)})",
            op=op,
            shape=tuple(shape),
            nbytes=n * itemsize,
            device="host",
        )


def _make(values, shape, dtype, device):
    t = tensor(values, dtype=dt.f32 if dtype is None else dtype, device=_device(device))
    return t.reshape(shape)


def randn(*shape, generator=None, dtype=dt.f32, device=None):
    shape = _new_shape("randn", shape)
    g = generator or default_generator
    _check_size("randn", shape)
    return _make(g.normal(shape), shape, dt.as_dtype(dtype), device)


def rand(*shape, generator=None, dtype=dt.f32, device=None):
    shape = _new_shape("rand", shape)
    g = generator or default_generator
    _check_size("rand", shape)
    return _make(g.uniform(shape), shape, dt.as_dtype(dtype), device)


def randint(low, high, shape, generator=None, dtype=dt.i64, device=None):
    """Integers drawn uniformly from [low, high): a non-empty range whose values all fit
    `dtype` (randint(5, 2) once failed inside numpy; randint(0, 300, u8) would wrap)."""
    shape = _new_shape("randint", (shape,))
    dtype = dt.as_dtype(dtype)
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise InvalidArgument(
                f"randint: {name} must be an integer, got {value!r}", op="randint", value=value
            )
    if low >= high:
        raise InvalidArgument(
            f"randint: low {low} must be less than high {high}", op="randint", low=low, high=high
        )
    if not dtype.is_int:
        raise InvalidArgument(
            f"randint: dtype must be an integer dtype, got {dtype.name}", op="randint", dtype=dtype
        )
    _scalar_value("randint", low, dtype)
    _scalar_value("randint", high - 1, dtype)
    g = generator or default_generator
    _check_size("randint", shape)
    return _make(g.integers(shape, low, high), shape, dtype, device)


def randn_like(t, generator=None):
    return randn(*t.shape, generator=generator, dtype=t.dtype, device=t.device)


def rand_like(t, generator=None):
    return rand(*t.shape, generator=generator, dtype=t.dtype, device=t.device)
