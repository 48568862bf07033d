"""conv2d on numpy through llvm_conv's compiled indexed GEMM: no column matrix, the bias
and activation applied as each output tile is stored, the work in pieces taken by the
caller and llvm_spin's spinning helpers (no Python, no GIL between them).

The kernel needs every tap of every output position at one offset from the position
(llvm_conv's koff):

- a 1 x 1 stride-1 convolution without padding reads the input's channel planes where
  they lie and writes the output's rows in place;
- a stride-1 one whose output is its input's size does too, on AVX-512 (SAME), each
  tap's lanes that fall in the padding masked off by the kernel;
- any other reads a phase block of the input: zero-bordered, split by row and column
  remainder modulo the stride (one phase for stride 1), each phase's rows as wide as the
  output's plus the kernel's reach over the stride. An output position (y, x) is then
  y * wide + x, and tap (c, dy, dx) lies at phase (dy % sh, dx % sw), channel c,
  (dy // sh) * wide + dx // sw from it, for every position. The kernel computes every
  column of those rows (the reach's extra columns too: 2 of 82 for an 80-wide 3 x 3 map)
  into a scratch, and each piece copies its output columns from there into the output.

A piece is an image's (and group's) output rows [y0, y1) for output channels [r0, r1):
its weights (at most PIECE_WEIGHT_BYTES) and its part of the block (about PIECE_INPUT_BYTES)
stay in a core's L2 cache. Each output is one sum over its taps in order, so the bits
never depend on the pieces or the threads.
"""

import functools
import itertools
from typing import NamedTuple

from .addresses import address
from .array_fast import apply_over
from .llvm_conv import ACTIVATIONS, SAME_TAPS, piece_table

# a piece's weights and its rows of the input block (L2: 1.25-2 MiB a core on the Intel
# hosts, 512 KiB-1 MiB on AMD)
PIECE_WEIGHT_BYTES = 256 << 10
PIECE_INPUT_BYTES = 384 << 10
# a piece computes at least this many positions (where the map has them), so the kernel's
# tiles of 48 run full
MIN_PIECE_POSITIONS = 192
# A stride-1 convolution whose output is its input's size reads the input where it lies,
# each tap's lanes in the padding masked off by the kernel, on CPUs whose kernel masks
# cheaply (llvm_conv: AVX-512): no zero-bordered copy, no copy of the output columns.
# (Strided ones the same way, over borderless phases, ran no faster: YOLO's 3 x 3
# stride-2 layers 2.26-3.47 ms either way on two threads, yolov8n 100.4 bordered
# against 104.8 masked, interleaved.)
SAME = True
# bytes of the phase block a piece of its split writes
PHASE_PIECE_BYTES = 64 << 10
# pieces per thread where the map has them, so a thread that gets its core late takes fewer
PIECES_PER_THREAD = 4


def eligible(x, w, stride, padding, dilation):
    """Whether the kernels take this convolution (asked before they are built: a model
    with no such convolution never builds them). Not one whose output rows are one
    position wide (a conv1d that array_conv runs with its axes swapped): its phase rows
    of one element each made the split and the pieces slower than im2col + OpenBLAS
    (Whisper base's 512 x 3000 stride-2 conv: 17.3-26.6 ms against 13.2-13.5)."""
    ow = (x.shape[3] + 2 * padding[1] - w.shape[3]) // stride[1] + 1
    return x.dtype == w.dtype == "float32" and tuple(dilation) == (1, 1) and ow > 1


def conv2d(xp, kernels, x, w, bias, stride, padding, groups, activation, threads_for, share):
    """x (N, C, H, W), w (O, C/groups, KH, KW), bias (O,) or None, float32; the (N, O,
    OH, OW) result. threads_for(multiply_adds) says how many threads the work may take;
    share(fn, threads) calls fn(t) for t < threads, each on a thread of its own (CPUs
    without llvm_spin's helpers)."""
    n, _, h, width = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw) = stride, padding
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (width + 2 * pw - kw) // sw + 1
    out = xp.empty((n, o, oh, ow), x.dtype)
    if out.size == 0:
        return out
    threads = (threads_for(out.size * cg * kh * kw), threads_for(x.size))
    g = _geometry(x.shape, w.shape, (sh, sw), (ph, pw), groups, kernels.rows, kernels.chunk,
                  threads, _sizes(), SAME and kernels.same)  # fmt: skip
    wmat, shift = _weights(xp, w, bias)
    x = xp.ascontiguousarray(x)
    if g.phases is None:  # a 1 x 1 convolution reads the input where it lies
        src = x
    else:
        src = xp.empty(g.block, x.dtype)
        kernels.split_phases(g.phases, x, src, threads[1], share)
    scratch = xp.empty(max(1, threads[0] * g.per_thread), x.dtype)
    arrays = tuple(address(a) for a in (src, g.koff, wmat, shift, scratch, out))
    kernels.run_pieces(_fused(activation), g.table, arrays, threads[0], share)
    _activate_after(xp, activation, out)
    return out


