"""A convolution's product as an indexed GEMM, compiled by LLVM (llvm_build): each output
channel's value at each output position is a sum over the input's channels and taps,
read straight from the input where they lie, no column matrix built:

    out[r * ldo + j] = act(bias[r] + sum over t < k of w[r * ldw + t] * x[koff[t] + j])

for rows r < rows and positions j < p. ``koff[t]`` is where tap t (an input channel and a
kernel offset) starts in x, the same for every position (array_conv_direct lays the
input out so). A 1 x 1 convolution's taps are the input's channel planes. A stride-1
one whose output is its input's size ("same") reads the input in place, its taps at
``c * H * W + (dy - ph) * W + dx - pw``, each lane of a tap's load masked off where
the tap falls in the padding (the masks made once a chunk of positions, from each
lane's row and column; AVX-512 only, where a masked load costs a plain one): no copy
of the input, and out written in place. Any other reads the channel planes of a
zero-bordered copy, split by row and column remainder modulo the stride (its phases),
whose rows are as wide as the output's plus the kernel's reach, the positions j
running over that width (the extra columns of each row computed into a thread's
scratch and dropped as the rest is copied out).

The micro-kernel keeps ROWS output channels x VECTORS vectors of positions in registers
(8 x 3 x 16 on AVX-512, 24 of its 32 registers; 6 x 2 x 8 on AVX2), loads the vectors
of x once a tap and broadcasts each channel's weight from w where it lies (packing w
into the tile's order ran no faster: 95-125 against 102-126 GFLOP/s, one core), the
bias and activation applied as the tile is stored (the activation is llvm_math's, so
the bits Tensor.silu gives). A call takes its positions chunk by chunk, each chunk
through every tile of its rows; array_conv_direct cuts the work into pieces whose
weights and taps stay in a core's L2 cache.

Why: the band-by-band im2col + OpenBLAS GEMM ran YOLOv8n's convolutions at 45-60
GFLOP/s on two cores (a copy of the columns, a GEMM, a pass for the bias and SiLU a
band, and Python between them), its stride-1 3 x 3 ones through Winograd at an equivalent
~84. This kernel runs those 3 x 3 convolutions at 102-131 GFLOP/s on one core (the
whole output, bias and SiLU in), 1 x 1 ones at sgemm's speed with the epilogue free.

x, w and out are f32; the sums run over t in order, each output's alone, so the bits
never depend on the band, the chunk or the thread.
"""

import ctypes
import sys

import numpy as np

from . import llvm_spin
from .addresses import address

# taps a channel of a masked call at most (a 7 x 7 kernel's)
SAME_TAPS = 49
# a masked call's words: the taps a channel (0: not masked), the map's width and height,
# the call's first output row, the address of the taps' (row, column) offsets (int64)
SAME_WORDS = 5
# what the epilogue applies (llvm_math's maps), "none" for the bias alone; any other
# activation is array_conv_direct's pass after (each kind is a kernel of its own: a
# build's time and code grow with them)
ACTIVATIONS = ("none", "silu", "gelu")

_P, _I = ctypes.c_void_p, ctypes.c_int64
# (x, koff, k, w, ldw, rows, bias, p, out, ldo, panel, same)
_ARGS = (_P, _P, _I, _P, _I, _I, _P, _I, _P, _I, _P, _P)
# a team's table: the pieces taken, their count, then k, ldw, a thread's scratch floats,
# out's row stride, the positions of a row (wide) and of out's rows (ow), whether to copy
# (wide positions computed into the thread's scratch, the first ow of each copied to
# out; else the kernel writes out itself), the floats of a thread's panel (0: the
# kernel reads x where it lies), and for a masked convolution the taps a channel (0:
# not one), the map's height and the address of the taps' offsets (SAME_WORDS); then
# each piece's words
HEADER = 13
# a piece: x's and out's offsets (elements), output rows [y0, y1), channels [r0, r1)
PIECE_WORDS = 6
# f32 lanes of the phase split's vector copies (LLVM splits them where the CPU's are narrower)
VECTOR_LANES = 16
# the phase split's table: the pieces taken, their count, then the input's H and W, the
# stride, the padding, a phase's rows and their width, a phase channel's elements
# (plane), the input's channels; a piece: an image's offsets in x and in the block, its
# channels [c0, c1)
PHASE_HEADER, PHASE_WORDS = 12, 4


