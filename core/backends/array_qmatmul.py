"""x @ dequantize(W).T on the CPU for a ggml-quantized host weight W, without a dense copy.

Two paths, one result (to f32 rounding: only the order of the additions differs):

- **fused** (numba, the optional ``ember[jit]`` extra): array_qkernels' per-type kernels
  read the raw blocks and take each block's dot product with x directly, for the few rows
  of x a decode step has. The weight rows are split between the cores (threads running
  the GIL-free kernels on row_parallel's pool; EMBER_CPU_THREADS sets how many), the way
  llama.cpp splits them, in ranges each taken by the next free thread: a worker that
  starts late on a busy machine takes fewer, and a kernel too short to pay for waking
  one runs on the caller alone (row_parallel.run_rows).
- **dequantize + GEMM** (numpy alone, and every many-row x such as a prompt): a chunk of
  weight rows at a time is dequantized into an f32 buffer that stays in cache and
  multiplied by BLAS, so the dense weight never exists. With numba the chunks go over
  the cores, each thread decoding its chunk and running its GEMM on one BLAS thread.

ggml's F16 (a half per weight: Whisper's f16 checkpoints, whisper_load) takes the same two
paths with llvm_f16's kernels instead of numba's (see there for why).

Measured on SmolLM2-135M-Instruct Q4_1 and a random 100M Llama in Q4_K (2 shared cores;
benchmarks/llm.py and benchmarks/qmatmul_cpu.py, see docs/architecture.md "Quantized
matmul on the CPU" for the figures and the candidates that lost).
"""

import contextlib
import itertools
import threading
import weakref

import numpy as np

from ..errors import UnsupportedDType
from . import compiler_pages, llvm_f16, llvm_quant
from .blas_threads import single_thread_below
from .optional_jit import jit_disabled, jit_module
from .row_parallel import run_either, run_rows, share_count

# f32 bytes of weight rows per GEMM: numpy's dequantizer measured best at 1 MiB for a
# decode step on 2 cores (bigger chunks let the BLAS threads contend with it); numba's
# decoders are 2-5x faster, and their many-row GEMMs run better on wider chunks
CHUNK_BYTES = 1 << 20
DECODE_CHUNK_BYTES = 4 << 20
# x with at most this many rows takes the fused kernel (decode steps, small batches); more
# rows amortise one dequantization over a GEMM, which BLAS does faster
FUSED_MAX_ROWS = 4
# a many-row product's weight splits in at least this many chunks (_decode_gemm)
SPLIT_CHUNKS = 4
# ggml type numbers (core/io/quant.py GGMLType; backends sit below io and do not import it):
# F16, llvm_f16's, and array_qkernels' kernels by type
F16 = 1
# (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K: llvm_quant's, compiled_kernels)
KERNEL_NAMES = {7: "q5_1", 10: "q2_k", 11: "q3_k", 13: "q5_k"}
_state = {"kernels": None, "tried": False, "release": False}
_lock = threading.Lock()


def _kernels():
    """array_qkernels' dot kernels by ggml type number, or None without numba (or with
    EMBER_JIT=0)."""
    if not _state["tried"]:
        with _lock:
            if not _state["tried"]:
                _state["kernels"] = _load_kernels()
                _state["tried"] = True
    return _state["kernels"]


def _load_kernels():
    k = jit_module("array_qkernels")
    if k is None:  # numba missing (or EMBER_JIT=0): the numpy path serves every type
        return None
    from . import array_qkernels_parallel as par

    spread = par if par.usable() else None
    kernels = {}
    for t, n in KERNEL_NAMES.items():
        wide = None if spread is None else getattr(k, "spread_" + n)
        kernels[t] = (getattr(k, "dot_" + n), getattr(k, "decode_" + n), wide)
    return kernels, k.F16, spread


def jit_available():
    """Whether the fused numba kernels are in use (importing numba to find out)."""
    return _kernels() is not None


def kernels_loaded():
    """The compiled kernel families this process has loaded so far, by module name
    ("llvm_f16", "llvm_quant", "array_qkernels": numba's), without loading any: what a
    benchmark reports after a run (asking jit_available would import numba, ~48 MB)."""
    from . import llvm_build

    loaded = [n for n in ("llvm_f16", "llvm_quant") if llvm_build.is_built(n)]
    return tuple(loaded + (["array_qkernels"] if _state["kernels"] is not None else []))