def takes_parts(xs, w, stride, padding, dilation, groups):
    """Whether conv2d_cat takes a convolution of the concatenation of xs: a 1 x 1 one of
    stride 1 without padding (YOLO's C2f and SPPF ends), float32."""
    return (
        tuple(w.shape[2:]) == (1, 1)
        and tuple(stride) == tuple(dilation) == (1, 1)
        and tuple(padding) == (0, 0)
        and groups == 1
        and all(x.dtype == w.dtype == "float32" for x in xs)
    )


def conv2d_cat(xp, kernels, xs, w, bias, activation, threads_for, share):
    """The 1 x 1 convolution (takes_parts) of the channel concatenation of xs (arrays
    (N, C_j, H, W)), each part read where it lies: a tap's offset (koff) may point into
    any part, counted from the first part's image (an image at a time: the parts' images
    lie apart by their own channel counts). The same sums as conv2d's over the joined
    array, so the same bits."""
    n, _, h, width = xs[0].shape
    c, o = sum(x.shape[1] for x in xs), w.shape[0]
    out = xp.empty((n, o, h, width), xs[0].dtype)
    if out.size == 0:
        return out
    xs = [xp.ascontiguousarray(x) for x in xs]
    plane, item = h * width, out.itemsize
    threads = (threads_for(out.size * c), 1)
    g = _geometry((1, c, h, width), tuple(w.shape), (1, 1), (0, 0), 1, kernels.rows,
                  kernels.chunk, threads, _sizes(), False)  # fmt: skip
    wmat, shift = _weights(xp, w, bias)
    scratch = xp.empty(max(1, threads[0] * g.per_thread), out.dtype)
    for i in range(n):
        starts = [address(x) + i * x.shape[1] * plane * item for x in xs]
        koff = xp.concatenate(
            [(at - starts[0]) // item + xp.arange(x.shape[1], dtype=xp.int64) * plane
             for at, x in zip(starts, xs, strict=True)]
        )  # fmt: skip
        image = address(out) + i * o * plane * item
        arrays = (starts[0], address(koff), address(wmat), address(shift), address(scratch), image)
        kernels.run_pieces(_fused(activation), g.table, arrays, threads[0], share)
    _activate_after(xp, activation, out)
    return out


def _sizes():
    """The piece sizes, a key of _geometry's (tests change them)."""
    return (PIECE_WEIGHT_BYTES, PIECE_INPUT_BYTES, MIN_PIECE_POSITIONS, PHASE_PIECE_BYTES)


def _weights(xp, w, bias):
    """w as (O, k) rows and the bias (zeros where None), contiguous float32."""
    o = w.shape[0]
    wmat = xp.ascontiguousarray(w).reshape(o, -1)
    return wmat, xp.zeros(o, w.dtype) if bias is None else xp.ascontiguousarray(bias, dtype=w.dtype)


def _fused(activation):
    """The activation the kernel applies: the conv's own where it builds it, else none."""
    return activation if activation is None or activation in ACTIVATIONS else None


def _activate_after(xp, activation, out):
    """An activation the kernel does not build (YOLO's class scores' sigmoid): the op's
    own pass over the output, its bits those of the op on the convolution's result (the
    three class convolutions of a yolov8n forward, 80 channels at 80^2, 40^2 and 20^2,
    took ~4 ms through im2col with numba's sigmoid)."""
    if _fused(activation) == activation:
        return
    flat = out.reshape(-1)
    with xp.errstate(all="ignore"):
        apply_over(xp, activation, flat, [xp.empty_like(flat) for _ in range(2)])