def kernels():
    """The compiled ConvKernels, or None where they cannot be had."""
    from . import llvm_build

    return llvm_build.kernels("llvm_conv")


def tile_of(features):
    """(lanes, rows, vectors) of the micro-kernel for a CPU's LLVM features: its vectors'
    f32 lanes, and a tile that leaves registers for a tap's vectors and a broadcast."""
    if features.get("avx512f", False):
        return 16, 8, 3  # 24 accumulators of 32 zmm registers
    return 8, 6, 2  # AVX2 (16 ymm registers): 12 accumulators, the classic 6 x 16 sgemm tile


def build():
    from . import llvm_build, llvm_math

    triple, _, _, features = llvm_build.host()
    lanes, rows, vectors = tile_of(features)
    team = llvm_spin.supported(triple)
    engine = llvm_build.compile_kernels(
        sys.modules[__name__],
        lambda triple: _ir_module(triple, lanes, rows, vectors, team),
        params=(lanes, rows, vectors, team),
        sources=(llvm_math, llvm_spin),
    )
    return ConvKernels(engine, rows, lanes, vectors, team)


class ConvKernels:
    def __init__(self, engine, rows, lanes, vectors, team):
        self._engine = engine  # owns the machine code
        self.rows = rows  # output channels a tile
        self.chunk = lanes * vectors  # positions a tile
        # "same" convolutions (the padding masked off as the taps are read): where a
        # masked load costs a plain one (AVX-512's mask registers; AVX2's masked moves
        # take a vector register of the 16 the tile needs)
        self.same = lanes == 16
        addr = engine.get_function_address
        self._fns = {
            act: ctypes.CFUNCTYPE(None, *_ARGS)(addr(f"ember_conv_{act}")) for act in ACTIVATIONS
        }
        self._teams = {
            act: _pieces_functions(engine, f"ember_conv_team_{act}", 6, team) for act in ACTIVATIONS
        }
        self._phases = _pieces_functions(engine, "ember_conv_phases", 2, team)

    def split_phases(self, table, x, block, threads, share):
        """The phase block of x into `block` (N, sh * sw, C, plane) by the pieces of
        `table` (piece_table's): phase (a, b)'s channel c holds at row q, column j the
        input at row a - ph + q * sh, column b - pw + j * sw (0 outside the input, and
        0 in the slack after the rows), on `threads` threads as run_pieces shares them."""
        self._team(self._phases, table, (address(x), address(block)), threads, share)

    def run_pieces(self, activation, table, arrays, threads, share):
        """The pieces of one convolution's `table` (piece_table's) with its arrays (x,
        koff, w, bias, scratch, out: the addresses; the scratch holds `threads` times
        the floats a thread), on `threads` threads in all: the caller and llvm_spin's
        helpers, or, on a CPU without them, share(fn, threads) calling fn(t) for t <
        threads on as many threads (row_parallel's), each taking pieces until none is
        left."""
        self._team(self._teams[activation or "none"], table, arrays, threads, share)

    def _team(self, fns, table, arrays, threads, share):
        table = table.copy()  # its first word counts the pieces taken: this run's own
        run, split = fns
        if split is not None or threads <= 1:
            helpers = llvm_spin.process_helpers(threads) if split is not None else None
            llvm_spin.run_team(run, split, helpers, table, *arrays)
            return
        at = address(table)
        share(lambda t: run(t, t + 1, at, *arrays), threads)

    def run(self, activation, x, koff, k, w, ldw, rows, bias, p, out, ldo, panel=None, same=None):
        """The module's sum for `rows` output channels and p positions. x, w, bias and
        out are addresses (ints: a band's part of an array), koff an int64 array of k
        offsets; activation None or one of ACTIVATIONS. The caller sees that every
        x[koff[t] + j] (j < p) lies in x's array and out's rows in out's."""
        self._fns[activation or "none"](
            x, address(koff), k, w, ldw, rows, bias, p, out, ldo, panel,
            address(_NOT_SAME if same is None else same),
        )  # fmt: skip


