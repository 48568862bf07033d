"""Errors that say what happened: every message names the op and its operands.

Each class keeps the data a caller may act on (op, shapes, dtypes, devices) as
attributes, in the spirit of candle's error variants.
"""


class EmberError(Exception):
    """Base class of every error ember raises on purpose."""

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details
        for key, value in details.items():
            setattr(self, key, value)


class ShapeMismatch(EmberError, ValueError):
    """Operand shapes that an op cannot combine: `shapes` is a tuple of the shapes
    concerned (one or more). A single `shape=` is accepted and kept as `shapes`, so the
    field is one name whichever form a raise site uses."""

    def __init__(self, message, **details):
        if "shape" in details:
            shape = details.pop("shape")
            details.setdefault("shapes", (tuple(shape),) if shape is not None else ())
        super().__init__(message, **details)


class DTypeMismatch(EmberError, TypeError):
    """Two tensors of different dtypes met in one op (ember never promotes silently)."""


class DeviceMismatch(EmberError, ValueError):
    """Two tensors on different devices met in one op (ember never moves data silently)."""


class DimOutOfRange(EmberError, IndexError):
    """A dimension or index outside the tensor."""


class UnsupportedDType(EmberError, TypeError):
    """An op asked of a dtype it has no meaning for (e.g. sqrt of u8)."""


class UnsupportedOp(EmberError, NotImplementedError):
    """An op that this device's backend does not provide."""


class FormatError(EmberError, ValueError):
    """A malformed file: the message names the file and the offending field."""


class DeviceError(EmberError, RuntimeError):
    """A device that cannot be opened or that failed (no adapter, shader error, lost device)."""


class OutOfMemory(EmberError, MemoryError):
    """An allocation larger than the device can hold."""


class InvalidArgument(EmberError, ValueError):
    """An argument outside the values an op accepts (a zero stride, a seed that is not a
    non-negative integer, zero chunks): the message names the op, the argument and value."""


def fmt_shape(shape):
    """Shapes print as lists, like candle and PyTorch messages: [2, 3]."""
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"
