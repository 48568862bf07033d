"""conv2d on numpy: llvm_conv's compiled indexed GEMM where llvmlite is installed
(array_conv_direct: no column matrix at all; yolov8n 136 -> 89 ms a forward against this
module's path); else im2col a band of output rows at a time, one GEMM per band.

The contract's default (composites.conv2d) builds the whole (Cg*KH*KW, OH*OW) column
matrix and runs one GEMM on BLAS's own threads. For YOLOv8 at 640 that is a 30-60 MB
matrix per layer and a GEMM with few rows (16-128 output channels) over 10^4-10^5
columns, which numpy's OpenBLAS ran at 2-9 GFLOP/s on two threads of the loaded 2-core
machine (its threads wait on each other at every block: 32 x 288 @ 288 x 25600 took
71 ms on two threads, 15 ms on one, at load 10). Here each band's columns
(about BAND_BYTES) are built by KH*KW strided copies of the input (zeros where a tap
falls in the padding) and stay in
cache for their GEMM; the bands run on row_parallel's threads with BLAS on one thread
each, and the bias is added as the band's product is copied into the output.

Measured on single yolov8 layers at 640 (load 6-10 on the 2-core host, best of 3, ms of
wall clock; onnxruntime on 2 threads in the same run): 32->32 3x3 at 160^2 96 -> 40 ms
(ort 20), 64->64 3x3 at 80^2 80 -> 32 (ort 17), 128->128 3x3 at 40^2 172 -> 24 (ort 19),
3->16 3x3 s2 at 640^2 139 -> 15 (ort 16), 32->32 1x1 at 160^2 64 -> 2.5 (ort 2.1). The
whole yolov8n forward: 3.7 s -> 0.45-0.7 s. Band size, ms of CPU for yolov8n: 256 KiB
500, 512 KiB 390-440, 1 MiB 360-410, 2-4 MiB 365-445; at least MIN_BAND_COLUMNS pixels
per band took 256->512 3x3 s2 at 40^2 from 18.7 to 15.3 ms of CPU.

Banding costs the GEMMs nothing: yolov8n's 63 products on one thread ran at 59 GFLOP/s
banded as whole (8.74 GFLOP, 149 vs 148 ms of CPU). Its forward is ~290 ms of CPU, and
it took as long on the clock wherever numpy was imported before ember (row_parallel then
splits nothing, for fear of OpenBLAS's spinning workers), so the bands split regardless
(blas_free): their GEMMs run on one BLAS thread and never wake that pool.

With numba installed (the `ember[jit]` extra), bias and activation are one numba pass
from the band's product into the output (array_conv_jit): numpy's f32 exp/tanh on an
AVX2-only host cost 2.4-3.8 ns an element, and SiLU follows every YOLOv8 convolution
(yolov8n at 640, AMD EPYC, quiet: conv2d 319 -> 237 ms of a forward). SiLU (and GELU)
now take llvm_math's kernel instead where it is built (always beside numba: llvmlite is
numba's compiler): the bias added to the band's product in place, then one vector pass
into the output. numba's loop reads each channel's row of the output as a strided array
and ran scalar there, 2.2 ns an element (0.64 on contiguous rows); the vector pass is
0.44, and the fused SiLU is then the very SiLU Tensor.silu computes (yolov8n forward
180 -> 163 ms median of 10 interleaved rounds, Intel Xeon, 2 threads). (A Winograd
F(2x2, 3x3) path for stride-1 3x3 convolutions, numba transforms around BLAS GEMMs,
ran at ~84 GFLOP/s equivalent on two cores; llvm_conv's direct kernel runs them at
~186, and took over every install that had numba: the Winograd path was removed.)
With llvmlite only a conv1d (an output one position wide: array_conv_direct.eligible)
still comes here.

Stride-2 3x3 convolutions stay im2col: their tap copies are 10-30% of a band's time
(the GEMM the rest), and splitting a band's input into its four even/odd phases first,
so that each tap is a contiguous copy, saved at most 12% of those copies (one core, ms
of CPU a band, taps -> phases: 32->64 at 320^2 0.137 -> 0.145, 64->128 at 160^2 0.280 ->
0.251, 128->256 at 80^2 0.461 -> 0.406, 256->512 at 40^2 0.728 -> 0.672 against a GEMM
of 12.0).
"""

import itertools

from . import array_conv_direct, llvm_conv, llvm_math
from .array_fast import apply_over
from .blas_threads import single_thread_below
from .optional_jit import jit_module
from .row_parallel import run_rows, share_count

# Bytes of one band's column matrix: a few bands fit the 512 KiB L2 + shared L3 here.
BAND_BYTES = 1 << 20
# At least this many output pixels per band, so a deep layer's weight (up to 512 x 4608)
# is not streamed through the cache once per handful of columns.
MIN_BAND_COLUMNS = 512
# float32 convolutions through llvm_conv's compiled kernel where it is built
# (array_conv_direct); False keeps the im2col path (its tests set it)
DIRECT = True

