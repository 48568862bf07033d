"""Shape arithmetic shared by the tensor and the backends. Pure Python."""

from .errors import DimOutOfRange, ShapeMismatch, fmt_shape


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def contiguous_strides(shape):
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= shape[i]
    return tuple(strides)


def normalize_dim(dim, ndim, op, shape=None):
    """Map a possibly negative dim into [0, ndim); name the op when it is out of range."""
    if type(dim) is int:  # the common case first: a decode step asks ~800 times
        if 0 <= dim < ndim:
            return dim
        if -ndim <= dim < 0:
            return dim + ndim
    if not isinstance(dim, int):
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if dim < lo or dim > hi:
        where = f" of shape {fmt_shape(shape)}" if shape is not None else ""
        raise DimOutOfRange(
            f"{op}: dim {dim} out of range for a {ndim}-d tensor{where} (expected {lo}..{hi})",
            op=op,
            dim=dim,
            ndim=ndim,
        )
    return dim % max(ndim, 1) if ndim else 0


def normalize_dims(dims, ndim, op, shape=None):
    """None means every dim; an int or a sequence is normalized, sorted, deduplicated."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    out = sorted({normalize_dim(d, ndim, op, shape) for d in dims})
    return tuple(out)


def broadcast_shapes(op, *shapes):
    """NumPy broadcasting; the error names every operand's shape."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            j = i - (ndim - len(s))
            if j < 0:
                continue
            d = s[j]
            if d == 1:
                continue
            if size == 1:
                size = d
            elif d != size:
                names = " ".join(fmt_shape(s) for s in shapes)
                raise ShapeMismatch(
                    f"{op}: shapes {names} cannot be broadcast (dim {i - ndim}: {size} vs {d})",
                    op=op,
                    shapes=[tuple(s) for s in shapes],
                )
        out.append(size)
    return tuple(out)