def piece_table(pieces, header):
    """The int64 table of a convolution's pieces (x offset, out offset, y0, y1, r0, r1)
    with its header (k, ldw, scratch floats a thread, ldo, wide, ow, copy, panel floats:
    the first of a thread's scratch, or 0, then the taps a channel, the map's height and
    the taps' offsets' address of a masked convolution, else zeros), for run_pieces; or
    of a phase split's pieces (x offset, block offset, c0, c1: an image's channels) with
    its header (H, W, sh, sw, ph, pw, rows, wide, plane, C), for split_phases."""
    words = [0, len(pieces), *header]
    for piece in pieces:
        words += piece
    return np.array(words, np.int64)


_NOT_SAME = np.zeros(SAME_WORDS, np.int64)  # a kernel call's "same" words when it is not one


def _pieces_functions(engine, name, pointers, split):
    """(run, split or None) of a pieces function (llvm_spin.add_pieces) taking `pointers`
    pointer arguments after (t0, t1, table)"""
    addr = engine.get_function_address
    args = (_I, _I, _P) + (_P,) * pointers
    run = ctypes.CFUNCTYPE(None, *args)(addr(name))
    return run, ctypes.CFUNCTYPE(_I, _P, _I, *args)(addr(name + "_split")) if split else None


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple, lanes, rows, vectors, team):
    from llvmlite import ir

    from .llvm_ir import new_module

    module = new_module("ember_conv", triple)
    vec = ir.VectorType(ir.FloatType(), lanes)
    for act in ACTIVATIONS:
        kernel = _add_kernel(module, f"ember_conv_{act}", act, vec, rows, vectors)
        _add_team(module, f"ember_conv_team_{act}", kernel, team)
    _add_phases(module, team)
    return module


