"""numpy's conv2d through llvm_conv's direct kernel: bands of output rows over
row_parallel's threads, each band's input padded (and split into stride phases) into a
buffer of its own, the kernel writing bias + activation straight into the output.

A 1x1 stride-1 convolution without padding takes its plane as one long row of pixels,
cut into bands a multiple of the kernel's tile wide, each copied so that its channels
do not lie a multiple of 4 KiB apart.

Each output's value does not depend on the bands (llvm_conv), so bands are sized for the
cache and the threads alone: about BAND_BYTES of padded input, and at least two per
image where it has the rows.
"""

import itertools

from . import llvm_conv
from .row_parallel import run_rows, workers

CACHE_LINE_FLOATS = 16
# Bytes of one band's padded input: it is read once per block of 6 output channels, so
# it should stay in a core's L2 (512 KiB on Zen 3) beside the weights.
BAND_BYTES = 192 << 10


def eligible(x, w, stride, padding, dilation, groups, activation):
    """Whether the kernel takes this convolution (float32, one group, no dilation, a
    square stride of 1 or 2, an activation it has)."""
    return (
        x.dtype == w.dtype == "float32"
        and groups == 1
        and tuple(dilation) == (1, 1)
        and stride[0] == stride[1] in (1, 2)
        and activation in llvm_conv.ACTIVATIONS
        and x.shape[0] > 0
        and x.shape[1] > 0
        and w.shape[0] > 0
    )


def conv2d(xp, kernels, x, w, bias, stride, padding, activation=None):
    """The (N, O, OH, OW) convolution of x (N, C, H, W) float32 by w (O, C, KH, KW), bias
    (O,) or None, with `activation` fused, or None where the kernel for this shape could
    not be built (the caller takes its other path)."""
    n, c, h, width = x.shape
    o, _, kh, kw = w.shape
    s = stride[0]
    ph, pw = padding
    fn = kernels.get(kh, kw, s, activation)
    if fn is None:
        return None
    oh = (h + 2 * ph - kh) // s + 1
    ow = (width + 2 * pw - kw) // s + 1
    out = xp.empty((n, o, oh, ow), xp.float32)
    if out.size == 0:
        return out
    w = xp.ascontiguousarray(w)
    bias = xp.zeros(o, xp.float32) if bias is None else xp.ascontiguousarray(bias)
    blocks = -(-o // llvm_conv.OB)
    tile = kernels.tile
    if kh == kw == s == 1 and not (ph or pw):
        pieces = _pointwise_pieces(xp, x, n, c, h * width, tile)

        def run_piece(i, p0, p1):
            src, wq = _pointwise_input(xp, x[i], p0, p1, tile)
            dst = out[i].reshape(o, -1)[:, p0:]
            fn(src.ctypes.data, 1, wq, c, w.ctypes.data, bias.ctypes.data, dst.ctypes.data,
               h * width, 0, p1 - p0, 0, 1, 0, blocks, o)  # fmt: skip

    else:
        wq = -(-ow // tile) * tile + (kw - 1) // s  # a tile past the row's end stays inside
        per_row = c * s * s * wq * x.itemsize
        rows = max(1, min(oh, BAND_BYTES // per_row, -(-oh // 2)))
        pieces = [(i, r0, r1) for i in range(n) for r0, r1 in _spans(oh, rows)]

        def run_piece(i, r0, r1):
            band = _padded_band(xp, x[i], r0, r1, s, kh, ph, pw, wq)
            dst = out[i, :, r0:]
            fn(band.ctypes.data, band.shape[1], wq, c, w.ctypes.data, bias.ctypes.data,
               dst.ctypes.data, oh * ow, ow, ow, 0, r1 - r0, 0, blocks, o)  # fmt: skip

    def run(start, stop):
        for piece in pieces[start:stop]:
            run_piece(*piece)

    per_piece = blocks * llvm_conv.OB * c * kh * kw * max(_width(p) for p in pieces)
    run_rows(run, len(pieces), per_piece, blas_free=True, pieces=len(pieces))
    return out


def _width(piece):
    return piece[2] - piece[1]


def _spans(size, step):
    return list(itertools.pairwise([*range(0, size, step), size]))


def _pointwise_pieces(xp, x, n, c, pixels, tile):
    """(image, first pixel, end) bands of a flattened plane: a multiple of the tile wide,
    about BAND_BYTES of input each, and at least one per thread."""
    step = max(tile, BAND_BYTES // (c * x.itemsize) // tile * tile)
    per_thread = -(-pixels // workers(blas_free=True))
    step = min(step, max(tile, -(-per_thread // tile) * tile))
    return [(i, p0, p1) for i in range(n) for p0, p1 in _spans(pixels, step)]


def _pointwise_input(xp, plane, p0, p1, tile):
    """(input, channel stride) for pixels [p0, p1) of one image's (C, H, W) plane: a copy
    whose channels lie a tile-multiple plus one cache line apart, zeros past p1. Read in
    place, a plane's channels lie H * W floats apart, and at 160 x 160 that is a multiple
    of 4 KiB: all of a tile's input channels fell in one set of the L1 cache and missed
    it (one core, 64 -> 64 at 160^2: 7.5 ms in place against 3.3 copied)."""
    c = plane.shape[0]
    width = -(-(p1 - p0) // tile) * tile + CACHE_LINE_FLOATS
    buf = xp.empty((c, width), xp.float32)
    buf[:, : p1 - p0] = plane.reshape(c, -1)[:, p0:p1]
    buf[:, p1 - p0 :] = 0
    return buf, width


def _padded_band(xp, plane, r0, r1, s, kh, ph, pw, wq):
    """The input of output rows [r0, r1) of one image's (C, H, W) plane, zero-padded, as
    [C][rows][s][wq]: padded column q * s + p at [p][q]."""
    c, h, width = plane.shape
    rows = (r1 - r0 - 1) * s + kh
    band = xp.zeros((c, rows, s, wq), xp.float32)
    top = r0 * s - ph  # the input row of the band's first row
    a, z = max(0, -top), min(rows, h - top)  # the band's rows that hold input
    if a >= z:
        return band
    for p in range(s):
        # padded column q * s + p is input column q * s + p - pw
        q0 = max(0, -(-(pw - p) // s))
        q1 = min(wq, (width - 1 + pw - p) // s + 1)
        if q0 >= q1:
            continue
        first = q0 * s + p - pw
        band[:, a:z, p, q0:q1] = plane[
            :, top + a : top + z, first : first + (q1 - q0 - 1) * s + 1 : s
        ]
    return band
