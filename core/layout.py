"""A Layout is (shape, strides in elements, offset): every view here copies nothing.

Strides are non-negative; a stride of 0 is a broadcast dimension.
"""

from .errors import DimOutOfRange, ShapeMismatch, fmt_shape
from .shape import contiguous_strides, normalize_dim, numel

# Tuples of dims or strides seen -> the same values as Python ints, and shapes -> their
# contiguous strides. A forward pass builds about 35 Layouts a layer, nearly all of
# shapes it built the step before: a dict lookup is a fifth of converting each value
# (a decode step of a 30-layer model spent ~6 ms building Layouts). Bounded: cleared
# when full.
_INTS: dict[tuple, tuple[int, ...]] = {}
_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}
_CACHE_LIMIT = 1 << 14


def _ints(values):
    key = values if type(values) is tuple else tuple(values)
    try:
        return _INTS[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable value (a 0-d array): converted, not cached
        return tuple(int(v) for v in key)
    ints = tuple(int(v) for v in key)
    if len(_INTS) >= _CACHE_LIMIT:
        _INTS.clear()
    _INTS[key] = ints
    return ints


def _contiguous(shape):
    strides = _STRIDES.get(shape)
    if strides is None:
        if len(_STRIDES) >= _CACHE_LIMIT:
            _STRIDES.clear()
        strides = _STRIDES[shape] = contiguous_strides(shape)
    return strides


class Layout:
    # _contig and _numel: is_contiguous() and numel, worked out on first use (a decode step
    # asks each of its ~1000 Layouts several times); Layouts are values, never changed
    __slots__ = ("shape", "strides", "offset", "_contig", "_numel")
    _contig: bool | None
    _numel: int | None

    def __init__(self, shape, strides=None, offset=0):
        self.shape = _ints(shape)
        if strides is None:
            self.strides = _contiguous(self.shape)
            self._contig = True
        else:
            self.strides = _ints(strides)
            self._contig = None
        self.offset = int(offset)
        self._numel = None

    def __repr__(self):
        return f"Layout(shape={self.shape}, strides={self.strides}, offset={self.offset})"

    def __eq__(self, other):
        return isinstance(other, Layout) and (self.shape, self.strides, self.offset) == (
            other.shape,
            other.strides,
            other.offset,
        )

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def numel(self):
        n = self._numel
        if n is None:
            n = self._numel = numel(self.shape)
        return n

    def is_contiguous(self):
        """Row-major with no gaps (dims of size 1 may have any stride)."""
        if self._contig is None:
            self._contig = self._row_major()
        return self._contig

    def _row_major(self):
        expected = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if d != 1 and s != expected:
                return False
            expected *= d
        return True

    # --- views -----------------------------------------------------------------
    def narrow(self, dim, start, length, op="narrow"):
        dim = normalize_dim(dim, self.ndim, op, self.shape)
        size = self.shape[dim]
        if start < 0:
            start += size
        if start < 0 or length < 0 or start + length > size:
            raise DimOutOfRange(
                f"{op}: range start {start} length {length} outside dim {dim} of size {size} "
                f"(shape {fmt_shape(self.shape)})",
                op=op,
                shape=self.shape,
            )
        shape = list(self.shape)
        shape[dim] = length
        return Layout(shape, self.strides, self.offset + start * self.strides[dim])

    def slice(self, dim, start, stop, step):
        """Python slice semantics on one dim (positive step)."""
        start, stop, step = slice(start, stop, step).indices(self.shape[dim])
        length = max(0, (stop - start + step - 1) // step)
        shape = list(self.shape)
        strides = list(self.strides)
        shape[dim] = length
        strides[dim] = self.strides[dim] * step
        offset = self.offset + (start * self.strides[dim] if length else 0)
        return Layout(shape, strides, offset)

    def select(self, dim, index, op="select"):
        dim = normalize_dim(dim, self.ndim, op, self.shape)
        size = self.shape[dim]
        if not -size <= index < size:
            raise DimOutOfRange(
                f"{op}: index {index} out of range for dim {dim} of size {size} "
                f"(shape {fmt_shape(self.shape)})",
                op=op,
                index=index,
                shape=self.shape,
            )
        index %= size
        return Layout(
            self.shape[:dim] + self.shape[dim + 1 :],
            self.strides[:dim] + self.strides[dim + 1 :],
            self.offset + index * self.strides[dim],
        )

    def permute(self, dims, op="permute"):
        dims = [normalize_dim(d, self.ndim, op, self.shape) for d in dims]
        if sorted(dims) != list(range(self.ndim)):
            raise ShapeMismatch(
                f"{op}: {list(dims)} is not a permutation of the {self.ndim} dims of "
                f"shape {fmt_shape(self.shape)}",
                op=op,
                dims=dims,
                shape=self.shape,
            )
        return Layout([self.shape[d] for d in dims], [self.strides[d] for d in dims], self.offset)

    def transpose(self, d0, d1):
        if self.ndim == 0:
            return self
        d0 = normalize_dim(d0, self.ndim, "transpose", self.shape)
        d1 = normalize_dim(d1, self.ndim, "transpose", self.shape)
        order = list(range(self.ndim))
        order[d0], order[d1] = order[d1], order[d0]
        return self.permute(order)

    def unsqueeze(self, dim):
        dim = normalize_dim(dim, self.ndim + 1, "unsqueeze", self.shape)
        stride = self.strides[dim] * self.shape[dim] if dim < self.ndim else 1
        return Layout(
            self.shape[:dim] + (1,) + self.shape[dim:],
            self.strides[:dim] + (stride,) + self.strides[dim:],
            self.offset,
        )

    def squeeze(self, dims=None):
        if dims is None:
            keep = [i for i, d in enumerate(self.shape) if d != 1]
        else:
            drop = {
                normalize_dim(d, self.ndim, "squeeze", self.shape)
                for d in ((dims,) if isinstance(dims, int) else dims)
            }
            keep = [i for i in range(self.ndim) if not (i in drop and self.shape[i] == 1)]
        return Layout([self.shape[i] for i in keep], [self.strides[i] for i in keep], self.offset)

    def broadcast_to(self, shape, op="broadcast_to"):
        shape = _ints(shape)
        if shape == self.shape:  # nothing to broadcast (most calls): Layouts are values
            return self
        extra = len(shape) - self.ndim
        if extra < 0:
            raise ShapeMismatch(
                f"{op}: cannot broadcast shape {fmt_shape(self.shape)} to fewer dims "
                f"{fmt_shape(shape)}",
                op=op,
                shape=self.shape,
                target=shape,
            )
        strides = [0] * extra
        for i, (d, s) in enumerate(zip(self.shape, self.strides, strict=True)):
            target = shape[extra + i]
            if d == target:
                strides.append(s)
            elif d == 1:
                strides.append(0)
            else:
                raise ShapeMismatch(
                    f"{op}: cannot broadcast shape {fmt_shape(self.shape)} to "
                    f"{fmt_shape(shape)} (dim {extra + i}: {d} vs {target})",
                    op=op,
                    shape=self.shape,
                    target=shape,
                )
        return Layout(shape, strides, self.offset)

    def reshape(self, shape):
        """The view for `shape`, or None when the strides cannot express it without a copy.

        Groups of old dims whose product equals a group of new dims must be contiguous
        among themselves; the new dims of a group then split that block (NumPy's rule).
        """
        shape = tuple(int(d) for d in shape)
        if numel(shape) != self.numel:
            return None
        if self.is_contiguous() or self.numel == 0:
            return Layout(shape, None, self.offset)
        old = [(d, s) for d, s in zip(self.shape, self.strides, strict=True) if d != 1]
        old_dims = [d for d, _ in old]
        old_strides = [s for _, s in old]
        new_strides = [1] * len(shape)
        oi, oj, ni, nj = 0, 1, 0, 1
        while ni < len(shape) and oi < len(old_dims):
            new_block, old_block = shape[ni], old_dims[oi]
            while new_block != old_block:
                if new_block < old_block:
                    new_block *= shape[nj]
                    nj += 1
                else:
                    old_block *= old_dims[oj]
                    oj += 1
            for k in range(oi, oj - 1):
                if old_strides[k] != old_dims[k + 1] * old_strides[k + 1]:
                    return None
            new_strides[nj - 1] = old_strides[oj - 1]
            for k in range(nj - 1, ni, -1):
                new_strides[k - 1] = new_strides[k] * shape[k]
            ni, nj = nj, nj + 1
            oi, oj = oj, oj + 1
        return Layout(shape, new_strides, self.offset)

    def unfold(self, dim, size, step):
        """Sliding windows along `dim` as a new last dim (PyTorch's Tensor.unfold)."""
        dim = normalize_dim(dim, self.ndim, "unfold", self.shape)
        n = self.shape[dim]
        if size > n or size <= 0 or step <= 0:
            raise ShapeMismatch(
                f"unfold: window {size} step {step} does not fit dim {dim} of size {n}",
                op="unfold",
                shape=self.shape,
            )
        count = (n - size) // step + 1
        shape = list(self.shape)
        strides = list(self.strides)
        shape[dim] = count
        strides[dim] = self.strides[dim] * step
        return Layout(shape + [size], strides + [self.strides[dim]], self.offset)