def _add_phases(module, split):
    """``ember_conv_phases``, a pieces function: each piece's channels, phase by phase
    and row by row (a phase's columns inside the input found once, not a row):
    zeros where the row or column lies in the padding, the input (every sw-th column)
    between; zeros in the slack after the rows. Strides 1 and 2 have loops of their own
    (a constant stride, which LLVM vectorizes)."""
    from llvmlite import ir

    from .llvm_ir import I64, loop, no_alias, splat

    f32 = ir.FloatType()
    pf = f32.as_pointer()

    def piece(b, t, p, table, args):
        x, block = args
        no_alias(x, block)  # lets LLVM vectorize the strided copies
        h, width, sh, sw, ph, pw, rows, wide, plane, channels = (
            b.load(b.gep(table, [I64(2 + i)])) for i in range(PHASE_HEADER - 2)
        )
        at = b.add(I64(PHASE_HEADER), b.mul(p, I64(PHASE_WORDS)))
        x_at, b_at, c0, c1 = (b.load(b.gep(table, [b.add(at, I64(i))])) for i in range(PHASE_WORDS))
        phase_stride = b.mul(channels, plane)

        def zeros(b, dst, lo, hi):
            loop(b, lo, hi, lambda b, j: b.store(f32(0.0), b.gep(dst, [j])), "z")

        def copy(b, read, line, j0, j1, step):
            def one(b, j):
                b.store(b.load(b.gep(read, [b.mul(j, step)])), b.gep(line, [j]))

            loop(b, j0, j1, one, "j")

        def copy_vectors(b, read, line, j0, j1, step):
            """line[j] = read[j * step] for step 1 or 2, VECTOR_LANES at a time (stride 2:
            two vectors read, their even lanes kept), then one at a time; a vector's
            last odd lane (read, not kept) must lie before the row's last element read,
            so with stride 2 the vectors stop one short of j1"""
            vec = ir.VectorType(f32, VECTOR_LANES)
            stop = b.sub(j1, I64(step - 1))
            evens = ir.Constant(
                ir.VectorType(ir.IntType(32), VECTOR_LANES), list(range(0, 2 * VECTOR_LANES, 2))
            )

            def vector(b, j):
                at = b.gep(read, [b.mul(j, I64(step))])
                v = b.load(b.bitcast(at, vec.as_pointer()), align=4)
                if step == 2:
                    w = b.load(b.bitcast(b.gep(at, [I64(VECTOR_LANES)]), vec.as_pointer()), align=4)
                    v = b.shuffle_vector(v, w, evens)
                b.store(v, b.bitcast(b.gep(line, [j]), vec.as_pointer()), align=4)

            count = b.sub(stop, j0)
            whole = b.mul(b.sdiv(count, I64(VECTOR_LANES)), I64(VECTOR_LANES))
            whole = b.select(b.icmp_signed(">", whole, I64(0)), whole, I64(0))
            end = b.add(j0, whole)
            loop(b, j0, end, vector, "jv", step=VECTOR_LANES)
            if step == 1:  # the rest in one masked vector (YOLO's 20-80 wide rows: most)
                lanes = ir.Constant(ir.VectorType(I64, VECTOR_LANES), list(range(VECTOR_LANES)))
                left = splat(b, b.sub(j1, end), ir.VectorType(I64, VECTOR_LANES))
                mask = b.icmp_signed("<", lanes, left)
                masked_load, masked_store = _masked(module, vec)
                at = b.bitcast(b.gep(read, [end]), vec.as_pointer())
                zero = ir.Constant(vec, [0.0] * VECTOR_LANES)
                v = b.call(masked_load, [at, ir.IntType(32)(4), mask, zero])
                to = b.bitcast(b.gep(line, [end]), vec.as_pointer())
                b.call(masked_store, [v, to, ir.IntType(32)(4), mask])
            else:
                copy(b, read, line, end, j1, I64(step))

        def copy_row(b, read, line, j0, j1):
            """line[j] = read[j * sw] for j in [j0, j1)"""
            with b.if_else(b.icmp_signed("==", sw, I64(1))) as (one, other):
                with one:
                    copy_vectors(b, read, line, j0, j1, 1)
                with other, b.if_else(b.icmp_signed("==", sw, I64(2))) as (two, any_):
                    with two:
                        copy_vectors(b, read, line, j0, j1, 2)
                    with any_:
                        copy(b, read, line, j0, j1, sw)

        def channel(b, c):
            src = b.gep(x, [b.add(x_at, b.mul(c, b.mul(h, width)))])
            first = b.gep(block, [b.add(b_at, b.mul(c, plane))])

            def phase(b, ra, ca):
                """phase (ra, ca) of the channel: its columns inside the input found once,
                then row by row"""
                dst = b.gep(first, [b.mul(b.add(b.mul(ra, sw), ca), phase_stride)])
                left = b.sub(ca, pw)  # the input column of the phase's column 0
                j0, j1 = _inside(b, left, sw, wide, width)

                def row(b, q):
                    top = b.add(b.sub(ra, ph), b.mul(q, sh))
                    inside = b.and_(b.icmp_signed(">=", top, I64(0)), b.icmp_signed("<", top, h))
                    line = b.gep(dst, [b.mul(q, wide)])
                    with b.if_else(inside) as (then, otherwise):
                        with then:
                            zeros(b, line, I64(0), j0)
                            read = b.gep(src, [b.add(b.mul(top, width), left)])
                            copy_row(b, read, line, j0, j1)
                            zeros(b, line, j1, wide)
                        with otherwise:
                            zeros(b, line, I64(0), wide)

                loop(b, I64(0), rows, row, "q")
                zeros(b, dst, b.mul(rows, wide), plane)  # the slack

            loop(
                b,
                I64(0),
                sh,
                lambda b, ra: loop(b, I64(0), sw, lambda b, ca: phase(b, ra, ca), "ca"),
                "ra",
            )

        loop(b, c0, c1, channel, "c")

    llvm_spin.add_pieces(module, "ember_conv_phases", [pf, pf], piece, split)


