"""The array backend's row-wise fused ops: a linear layer's epilogue, layer/RMS norm and
softmax over the last dim, computed block by block in place.

Each block is a few rows (about BLOCK elements), so a step's output is still in the
core's cache when the next step reads it, and no step allocates a full-size temporary
(fresh pages cost page faults). On numpy the blocks are spread over the cores by
row_parallel.run_rows. Rows are independent: the epilogue and the norms do the same
arithmetic as whole-array forms, step for step, so their results do not depend on the
block size or the number of threads; softmax shifts a row by 0 or by its own maximum,
decided by that row alone (softmax_last_dim), so it does not either.
"""

import contextlib

from . import llvm_norm
from .array_fast import apply_over
from .row_parallel import MIN_PARALLEL_ELEMENTS, run_rows

# Elements per block (1 MiB of f32). Each numpy call takes the GIL, so two threads making
# many small calls wait on each other: the 1130 x 1536 GELU epilogue on two threads took
# 3.2 ms in blocks of 2^16, 2.0 ms in blocks of 2^18 (one thread: 2.5 ms at its best).
BLOCK = 1 << 18


def _for_blocks(xp, rows, cols, body, scratch=0, dtype=None, quiet=True):
    """body(r0, r1, scratch) over [0, rows) in blocks of ~BLOCK elements, on all cores for
    numpy; cupy (one device, its own parallelism) takes the whole range at once. `scratch`
    is that many 1-D arrays of `dtype` per thread, each as long as a block. `quiet`: the
    body runs under numpy's errstate(all="ignore") (numpy's own arithmetic); a body of
    compiled calls needs none, and a decode step's row is spared setting it."""
    if xp.__name__ != "numpy":
        if rows:
            body(0, rows, [xp.empty(rows * cols, dtype) for _ in range(scratch)])
        return
    step = max(1, BLOCK // max(cols, 1))
    if rows <= step and rows * cols < MIN_PARALLEL_ELEMENTS:
        # One block no thread would share (a decode step's rows): run it here, without
        # run_rows' hand-off closures.
        with _errors_ignored(xp, quiet):
            body(0, rows, [xp.empty(rows * cols, dtype) for _ in range(scratch)])
        return

    def ranges(start, stop):
        buffers = [xp.empty(min(step, stop - start) * cols, dtype) for _ in range(scratch)]
        # numpy's error state is per thread (a context variable): set it in each one.
        with _errors_ignored(xp, quiet):
            for r in range(start, stop, step):
                body(r, min(r + step, stop), buffers)

    run_rows(ranges, rows, cols)


def _errors_ignored(xp, quiet):
    return xp.errstate(all="ignore") if quiet else contextlib.nullcontext()


def linear_epilogue(xp, y, bias, activation, residual):
    """y (rows, cols), a fresh GEMM output, becomes activation(y + bias) + residual in
    place; bias (cols,) and residual (rows, cols) may be None."""
    rows, cols = y.shape
    if bias is None and activation is None and residual is None:
        return y

    def body(r0, r1, scratch):
        block = y[r0:r1]
        if bias is not None:
            block += bias
        if activation is not None:
            n = (r1 - r0) * cols
            apply_over(xp, activation, block.reshape(-1), [s[:n] for s in scratch])
        if residual is not None:
            block += residual[r0:r1]

    _for_blocks(xp, rows, cols, body, 2 if activation is not None else 0, y.dtype)
    return y


def _mean_last(xp, v, cols):
    """The mean over v's last dim (kept): on numpy, np.mean's own steps without its Python
    wrapper (a decode step's norms are short rows, where that wrapper was most of the
    cost): the sum, then the division, which np.mean runs in f64 and rounds once to f32,
    the same bits as this f32 division. Other array modules take their own mean."""
    if xp.__name__ != "numpy":
        return xp.mean(v, axis=-1, keepdims=True)
    total = xp.add.reduce(v, axis=-1, keepdims=True)
    total /= cols
    return total


def norm_last_dim(xp, x, weight, bias, eps, rms, residual=None):
    """Layer norm (or RMS norm) of x (+ residual) over its last dim, into a fresh array."""
    cols = x.shape[-1]
    x2 = x.reshape(-1, cols)
    r2 = residual.reshape(-1, cols) if residual is not None else None
    out = xp.empty(x2.shape, x.dtype)
    compiled = llvm_norm.for_rows(xp, x2, r2, weight, bias)
    if compiled is not None:  # one compiled pass a row (llvm_norm), the blocks as below

        def rows(r0, r1, scratch):
            part = None if r2 is None else r2[r0:r1]
            compiled.norm(x2[r0:r1], out[r0:r1], weight, bias, eps, rms, part)

        _for_blocks(xp, x2.shape[0], cols, rows, quiet=False)
        return out.reshape(x.shape)

    def body(r0, r1, scratch):
        xb, y = x2[r0:r1], out[r0:r1]
        if r2 is not None:
            xb = xp.add(xb, r2[r0:r1], out=y)  # the sum lives in the output block
        if rms:
            var = _mean_last(xp, xb * xb, cols)
            xp.multiply(xb, 1.0 / xp.sqrt(var + eps), out=y)
        else:
            xp.subtract(xb, _mean_last(xp, xb, cols), out=y)
            var = _mean_last(xp, y * y, cols)
            y *= 1.0 / xp.sqrt(var + eps)
        if weight is not None:
            y *= weight
        if bias is not None:
            y += bias

    _for_blocks(xp, x2.shape[0], cols, body)
    return out.reshape(x.shape)


# Rows whose exponentials, unshifted, sum below this (e^-60: each row keeps ~26 orders of
# magnitude above f32's denormals) or overflow are redone shifted by their own maximum.
SHIFT_FLOOR = 8.7e-27


def softmax_last_dim(xp, x, log):
    """Softmax (or log-softmax) of x over its last dim, into a fresh array.

    Softmax is the same for any shift of a row; the usual shift is the row's maximum, but
    a maximum over short rows (attention scores: a few dozen columns) is numpy's slowest
    reduction (~2 ns/element, 5x a full-block max). So rows are not shifted where their
    exponentials stay in range (attention scores and logits nearly always do): only rows
    whose sum overflows, is not finite or falls under SHIFT_FLOOR are redone shifted by
    their own maximum. Either way a row's result depends on that row alone, so the same
    values give the same bits in any tensor, block or thread split. Log-softmax keeps
    the row maximum: x - log(sum) would cancel digits for a row far from 0, and
    log-probabilities are read to the last one."""
    cols = x.shape[-1]
    x2 = x.reshape(-1, cols)
    out = xp.empty(x2.shape, x.dtype)

    def body(r0, r1, scratch):
        softmax_rows(xp, x2[r0:r1], out[r0:r1], log)

    _for_blocks(xp, x2.shape[0], cols, body)
    return out.reshape(x.shape)


def softmax_rows(xp, x, y, log=False):
    """Softmax (or log-softmax) of the rows of the 2-D array x into y, an array of its
    shape that is not x, on the calling thread: softmax_last_dim's arithmetic for one
    block (see there), for a caller that runs its own blocks (array_attention's tiles)."""

    def shifted(xb, yb):
        xp.subtract(xb, xp.max(xb, axis=-1, keepdims=True), out=yb)
        if log:
            yb -= xp.log(xp.sum(xp.exp(yb), axis=-1, keepdims=True))
        else:
            xp.exp(yb, out=yb)
            yb /= xp.sum(yb, axis=-1, keepdims=True)

    if log:
        shifted(x, y)
        return
    xp.exp(x, out=y)
    total = xp.sum(y, axis=-1, keepdims=True)
    redo = ~(total[:, 0] >= SHIFT_FLOOR) | ~xp.isfinite(total[:, 0])
    again = bool(redo.any())
    if again:
        total[redo] = 1.0  # those rows are redone below
    y /= total
    if again:
        rows = xp.nonzero(redo)[0]
        part = xp.empty((rows.size, x.shape[-1]), x.dtype)
        shifted(x[rows], part)
        y[rows] = part