PATHS = ("auto", "fused", "decode", "numpy")
_prepared: set = set()  # ggml types whose kernels prepare() has loaded


def prepare(w):
    """Loads (or compiles) the kernels of w's ggml type now, once a process: called as
    weights are placed, before any is read. The compiled ones (compiled_kernels) are
    built with their group, which hands LLVM's pages back after; numba's fused (and
    spread) and decode kernels are called on w's first two rows, and LLVM's pages handed
    back at the next product. A kernel's first load pages LLVM's code in (about 60 MB):
    loaded at a model's first decode step instead, with every weight resident, it raised
    SmolLM2-135M's peak RSS from 214 to 268 MiB."""
    t = getattr(w, "ggml_type", None)
    if t is not None and compiled_kernels(t) is not None:
        return  # never numba's import for these types
    wanted = t is not None and int(t) in KERNEL_NAMES and int(t) not in _prepared
    kernels = _kernels() if wanted else None
    pair = kernels[0].get(int(t)) if kernels is not None else None
    # two rows of one plain weight: a stack's own raw would be a copy of every part, and
    # the kernels do not check bounds, so a part of one row will not do
    whole = next((p for p, _ in _block_parts(w) if len(p.shape) == 2 and p.shape[0] >= 2), None)
    if pair is None or whole is None:
        return
    _prepared.add(int(t))
    _state["release"] = True  # at the next product: the model's weights are placed by then
    raw = whole.raw.reshape(whole.shape[0], -1)[:2]
    x = np.zeros((1, w.shape[1]), np.float32)
    xs = np.zeros((1, w.shape[1] // 16), np.float32)
    pair[0](raw, x, xs, np.empty((1, 2), np.float32), 0, 2, kernels[1])
    if pair[2] is not None and kernels[2].usable():  # the form on numba's threads
        kernels[2].run(pair[2], raw, x, xs, np.empty((1, 2), np.float32), kernels[1], 1)
    pair[1](raw, np.empty((2, w.shape[1]), np.float32), 0, 2, kernels[1])


def qmatmul_rows(x2, w, out, *, path="auto", chunk_rows=None, chunk_bytes=None):
    """``out[:] = x2 @ dequantize(w).T``: x2 C-contiguous float32 (M, K), w a 2-D host
    weight (``raw``, ``ggml_type``, ``shape`` (N, K), ``dequantize_rows``), out float32
    (M, N), returned.

    ``path``: "fused" (numba's fused dot kernels), "decode" (numba's row decoders + GEMM),
    "numpy" (numpy's dequantizer + GEMM, the reference), or "auto": fused for at most
    FUSED_MAX_ROWS rows of x, decode for more, numpy where numba is missing (or
    EMBER_JIT=0) or the weight is no ggml block type. ``chunk_rows``: weight rows per
    GEMM on the dequantizing paths, else about ``chunk_bytes`` of f32 (default CHUNK_BYTES
    for numpy, at least DECODE_CHUNK_BYTES for numba's decoders)."""
    if path == "auto" and x2.shape[0] <= FUSED_MAX_ROWS and not _state["release"]:
        plan = _plan_of(w)
        if plan is not None and plan.run(x2, out):
            return out
    if path not in PATHS:
        raise ValueError(f"qmatmul: path must be one of {PATHS}, got {path!r}")
    if _state["release"]:  # kernels were loaded since the last product
        _state["release"] = False
        compiler_pages.release()
    t = getattr(w, "ggml_type", None)  # a duck-typed host weight may only dequantize rows
    compiled = compiled_kernels(t) if t is not None and path != "numpy" else None
    if compiled is not None:
        return _compiled_rows(compiled, x2, w, out, path, chunk_rows, chunk_bytes)
    if t is not None and int(t) == F16 and path != "numpy":
        if path != "auto":
            raise UnsupportedDType(
                f"qmatmul: no {path} CPU kernel for F16 here (llvm_f16 needs llvmlite: "
                f"pip install 'ember[jit]')",
                ggml_type=t,
            )
        path = "numpy"
    kernels = _kernels() if path != "numpy" else None
    pair = kernels[0].get(int(t)) if kernels is not None and t is not None else None
    if pair is None and path in ("fused", "decode"):
        raise UnsupportedDType(
            f"qmatmul: no {path} CPU kernel for ggml type {t!r} here (the kernels need "
            f"numba: pip install 'ember[jit]')",
            ggml_type=t,
        )
    if pair is None:
        if chunk_rows is None:
            chunk_rows = max(16, (chunk_bytes or CHUNK_BYTES) // max(1, 4 * w.shape[1]))
        return _dequantize_gemm(x2, w, out, chunk_rows)
    if path == "fused" or (path == "auto" and x2.shape[0] <= FUSED_MAX_ROWS):
        if pair[2] is not None and kernels[2].usable():  # not in a forked child
            return _fused_spread(kernels[2], pair[0], pair[2], kernels[1], x2, w, out)
        return _fused(pair[0], kernels[1], x2, w, out)
    return _decode_gemm(x2, w, out, chunk_rows, chunk_bytes, pair[1], kernels[1])


def _sums_and_rows(x2, w):
    """(xs, raw, parts): x's per-16 sums (the kernels' min and offset terms), and either
    the weight's raw rows as one (N, bytes) view (parts None) or, for a row stack whose
    parts lie apart (io.quant.StackedQTensor), raw None and its parts. A stack whose parts
    are one run of bytes (models.gguf_llama.AdjacentStack) runs as that one view: its
    parts' even row counts keep every row's pair."""
    n_out, n_in = w.shape
    # np.sum's own reduction (pairwise, in f32) without its Python wrapper: a decode step
    # makes 121 of these
    xs = np.add.reduce(x2.reshape(x2.shape[0], n_in // 16, 16), axis=-1)
    joined = getattr(w, "joined", None)
    parts = getattr(w, "parts", None) if joined is None else None
    if parts is not None:
        return xs, None, parts
    return xs, (w if joined is None else joined).raw.reshape(n_out, -1), None


def _fused_spread(par, kernel, wide, f16, x2, w, out):
    """The fused kernel over the cores on numba's threads (array_qkernels_parallel): one
    call per weight, or per part of a row stack, each into a C-contiguous output."""
    n_in = w.shape[1]
    xs, raw, parts = _sums_and_rows(x2, w)
    if parts is None:
        raws, outs = [raw], [out]
    elif x2.shape[0] == 1:
        # one row of x (a decode step): each part's columns of out are C-contiguous, the
        # kernels' layout, so they write there and nothing is placed after
        raws, outs = _part_rows(parts), _part_columns(out, parts, w.offsets)
    else:
        raws, outs = _part_outputs(x2, parts)
    for raw, part_out in zip(raws, outs, strict=True):
        # blas_free: no GEMM here, and _decode_gemm keeps BLAS's pool asleep
        threads = share_count(raw.shape[0], n_in * x2.shape[0], align=2, blas_free=True)
        if threads > 1:
            par.run(wide, raw, x2, xs, part_out, f16, threads)
        else:
            kernel(raw, x2, xs, part_out, 0, raw.shape[0], f16)
    if parts is not None and x2.shape[0] != 1:
        _place_parts(out, outs, w.offsets)
    return out


def _fused(kernel, f16, x2, w, out):
    n_out, n_in = w.shape
    xs, raw, parts = _sums_and_rows(x2, w)
    if parts is None:
        # The kernels release the GIL: ranges of weight rows run on row_parallel's threads.
        run_rows(
            lambda r0, r1: kernel(raw, x2, xs, out, r0, r1, f16),
            n_out,
            n_in,
            align=2,
            blas_free=True,  # no GEMM inside: BLAS's spinning pool is no reason to stay alone
        )
        return out
    # A row stack (io.quant.StackedQTensor): one pass of threads over all its rows, each
    # range running the kernel on the parts it covers, into a C-contiguous output per part
    # (the kernels' layout), then placed side by side. The kernels take rows in pairs and
    # a row's bits depend on its place in a pair, so the threads' ranges are laid over the
    # parts with each part padded to an even row count: every range starts a part's pair.
    raws, outs = _part_outputs(x2, parts)
    starts = list(itertools.accumulate((p.shape[0] + p.shape[0] % 2 for p in parts), initial=0))

    def rows(r0, r1):
        for raw, part_out, at in zip(raws, outs, starts, strict=False):
            lo, hi = max(r0, at) - at, min(r1, at + raw.shape[0]) - at
            if lo < hi:
                kernel(raw, x2, xs, part_out, lo, hi, f16)

    run_rows(rows, starts[-1], n_in, align=2, blas_free=True)
    _place_parts(out, outs, w.offsets)
    return out


def _part_rows(parts):
    """A row stack's parts as (N, bytes) views of their raw rows."""
    return [p.raw.reshape(p.shape[0], -1) for p in parts]


def _part_columns(out, parts, offsets):
    """Each part's columns of a one-row out: a C-contiguous (1, N) view apiece."""
    return [out[:, at : at + p.shape[0]] for p, at in zip(parts, offsets, strict=False)]


def _part_outputs(x2, parts):
    """A row stack's parts as (N, bytes) views of their raw rows, and a C-contiguous
    output (the kernels' layout) for each."""
    raws = _part_rows(parts)
    return raws, [np.empty((x2.shape[0], r.shape[0]), np.float32) for r in raws]


def _place_parts(out, outs, offsets):
    """The parts' outputs side by side in out, at their column offsets."""
    for part_out, off in zip(outs, offsets, strict=False):
        out[:, off : off + part_out.shape[1]] = part_out


def compiled_kernels(ggml_type):
    """The compiled ProductKernels (llvm_products) for a ggml type number: llvm_f16's for
    F16, llvm_quant's for its block types; None for other types or where they cannot be
    built (no llvmlite, EMBER_JIT=0)."""
    if int(ggml_type) == F16:
        return llvm_f16.kernels()
    return llvm_quant.for_type(ggml_type)


def _compiled_rows(kernels, x2, w, out, path, chunk_rows, chunk_bytes):
    """qmatmul_rows through compiled kernels (compiled_kernels) for a weight (a QTensor or
    a row stack of them): for few rows of x their dot products, the weight's rows split
    over the cores, each part written straight into its columns of out; for more, chunks
    of rows decoded and multiplied over ember's threads (_chunked_gemm)."""
    if path == "fused" or (path == "auto" and x2.shape[0] <= FUSED_MAX_ROWS):
        plan = _FusedPlan(kernels, w)
        if path == "auto":
            _remember_plan(w, plan)
        if not plan.run(x2, out):
            for rows, at in _compiled_parts(kernels, w):
                _compiled_dot(kernels, rows, x2, out[:, at : at + rows.shape[0]])
        return out
    # many rows: part by part even where the parts are adjacent (a GEMM's bits depend on
    # its width, so an adjacent stack keeps a plain stack's bits only chunked as it is),
    # in fixed chunks each multiplied on one BLAS thread, over ember's threads. Whether
    # or not BLAS's pool would spin: a whole GEMM on BLAS's threads ran Whisper's encoder
    # ~5% faster on an Intel host, but OpenBLAS's Haswell kernels give other bits on two
    # threads or another width, and a result must not depend on whether numpy was
    # imported before ember.
    parts = [(kernels.weight_rows(p), at) for p, at in _block_parts(w)]
    return _chunked_gemm(x2, out, parts, kernels.decode, chunk_rows, chunk_bytes)


class _FusedPlan:
    """A weight's few-row product through compiled kernels with every argument but x's
    and out's worked out once: a decode step makes 121 such products (SmolLM2-135M), and
    finding the kernels, the parts, their views, addresses and checks again each time
    took 15-25 us of each (of 30-200 us)."""

    __slots__ = ("kernels", "parts", "k")

    def __init__(self, kernels, w):
        self.kernels, self.k = kernels, w.shape[1]
        self.parts = [(kernels.weight_args(rows), at) for rows, at in _compiled_parts(kernels, w)]

    def run(self, x2, out):
        """out = x2 @ weight.T, True; or False, nothing done, where x2 or out is not what
        the kernels index (C-contiguous float32 x2 of the weight's row length, float32
        out with contiguous rows) or EMBER_JIT=0 was set since."""
        k = self.k
        if (
            x2.dtype != np.float32
            or out.dtype != np.float32
            or not x2.flags.c_contiguous
            or x2.shape[1] != k
            or out.strides[1] != 4
            or jit_disabled()
        ):
            return False
        m, xa, oa, ldo = x2.shape[0], x2.ctypes.data, out.ctypes.data, out.strides[0] // 4
        for (wa, ldw, n, _), at in self.parts:
            _compiled_call(self.kernels, (wa, ldw, xa, k, oa + 4 * at, ldo, m, 0, n, k))
        return True


def _helpers(kernels, threads, weights):
    """llvm_spin's helpers for a compiled product of `weights` weights on `threads`
    threads, or None. Where numba's threads run this process's other products (a model
    of K-quants and Q8_0: Gemma 3's), only for products of LONE_WEIGHTS or more: numba's
    OpenMP workers spin after their products as the helpers do after theirs, and three
    spinning threads on two cores slowed each other; a product that long outlasts the
    spinning many times over (Gemma 3 270M's 170 MB logits product)."""
    spread = _state["kernels"][2] if _state["kernels"] is not None else None
    if weights < LONE_WEIGHTS and spread is not None and spread.usable():
        return _ALONE
    return kernels.helpers(threads)


LONE_WEIGHTS = 1 << 24
_ALONE = object()  # _helpers' answer for a product to run on the caller's thread alone


def _compiled_call(kernels, args):
    """_compiled_dot on ready arguments (_FusedPlan)."""
    n, elements = args[8], args[6] * args[9]
    helpers = _helpers(kernels, share_count(n, elements, align=2, blas_free=True), n * args[9])
    if helpers is _ALONE:
        kernels.call(args, 0, n)
        return
    if helpers is None:
        run_rows(lambda r0, r1: kernels.call(args, r0, r1), n, elements, align=2, blas_free=True)
        return
    run_either(
        _compiled_dot.__code__,
        n * elements,
        lambda: kernels.call_split(args, helpers),
        lambda: kernels.call(args, 0, n),
    )


# each weight's _FusedPlan, made at its first few-row product on the "auto" path (weak:
# a model's weights go with the model)
_plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plan_of(w):
    try:
        return _plans.get(w)
    except TypeError:  # a duck-typed weight that takes no weak reference
        return None


def _remember_plan(w, plan):
    with contextlib.suppress(TypeError):  # a duck-typed weight that takes no weak reference
        _plans[w] = plan


def _compiled_dot(kernels, rows, x2, cols):
    """cols = x2 @ weight(rows).T on every core: through llvm_spin's spinning helpers where
    they are built (a decode step's products are too short for run_rows' hand-off: Whisper
    base's fc2, 512 x 2048 halves, 68 us alone, 29 us split with a helper), else over
    run_rows' pool; either only where run_rows would share, and only while it times
    faster than one thread (row_parallel.run_either)."""
    n, elements = rows.shape[0], x2.shape[1] * x2.shape[0]
    helpers = _helpers(kernels, share_count(n, elements, align=2, blas_free=True), n * x2.shape[1])
    if helpers is _ALONE:
        kernels.dot(rows, x2, cols, 0, n)
        return
    if helpers is None:
        run_rows(
            lambda r0, r1: kernels.dot(rows, x2, cols, r0, r1),
            n,
            elements,
            align=2,
            blas_free=True,  # no GEMM inside, and _chunked_gemm keeps BLAS's pool asleep
        )
        return
    run_either(
        _compiled_dot.__code__,
        n * elements,
        lambda: kernels.dot_split(rows, x2, cols, 0, n, helpers),
        lambda: kernels.dot(rows, x2, cols, 0, n),
    )


def _compiled_parts(kernels, w):
    """[(weight rows [N, units], first output column)] of a weight for the dot kernel: one
    entry (an adjacent stack's one view), or one per part of a row stack whose parts lie
    apart."""
    joined = getattr(w, "joined", None)
    parts = getattr(w, "parts", None) if joined is None else None
    if parts is None:
        return [(kernels.weight_rows(w if joined is None else joined), 0)]
    return [(kernels.weight_rows(p), off) for p, off in zip(parts, w.offsets, strict=False)]


def _decode_gemm(x2, w, out, chunk_rows, chunk_bytes, decode, f16):
    """numba's row decoders + GEMMs (_chunked_gemm) over a block-type weight's parts."""
    parts = [(p.raw.reshape(p.shape[0], -1), at) for p, at in _block_parts(w)]

    def rows(raw, chunk, r0, r1):
        decode(raw, chunk, r0, r1, f16)

    return _chunked_gemm(x2, out, parts, rows, chunk_rows, chunk_bytes)


def _chunked_gemm(x2, out, parts, decode, chunk_rows, chunk_bytes):
    """``out[:, at + r] = x2 @ decoded rows r`` for each part (its rows, first output
    column) of a weight, ``decode(rows, chunk, r0, r1)`` writing rows r0:r1 as f32, chunk
    by chunk, the chunks shared over row_parallel's threads: each thread decodes a chunk
    and multiplies it on one BLAS thread, so the decoding runs on every core too and
    BLAS's own pool never wakes (where numpy was imported before ember, its workers
    would spin ~0.1 s after a prompt against the next decode steps' kernels:
    SmolLM2-135M's first step took 100 ms instead of 20). A part goes in at least
    SPLIT_CHUNKS chunks of at most DECODE_CHUNK_BYTES of f32 (or ``chunk_rows`` rows, or
    about ``chunk_bytes``): a fixed count, not the thread count, so the bits do not
    depend on how many threads ran."""
    n_in = x2.shape[1]
    most = max(16, max(chunk_bytes or 0, DECODE_CHUNK_BYTES) // (4 * n_in))
    pieces = []  # (rows, r0, r1, first output column)
    for rows, at in parts:
        n = rows.shape[0]
        step = int(chunk_rows) if chunk_rows is not None else min(most, -(-n // SPLIT_CHUNKS))
        step = max(1, min(step, n))
        pieces += [(rows, r0, min(n, r0 + step), at) for r0 in range(0, n, step)]

    def run(start, stop):
        for rows, r0, r1, at in pieces[start:stop]:
            chunk = np.empty((r1 - r0, n_in), np.float32)
            decode(rows, chunk, r0, r1)
            np.matmul(x2, chunk.T, out=out[:, at + r0 : at + r1])

    per_piece = x2.shape[0] * n_in * max(r1 - r0 for _, r0, r1, _ in pieces)
    with single_thread_below(0):
        run_rows(run, len(pieces), per_piece, blas_free=True, pieces=len(pieces))
    return out


def _block_parts(w):
    """[(QTensor, first output column)] of a block-type weight: itself, or each part of a
    row stack, an adjacent one too (io.quant.StackedQTensor, models.quant_layers.
    AdjacentStack): a GEMM's bits depend on its width, so an adjacent stack must be
    chunked part by part, as a plain stack of the same parts is, to keep its bits."""
    parts = getattr(w, "parts", None)
    if parts is None:
        return [(w, 0)]
    return list(zip(parts, w.offsets, strict=False))


def _dequantize_gemm(x2, w, out, chunk_rows):
    """Chunks of rows dequantized by numpy into one reused buffer, each chunk one GEMM
    (numpy's dequantizer holds the GIL: no threads here; BLAS has the cores)."""
    n_out, n_in = w.shape
    step = max(1, min(int(chunk_rows), n_out))
    buf = np.empty((step, n_in), np.float32)
    for r0 in range(0, n_out, step):
        r1 = min(n_out, r0 + step)
        chunk = w.dequantize_rows(r0, r1, out=buf[: r1 - r0])
        np.matmul(x2, chunk.T, out=out[:, r0:r1])
    return out


__all__ = [
    "CHUNK_BYTES",
    "DECODE_CHUNK_BYTES",
    "FUSED_MAX_ROWS",
    "F16",
    "KERNEL_NAMES",
    "PATHS",
    "jit_available",
    "kernels_loaded",
    "prepare",
    "qmatmul_rows",
]