def _inside(b, first, step, count, size):
    """[q0, q1): the q < count whose first + q * step lies in [0, size)"""
    from .llvm_ir import I64

    def clamp(v, lo, hi):
        v = b.select(b.icmp_signed("<", v, lo), lo, v)
        return b.select(b.icmp_signed(">", v, hi), hi, v)

    def ceil_div(a, d):  # a / d rounded up, for d > 0 and any a
        return b.sub(I64(0), _floor_div(b, b.sub(I64(0), a), d))

    q0 = clamp(ceil_div(b.sub(I64(0), first), step), I64(0), count)
    q1 = clamp(ceil_div(b.sub(size, first), step), q0, count)
    return q0, q1


def _floor_div(b, a, d):
    """a / d rounded down, for d > 0"""
    from .llvm_ir import I64

    q = b.sdiv(a, d)
    inexact_negative = b.and_(
        b.icmp_signed("!=", b.srem(a, d), I64(0)), b.icmp_signed("<", a, I64(0))
    )
    return b.select(inexact_negative, b.sub(q, I64(1)), q)


def _add_team(module, name, kernel, split):
    """A pieces function (llvm_spin.add_pieces) whose piece is the kernel over its rows
    and positions, then, where the scratch is not out, its rows' columns under ow copied
    from the scratch's rows (wide apart) into out's (ow apart)."""
    from llvmlite import ir

    from .llvm_ir import I64, loop

    f32 = ir.FloatType()
    pf, pi = f32.as_pointer(), I64.as_pointer()
    i8p = ir.IntType(8).as_pointer()
    memcpy = module.globals.get("llvm.memcpy.p0.p0.i64") or ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [i8p, i8p, I64, ir.IntType(1)]),
        "llvm.memcpy.p0.p0.i64",
    )

    def piece(b, t, p, table, args):
        x, koff, w, bias, scratch, out = args
        k, ldw, per_thread, ldo, wide, ow, copy, panel_floats = (
            b.load(b.gep(table, [I64(2 + i)])) for i in range(8)
        )
        taps, height, offsets = (b.load(b.gep(table, [I64(10 + i)])) for i in range(3))
        at = b.add(I64(HEADER), b.mul(p, I64(PIECE_WORDS)))
        x_at, o_at, y0, y1, r0, r1 = (
            b.load(b.gep(table, [b.add(at, I64(i))])) for i in range(PIECE_WORDS)
        )
        src = b.gep(x, [b.add(x_at, b.mul(y0, wide))])
        rows = b.sub(r1, r0)
        positions = b.mul(b.sub(y1, y0), wide)
        weights = b.gep(w, [b.mul(r0, ldw)])
        # the thread's own scratch (in its cache): the panel, then the piece's output
        panel = b.gep(scratch, [b.mul(t, per_thread)])
        panel = b.select(b.icmp_signed(">", panel_floats, I64(0)), panel, ir.Constant(pf, None))
        mine = b.gep(scratch, [b.add(b.mul(t, per_thread), panel_floats)])
        at_out = b.gep(out, [b.add(b.add(o_at, b.mul(r0, ldo)), b.mul(y0, wide))])
        copying = b.icmp_signed("!=", copy, I64(0))
        dst = b.select(copying, mine, at_out)
        ld = b.select(copying, positions, ldo)
        # a masked piece's words for the kernel: the header's, its first row
        with b.goto_block(b.function.entry_basic_block):  # once, not a piece
            same = b.alloca(I64, SAME_WORDS)
        for i, value in enumerate((taps, wide, height, y0, offsets)):
            b.store(value, b.gep(same, [I64(i)]))
        b.call(
            kernel,
            [src, koff, k, weights, ldw, rows, b.gep(bias, [r0]), positions, dst, ld, panel, same],
        )
        with b.if_then(copying):

            def channel(b, r):
                def row(b, y):
                    frm = b.gep(mine, [b.add(b.mul(r, positions), b.mul(y, wide))])
                    to = b.gep(
                        out, [b.add(b.add(o_at, b.mul(b.add(r0, r), ldo)), b.mul(b.add(y0, y), ow))]
                    )
                    nbytes = b.mul(ow, I64(4))
                    b.call(
                        memcpy, [b.bitcast(to, i8p), b.bitcast(frm, i8p), nbytes, ir.IntType(1)(0)]
                    )

                loop(b, I64(0), b.sub(y1, y0), row, "y")

            loop(b, I64(0), rows, channel, "c")

    llvm_spin.add_pieces(module, name, [pf, pi, pf, pf, pf, pf], piece, split)