class _Geometry(NamedTuple):
    """What a convolution's geometry decides (array_conv_direct._geometry)."""

    koff: object  # the taps' offsets (int64)
    table: object  # the pieces' table (llvm_conv.piece_table)
    per_thread: int  # scratch floats a thread
    block: tuple | None  # the phase block's shape; None for a 1 x 1 convolution's input
    phases: object  # the phase split's table, or None
    offsets: object  # a masked convolution's taps' (row, column) offsets (the table's)


@functools.lru_cache(maxsize=512)
def _geometry(xshape, wshape, stride, padding, groups, tile_rows, chunk, threads, sizes, masking):
    """The pieces, offsets and scratch of a convolution of these shapes on (threads for
    its products, for its phase split), with the piece sizes `sizes` (the module's, as
    a key): a model's layers come back every forward, planned once."""
    import numpy as np

    n, c, h, width = xshape
    o, cg, kh, kw = wshape
    (sh, sw), (ph, pw) = stride, padding
    weight_bytes, input_bytes, min_positions, phase_bytes = sizes
    oh = (h + 2 * ph - kh) // sh + 1
    ow = (width + 2 * pw - kw) // sw + 1
    og, k = o // groups, cg * kh * kw
    phases, block, same, offsets = None, None, (0, 0, 0), None
    pointwise = kh == kw == sh == sw == 1 and not (ph or pw)
    if pointwise:
        wide, plane, image = ow, h * width, c * h * width
        koff = np.arange(cg, dtype=np.int64) * plane
        copy = 0
    elif masking and (sh, sw) == (1, 1) and (oh, ow) == (h, width) and kh * kw <= SAME_TAPS:
        # read where it lies, each tap's lanes in the padding masked off by the kernel:
        # tap (dy, dx) at row offset dy - ph, column offset dx - pw from the output's
        wide, plane, image = ow, h * width, c * h * width
        ry, rx = np.meshgrid(np.arange(kh) - ph, np.arange(kw) - pw, indexing="ij")
        tap = (ry * width + rx).reshape(1, -1)
        koff = np.ascontiguousarray(
            (np.arange(cg, dtype=np.int64)[:, None] * plane + tap).reshape(-1), dtype=np.int64
        )
        offsets = np.ascontiguousarray(np.stack([ry.ravel(), rx.ravel()], 1).ravel(), np.int64)
        same = (kh * kw, h, offsets.ctypes.data)
        copy = 0
    else:
        wide = ow + (kw - 1) // sw  # a phase row: the output's columns, the kernel's reach
        rows = oh + (kh - 1) // sh
        plane = rows * wide + (kw - 1) // sw  # the last row's extra columns read this far
        image = sh * sw * c * plane
        block = (n, sh * sw, c, plane)
        phases = _phase_table(xshape, stride, padding, rows, wide, plane, phase_bytes)
        koff = tap_offsets(np, cg, (kh, kw), stride, wide, c * plane, plane)
        copy = 1
    row_bytes = cg * (1 if block is None else sh * sw) * wide * 4  # an output row reads
    pieces = []
    for i, gi in itertools.product(range(n), range(groups)):
        x_at = i * image + gi * cg * plane
        for r0, r1 in _channel_spans(gi * og, og, k * 4, tile_rows, weight_bytes):
            for y0, y1 in _row_spans(oh, wide, row_bytes, input_bytes, min_positions):
                pieces.append((x_at, i * o * oh * ow, y0, y1, r0, r1))
    pieces = _finer(pieces, threads[0], wide, min_positions, tile_rows)
    # each thread's scratch: for a 1 x 1 convolution a panel, the kernel's chunk of
    # positions of every tap one after another (its taps are k channel planes apart, k
    # streams from L2 for every tile of rows: yolov8n 93.6 -> 90.2 ms, yolov8s 222 ->
    # 215, median of 10 and 6 interleaved; panels for k x k ones too, whose taps share
    # cache lines, took 100.9 and 255.6); else the largest piece's rows of wide positions
    panel = k * chunk if pointwise else 0
    largest = max((r1 - r0) * (y1 - y0) * wide for _, _, y0, y1, r0, r1 in pieces)
    per_thread = panel + (largest if copy else 0)
    header = (k, k, per_thread, oh * ow, wide, ow, copy, panel, *same)
    table = piece_table(pieces, header)
    return _Geometry(koff, table, per_thread, block, phases, offsets)


