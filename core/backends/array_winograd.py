"""Winograd F(2x2, 3x3) for numpy's stride-1 3x3 convolutions: 16 multiplies per 2x2
output tile and input channel instead of 36.

Each 4x4 input tile d (stride 2, overlapping by 2) becomes V = B^T d B, each 3x3 kernel
g becomes U = G g G^T (4x4; at every call, since the backend is handed the weights each
time), the 16 positions of the tile multiply as 16 GEMMs M[k] = U[k] (O, C) @ V[k]
(C, tiles), and each tile's 2x2 outputs are A^T M A. B, G and
A hold only 0, +-1 and 1/2, so the transforms are adds and subtracts, one numba pass over
a band's tiles each (array_winograd_jit; numpy's passes over stride-2 views cost more
than the GEMMs saved). So it runs only where array_conv already uses numba, for the
SiLU/sigmoid epilogue of a float32 convolution.

Measured, one core, ms of CPU per layer, im2col -> Winograd (same process, interleaved,
the 2-core host under load): 16->16 at 320^2 19.5 -> 14.8, 32->32 at 160^2 11.6 -> 8.8,
64->64 at 80^2 8.5 -> 5.8, 64->64 at 160^2 33.7 -> 23.0, 128->128 at 80^2 33.0 -> 20.4,
at 40^2 9.3 -> 7.2, at 20^2 2.7 -> 2.7 and 256->256 at 20^2 12.5 -> 12.1 (100 tiles:
the 16 GEMMs' columns too few to win, hence MIN_PIXELS). Against float64, the f32
error of a 128->128 layer stays near the direct product's (~4e-7 of the largest output;
tests/test_conv_winograd.py).

Bands are tile rows of the output (two output rows each), their edges from array_conv's
_band_edges over the tile rows: they depend on the plane alone, so the bits of one image
do not depend on the thread count or the batch. A band's buffers are about BAND_BYTES
of transformed input (16 C x tiles) plus the products (16 O x tiles).
"""

import itertools


def eligible(x, w, stride, padding, dilation, groups):
    """Stride-1, dilation-1, padding-1 3x3 convolutions of one group, with enough
    channels for the 16 GEMMs (K = C) to run near BLAS's speed."""
    o, cg, kh, kw = w.shape
    return (
        kh == kw == 3
        and tuple(stride) == (1, 1)
        and tuple(dilation) == (1, 1)
        and tuple(padding) == (1, 1)
        and groups == 1
        and cg >= MIN_CHANNELS
        and o >= MIN_CHANNELS
        and x.shape[2] * x.shape[3] >= MIN_PIXELS
    )


# Below this many input (or output) channels the GEMMs' short K runs BLAS slowly
MIN_CHANNELS = 16
# Below this many pixels a plane has too few tiles for the 16 GEMMs' columns
MIN_PIXELS = 40 * 40
# at least this many tiles per band (the GEMMs' columns), as array_conv's MIN_BAND_COLUMNS
MIN_BAND_TILES = 256


def kernel_transform(xp, kernels, w):
    """(16, O, C) contiguous: U = G g G^T of each (o, c) kernel, in w's dtype (one numba
    pass, array_winograd_jit.kernel_transform)."""
    o, c = w.shape[:2]
    u = xp.empty((16, o, c), w.dtype)
    kernels.kernel_transform(xp.ascontiguousarray(w), u)
    return u


def band_plan(oh, ow, c, o, itemsize, band_bytes, edges_of):
    """Bands as (t0, t1) tile-row ranges: about band_bytes of transformed input each,
    edges from edges_of(tile_rows, rows_per_band)."""
    th, tw = -(-oh // 2), -(-ow // 2)
    per_tile_row = 16 * max(c, o) * tw * itemsize
    rows = min(th, max(1, band_bytes // per_tile_row, -(-MIN_BAND_TILES // tw)))
    return list(itertools.pairwise(edges_of(th, rows))), th, tw


def zero_bordered(xp, src, top, rows, left, cols):
    """src (C, H, W)'s rows [top, top + rows) and columns [left, left + cols) as a new
    (C, rows, cols) array, zeros where they fall outside src (a convolution's padding):
    the part inside copied once, each border zeroed once."""
    c, h, width = src.shape
    block = xp.empty((c, rows, cols), src.dtype)
    a, b = min(max(-top, 0), rows), max(min(h - top, rows), 0)  # block rows inside src
    lo, hi = min(max(-left, 0), cols), max(min(width - left, cols), 0)  # columns inside
    block[:, :a] = 0
    block[:, b:] = 0
    if a < b:
        block[:, a:b, :lo] = 0
        block[:, a:b, max(hi, lo) :] = 0
        if lo < hi:
            block[:, a:b, lo:hi] = src[:, top + a : top + b, left + lo : left + hi]
    return block


def band(xp, kernels, src, u, t0, t1, tw):
    """The (O, 2(t1-t0), 2tw) outputs of tile rows [t0, t1) of src (C, H, W), padding 1,
    before bias and activation (rows and columns past the output's size are the caller's
    to crop)."""
    c, nt = src.shape[0], t1 - t0
    # the band's input rows 2t0-1 .. 2t1 and columns -1 .. 2tw, zeros outside src
    p = zero_bordered(xp, src, 2 * t0 - 1, 2 * nt + 2, -1, 2 * tw + 2)
    v = xp.empty((16, c, nt * tw), src.dtype)
    kernels.input_transform(p, v, nt, tw)
    m = xp.matmul(u, v)  # (16, O, tiles): 16 GEMMs
    y = xp.empty((u.shape[1], 2 * nt, 2 * tw), src.dtype)
    kernels.output_transform(m, y, nt, tw)
    return y