def _same_masks(b, module, same, tap_masks, p0, p, vectors, lanes):
    """Each tap's masks (words of `lanes` bits, tap by tap, vector by vector) for the chunk of
    positions p0 .. p0 + vectors * lanes of a masked call: a lane is on where its
    position is under p and the tap reads inside the map. A position q (counted from
    the call's first output row y0) is row y0 + q // width, column q % width (the
    quotient through f64, exact here, then put right by one step either way); tap j
    reads that row + offsets[2j], that column + offsets[2j + 1]."""
    from llvmlite import ir

    from .llvm_ir import I64, intrinsic, loop, splat

    taps, width, height, y0, offsets = (b.load(b.gep(same, [I64(i)])) for i in range(SAME_WORDS))
    offsets = b.inttoptr(offsets, I64.as_pointer())
    vec64, vecf = ir.VectorType(I64, lanes), ir.VectorType(ir.DoubleType(), lanes)
    floor = intrinsic(module, f"llvm.floor.v{lanes}f64", vecf, 1)
    word = ir.IntType(lanes)  # a vector's mask as one integer

    def each(v):
        return splat(b, v, vec64)

    inverse = b.fdiv(ir.DoubleType()(1.0), b.sitofp(width, ir.DoubleType()))
    for v in range(vectors):
        q = b.add(each(b.add(p0, I64(v * lanes))), ir.Constant(vec64, list(range(lanes))))
        n = b.fptosi(b.call(floor, [b.fmul(b.sitofp(q, vecf), splat(b, inverse, vecf))]), vec64)
        r = b.sub(q, b.mul(n, each(width)))
        low = b.icmp_signed("<", r, each(I64(0)))
        n, r = b.select(low, b.sub(n, each(I64(1))), n), b.select(low, b.add(r, each(width)), r)
        high = b.icmp_signed(">=", r, each(width))
        n, r = b.select(high, b.add(n, each(I64(1))), n), b.select(high, b.sub(r, each(width)), r)
        rows, real = b.add(n, each(y0)), b.icmp_signed("<", q, each(p))

        def tap(b, j, rows=rows, cols=r, real=real, v=v):
            dy = b.load(b.gep(offsets, [b.mul(j, I64(2))]))
            dx = b.load(b.gep(offsets, [b.add(b.mul(j, I64(2)), I64(1))]))
            yy, xx = b.add(rows, each(dy)), b.add(cols, each(dx))
            on = b.and_(real, b.icmp_signed(">=", yy, each(I64(0))))
            on = b.and_(on, b.icmp_signed("<", yy, each(height)))
            on = b.and_(on, b.icmp_signed(">=", xx, each(I64(0))))
            on = b.and_(on, b.icmp_signed("<", xx, each(width)))
            at = b.gep(tap_masks, [b.add(b.mul(j, I64(vectors)), I64(v))])
            b.store(b.bitcast(on, word), at)

        loop(b, I64(0), taps, tap, "masks")