def _channel_spans(first, count, row_bytes, tile, weight_bytes):
    """Output channel ranges of about weight_bytes of weights, multiples of the kernel's
    tile of rows but the last."""
    per = max(tile, weight_bytes // row_bytes // tile * tile)
    parts = -(-count // per)
    even = -(-count // parts)
    per = -(-even // tile) * tile  # even parts, in whole tiles
    return [(first + a, first + min(count, a + per)) for a in range(0, count, per)]


def _row_spans(oh, wide, row_bytes, input_bytes, min_positions):
    """Output row ranges reading about input_bytes of the block, of at least
    min_positions positions."""
    per = max(1, input_bytes // row_bytes, -(-min_positions // wide))
    parts = -(-oh // min(oh, per))
    return [(oh * j // parts, oh * (j + 1) // parts) for j in range(parts)]


def _finer(pieces, threads, wide, min_positions, tile):
    """The pieces cut finer while there are fewer than PIECES_PER_THREAD a thread: their
    output channels halved (in whole tiles of the kernel's rows) while each half keeps a
    tile, then their row ranges while each half keeps min_positions / 2 positions.
    Channels first: a piece's positions end in a part-filled chunk of the kernel's (a
    20 x 20 map's 400 positions in four pieces of 100 filled 2.1 chunks of 48 in 3)."""
    while threads > 1 and len(pieces) < PIECES_PER_THREAD * threads:
        finer = _halved(pieces, lambda p: _channel_halves(p, tile))
        if finer is None:
            finer = _halved(pieces, lambda p: _row_halves(p, wide, min_positions))
        if finer is None:
            break
        pieces = finer
    return pieces


def _halved(pieces, halves):
    """Every piece's halves (halves(piece): two pieces, or None), or None where one
    piece has none."""
    out = []
    for piece in pieces:
        two = halves(piece)
        if two is None:
            return None
        out += two
    return out


def _channel_halves(piece, tile):
    x_at, o_at, y0, y1, r0, r1 = piece
    mid = r0 + -(-((r1 - r0) // 2) // tile) * tile
    if mid - r0 < tile or r1 - mid < tile:
        return None
    return [(x_at, o_at, y0, y1, r0, mid), (x_at, o_at, y0, y1, mid, r1)]


def _row_halves(piece, wide, min_positions):
    x_at, o_at, y0, y1, r0, r1 = piece
    mid = (y0 + y1) // 2
    if (mid - y0) * wide * 2 < min_positions or mid == y0:
        return None
    return [(x_at, o_at, y0, mid, r0, r1), (x_at, o_at, mid, y1, r0, r1)]


def tap_offsets(xp, cg, kernel, stride, wide, phase_stride, plane):
    """koff (int64, cg * kh * kw) in w's order: tap (c, dy, dx) at phase (dy % sh,
    dx % sw), channel c, (dy // sh) * wide + dx // sw."""
    (kh, kw), (sh, sw) = kernel, stride
    dy = xp.arange(kh, dtype=xp.int64)[:, None]
    dx = xp.arange(kw, dtype=xp.int64)[None, :]
    tap = ((dy % sh) * sw + dx % sw) * phase_stride + (dy // sh) * wide + dx // sw
    channel = xp.arange(cg, dtype=xp.int64)[:, None] * plane
    return xp.ascontiguousarray((channel + tap.reshape(1, -1)).reshape(-1))


def _phase_table(xshape, stride, padding, rows, wide, plane, piece_bytes):
    """The phase split's pieces table (llvm_conv.piece_table): an image's channels,
    about piece_bytes of the block a piece."""
    n, c, h, width = xshape
    (sh, sw), (ph, pw) = stride, padding
    per = max(1, piece_bytes // (sh * sw * plane * 4))  # channels a piece
    image = sh * sw * c * plane
    pieces = [
        (i * c * h * width, i * image, c0, min(c, c0 + per))
        for i in range(n)
        for c0 in range(0, c, per)
    ]
    return piece_table(pieces, (h, width, sh, sw, ph, pw, rows, wide, plane, c))