# the activations the numba epilogue takes (array_conv_jit.CODES has the others too, for
# its own tests)
JIT_ACTIVATIONS = ("silu", "sigmoid")


def _epilogue_kernels():
    """array_conv_jit (numba's bias + activation pass), or None without numba or with
    EMBER_JIT=0: numpy's ufuncs then do the epilogue."""
    return jit_module("array_conv_jit")


# Bands per image plane come in multiples of this, so that two threads split a plane's
# bands evenly. A fixed number, not the thread count: the edges decide each band's GEMM,
# and the bits of a result must not depend on how many threads ran it.
BAND_MULTIPLE = 2


def _band_edges(oh, rows):
    """Output-row edges of the bands of one image plane: about `rows` rows each, evenly
    spread (sizes differ by one at most), a multiple of BAND_MULTIPLE in number where the
    plane has the rows. YOLOv8's 40-row maps in bands of 13 made 13+13 | 13+1 rows on two
    threads, and its 20-row maps one band on one thread while the other core idled (a
    fifth of yolov8n's multiply-adds). The edges depend on the plane alone, never on the
    batch or the threads: the same GEMMs, so the same bits."""
    count = -(-oh // rows)
    count = min(oh, -(-count // BAND_MULTIPLE) * BAND_MULTIPLE)
    return [oh * j // count for j in range(count + 1)]


def _zero_bordered(xp, src, top, rows, left, cols):
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


def _band_columns(xp, src, r0, r1, ow, kernel, stride, padding, dilation):
    """The (C, KH, KW, r1 - r0, OW) columns of output rows [r0, r1) of src (C, H, W): the
    band's input rows copied once into a zero-bordered block, then every tap read from it
    through one strided view in one copy. Tap by tap (each tap's covered part copied,
    its padding zeroed) a 3x3 band was ~45 numpy calls under the GIL; the same columns
    this way took yolov8n's im2col layers (stride 2, and 3x3 on maps under 40x40) 17.9
    -> 15.9 ms on two threads, 10-17% a layer (within 5% either way on one)."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    rows = (r1 - 1 - r0) * sh + (kh - 1) * dh + 1
    cols = (ow - 1) * sw + (kw - 1) * dw + 1
    block = _zero_bordered(xp, src, r0 * sh - ph, rows, -pw, cols)
    c = src.shape[0]
    s0, s1, s2 = block.strides
    taps = xp.ndarray(
        (c, kh, kw, r1 - r0, ow), block.dtype, block, 0, (s0, dh * s1, dw * s2, sh * s1, sw * s2)
    )
    return xp.ascontiguousarray(taps)


def _is_numpy(xp):
    return getattr(xp, "__name__", "") == "numpy"


def _threads_for(multiply_adds):
    """threads a convolution of this many multiply-adds may take (row_parallel's rule)"""
    return share_count(multiply_adds, 1, blas_free=True)


def _share(fn, threads):
    """fn(t) for t < threads, on row_parallel's threads (array_conv_direct on CPUs
    without llvm_spin's helpers: each call takes pieces until none is left)"""
    run_rows(lambda start, stop: [fn(t) for t in range(start, stop)], threads, 1, pieces=threads)


def conv2d_cat(xp, xs, w, bias, stride, padding, dilation, groups, activation=None):
    """conv2d of the channel concatenation of xs (arrays (N, C_j, H, W)) by llvm_conv's
    kernel reading each part where it lies (array_conv_direct.conv2d_cat), or None where
    that path does not take it (then the caller makes the concatenation)."""
    if not (
        DIRECT
        and _is_numpy(xp)
        and array_conv_direct.takes_parts(xs, w, stride, padding, dilation, groups)
    ):
        return None
    direct = llvm_conv.kernels()
    if direct is None:
        return None
    return array_conv_direct.conv2d_cat(xp, direct, xs, w, bias, activation, _threads_for, _share)


def conv2d(xp, x, w, bias, stride, padding, dilation, groups, activation=None):
    """x (N, C, H, W), w (O, C/groups, KH, KW), bias (O,) or None, arrays of one float
    dtype; activation a unary op name or None; the (N, O, OH, OW) result as a new
    contiguous array."""
    n, _, h, width = x.shape
    if h == 1 == w.shape[2] and padding[0] == 0 and width > 1:
        # one output row (a conv1d, as Whisper's encoder front runs it): the bands split
        # output rows, so it would be one band on one core (Whisper base's 2.4 GFLOP
        # second conv: ~50 ms). The same convolution with its two spatial axes swapped (a
        # size-1 axis: views, no copy) has a row per output column, split like any map.
        def swap(pair):
            return pair[1], pair[0]

        out = conv2d(
            xp,
            xp.swapaxes(x, 2, 3),
            xp.swapaxes(w, 2, 3),
            bias,
            swap(stride),
            swap(padding),
            swap(dilation),
            groups,
            activation,
        )
        return out.reshape(out.shape[0], out.shape[1], 1, out.shape[2])
    direct = None
    if DIRECT and _is_numpy(xp) and array_conv_direct.eligible(x, w, stride, padding, dilation):
        direct = llvm_conv.kernels()  # built at the first convolution it takes
    if direct is not None:
        return array_conv_direct.conv2d(
            xp, direct, x, w, bias, stride, padding, groups, activation, _threads_for, _share
        )
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    og, k = o // groups, cg * kh * kw
    wmat = xp.ascontiguousarray(w).reshape(groups, og, k)
    out = xp.empty((n, o, oh, ow), x.dtype)
    # A 1x1 stride-1 kernel's columns are the input rows themselves: no copy.
    pointwise = kh == kw == sh == sw == 1 and not (ph or pw)
    # A band pads only its own input rows (_band_columns), on the thread that runs it: a
    # padded copy of the whole input was 16 ms of yolov8n's forward, on the caller's
    # thread alone.
    # numba only where it pays: an exp per element (a bias add or ReLU is as fast in
    # numpy, with the same bits, and importing numba costs ~1 s of CPU and ~120 MB)
    jit = _epilogue_kernels() if x.dtype == xp.float32 and activation in JIT_ACTIVATIONS else None
    code = None if jit is None else jit.CODES[activation]
    # SiLU (and GELU) where llvm_math's kernels are built: the bias added in place, then
    # their vector pass writes the output rows (see the module's note)
    math = llvm_math.for_array(xp, out) if activation in llvm_math.ELEMENTWISE else None
    zeros = xp.zeros(o, x.dtype) if code is not None and bias is None else None
    rows = max(1, BAND_BYTES // (k * ow * x.itemsize), -(-MIN_BAND_COLUMNS // ow))
    edges = _band_edges(oh, min(oh, rows))
    spans = list(itertools.pairwise(edges))
    per_band = og * k * ow * -(-oh // len(spans))  # the largest band's multiply-adds
    bands = [(i, g, r0, r1) for i in range(n) for g in range(groups) for r0, r1 in spans]

    def finish(y, dst, g):
        """bias and activation of group g's band product y (og, rows, ow) into dst"""
        if math is not None:
            rows = y.reshape(og, -1)  # a fresh product: ours to change
            if bias is not None:
                rows += bias[g * og : (g + 1) * og, None]
            # dst's rows of each channel are one contiguous run: (og, rows * ow) is a view
            math.apply(activation, rows, dst.reshape(og, -1))
            return
        if code is not None:
            b = (zeros if bias is None else bias)[g * og : (g + 1) * og]
            jit.bias_activation(y.reshape(og, -1), b, dst.reshape(og, -1), code)
            return
        if bias is not None and activation is None:
            xp.add(y, bias[g * og : (g + 1) * og, None, None], out=dst)
            return
        if bias is not None:
            y += bias[g * og : (g + 1) * og, None, None]
        if activation is not None:
            scratch = [xp.empty(y.size, y.dtype) for _ in range(2)]
            with xp.errstate(all="ignore"):  # numpy's error state is per thread
                apply_over(xp, activation, y.reshape(-1), scratch)
        dst[...] = y

    def band(i, g, r0, r1):
        src = x[i, g * cg : (g + 1) * cg]
        if pointwise:
            cols = src[:, r0:r1].reshape(cg, -1)
        else:
            cols = _band_columns(xp, src, r0, r1, ow, (kh, kw), stride, padding, dilation)
            cols = cols.reshape(k, -1)
        y = (wmat[g] @ cols).reshape(og, r1 - r0, ow)
        finish(y, out[i, g * og : (g + 1) * og, r0:r1], g)

    def run(start, stop):
        # run_rows hands ranges of bands to whichever thread is free (a worker that gets
        # its core late takes fewer); which thread runs a band does not change its GEMM,
        # so neither the bits.
        for j in range(start, stop):
            band(*bands[j])

    # Each band's GEMM is small (about og * 2^18 multiply-adds): BLAS on one thread per
    # band, the bands spread over row_parallel's threads (blas_free: BLAS's own pool
    # stays asleep, so the bands split even where its workers would spin).
    with single_thread_below(0):
        # keyed by the layer's geometry: its own timings decide whether it shares
        key = (x.shape, w.shape, stride, padding, dilation, groups)
        run_rows(run, len(bands), per_band, blas_free=True, pieces=len(bands), key=key)
    return out