def _masked(module, vec):
    """LLVM's masked load and store of f32 vectors of type `vec` (declared once a
    module): ``load(ptr, align, mask, passthru)``, ``store(value, ptr, align, mask)``."""
    from llvmlite import ir

    mask_t = ir.VectorType(ir.IntType(1), vec.count)
    i32 = ir.IntType(32)
    suffix = f"v{vec.count}f32.p0"
    load = module.globals.get(f"llvm.masked.load.{suffix}") or ir.Function(
        module,
        ir.FunctionType(vec, [vec.as_pointer(), i32, mask_t, vec]),
        f"llvm.masked.load.{suffix}",
    )
    store = module.globals.get(f"llvm.masked.store.{suffix}") or ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [vec, vec.as_pointer(), i32, mask_t]),
        f"llvm.masked.store.{suffix}",
    )
    return load, store


def _lane_numbers(first, lanes):
    """The i64 vector first, first + 1, ... (a tail's lanes, compared with its length)"""
    from llvmlite import ir

    from .llvm_ir import I64

    return ir.Constant(ir.VectorType(I64, lanes), [first + i for i in range(lanes)])


def _add_kernel(module, name, act, vec, tile_rows, vectors):
    from llvmlite import ir

    from . import llvm_math
    from .llvm_ir import I64, intrinsic, loop, no_alias, reduce, splat

    f32, i32 = ir.FloatType(), ir.IntType(32)
    lanes = vec.count
    pf, pi = f32.as_pointer(), I64.as_pointer()
    fn = ir.Function(
        module,
        ir.FunctionType(ir.VoidType(), [pf, pi, I64, pf, I64, I64, pf, I64, pf, I64, pf, pi]),
        name,
    )
    x, koff, k, w, ldw, rows, bias, p, out, ldo, panel, same = fn.args
    no_alias(out)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    word = ir.IntType(lanes)  # a vector's mask as one integer
    mask_t = ir.VectorType(ir.IntType(1), lanes)
    # "same" (its first word not 0, SAME_WORDS): the input read where it lies, each
    # tap's lanes that fall outside the map masked off
    same_taps = b.load(same)
    is_same = b.icmp_signed(">", same_taps, I64(0))
    # each tap's mask, vector by vector, for the current chunk (at most SAME_TAPS taps)
    tap_masks = b.alloca(word, SAME_TAPS * vectors)
    fma = intrinsic(module, f"llvm.fmuladd.v{lanes}f32", vec, 3)
    masked_load, masked_store = _masked(module, vec)
    zero = ir.Constant(vec, [0.0] * lanes)
    chunk = vectors * lanes
    last_row = b.sub(rows, I64(1))

    def vector_at(b, base, at):
        return b.bitcast(b.gep(base, [at]), vec.as_pointer())

    def tile(b, r0, p0, masks, mode):
        """rows r0 .. r0 + tile_rows (those under `rows`), positions p0 .. + chunk; the
        taps read from x (koff, mode "plain"), from the chunk's panel ("packed"), or
        from x under each tap's masks for the chunk (tap_masks, "same")"""
        packed = mode == "packed"
        # a tile past the last row reads the last row again (no branch in the sum) and
        # stores only its own rows
        w_rows = []
        for r in range(tile_rows):
            row = b.add(r0, I64(r))
            row = b.select(b.icmp_signed("<", row, rows), row, last_row)
            w_rows.append(b.gep(w, [b.mul(row, ldw)]))

        same_mode = mode == "same"

        def tap(b, t, state):
            # "same" carries the tap's place in its channel (its masks) after the sums
            sums, j = (state[:-1], state[-1]) if same_mode else (state, None)
            if packed:
                xt = b.gep(panel, [b.mul(t, I64(chunk))])
            else:
                xt = b.gep(x, [b.add(b.load(b.gep(koff, [t])), p0)])
            xs = []
            for v in range(vectors):
                ptr = vector_at(b, xt, I64(v * lanes))
                if same_mode:
                    bits = b.load(b.gep(tap_masks, [b.add(b.mul(j, I64(vectors)), I64(v))]))
                    xs.append(b.call(masked_load, [ptr, i32(4), b.bitcast(bits, mask_t), zero]))
                elif masks is None or packed:
                    xs.append(b.load(ptr, align=4))
                else:
                    xs.append(b.call(masked_load, [ptr, i32(4), masks[v], zero]))
            new = []
            for r in range(tile_rows):
                weight = splat(b, b.load(b.gep(w_rows[r], [t])), vec)
                new.extend(
                    b.call(fma, [weight, xs[v], sums[r * vectors + v]]) for v in range(vectors)
                )
            if not same_mode:
                return tuple(new)
            j = b.add(j, I64(1))
            j = b.select(b.icmp_signed("==", j, same_taps), I64(0), j)
            return (*new, j)

        start = [zero] * (tile_rows * vectors) + ([I64(0)] if same_mode else [])
        sums = reduce(b, k, start, tap, "t")[: tile_rows * vectors]
        for r in range(tile_rows):
            row = b.add(r0, I64(r))
            with b.if_then(b.icmp_signed("<", row, rows)):
                shift = splat(b, b.load(b.gep(bias, [row])), vec)
                dst = b.gep(out, [b.add(b.mul(row, ldo), p0)])
                for v in range(vectors):
                    y = b.fadd(sums[r * vectors + v], shift)
                    if act != "none":
                        y = llvm_math.activation_ir(act, b, module, y)
                    ptr = vector_at(b, dst, I64(v * lanes))
                    if masks is None:
                        b.store(y, ptr, align=4)
                    else:
                        b.call(masked_store, [y, ptr, i32(4), masks[v]])

    def tiles(b, p0, masks, mode):
        loop(b, I64(0), rows, lambda b, r0: tile(b, r0, p0, masks, mode), "r", step=tile_rows)

    def over_chunks(b):
        """every chunk of positions, each through all the tiles of rows (a piece's
        weights and a chunk's taps stay in L2: array_conv_direct sizes the pieces)"""
        whole = b.mul(b.sdiv(p, I64(chunk)), I64(chunk))

        def rows_of(b, p0, masks):
            with b.if_else(b.icmp_unsigned("!=", panel, ir.Constant(pf, None))) as (pack, direct):
                with pack:
                    # the chunk's taps copied once, one after another, for all the row
                    # tiles (a 1 x 1 convolution's taps are k planes apart: k streams)
                    def copy(b, t):
                        src = b.gep(x, [b.add(b.load(b.gep(koff, [t])), p0)])
                        dst = b.gep(panel, [b.mul(t, I64(chunk))])
                        for v in range(vectors):
                            at = I64(v * lanes)
                            if masks is None:
                                value = b.load(vector_at(b, src, at), align=4)
                            else:
                                ptr = vector_at(b, src, at)
                                value = b.call(masked_load, [ptr, i32(4), masks[v], zero])
                            b.store(value, vector_at(b, dst, at), align=4)

                    loop(b, I64(0), k, copy, "pack")
                    tiles(b, p0, masks, "packed")
                with direct, b.if_else(is_same) as (masked_reads, plain):
                    with masked_reads:
                        _same_masks(b, module, same, tap_masks, p0, p, vectors, lanes)
                        tiles(b, p0, masks, "same")
                    with plain:
                        tiles(b, p0, masks, "plain")

        loop(b, I64(0), whole, lambda b, p0: rows_of(b, p0, None), "p", step=chunk)
        with b.if_then(b.icmp_signed("<", whole, p)):  # the last positions, masked
            left = splat(b, b.sub(p, whole), ir.VectorType(I64, lanes))
            masks = [
                b.icmp_signed("<", _lane_numbers(v * lanes, lanes), left) for v in range(vectors)
            ]
            rows_of(b, whole, masks)

    over_chunks(b)
    b.ret_void()
    return fn
