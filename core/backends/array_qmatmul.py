"""x @ dequantize(W).T on the CPU for a ggml-quantized host weight W, without a dense copy.

Two paths, one result (to f32 rounding: only the order of the additions differs):

- **fused** (the compiled kernels of the optional ``ember[jit]`` extra: llvm_quant's for
  every ggml block type, llvm_f16's for F16): they read the raw blocks and take each
  block's dot product with x directly, for the few rows of x a decode step has. The
  weight rows are split between the cores, the way llama.cpp splits them: shared with
  llvm_spin's spinning helpers where the CPU has them, else over row_parallel's pool
  (EMBER_CPU_THREADS sets how many threads), and only while sharing times faster.
- **dequantize + GEMM** (numpy alone, and every many-row x such as a prompt): a chunk of
  weight rows at a time is dequantized into an f32 buffer that stays in cache and
  multiplied by BLAS, so the dense weight never exists. With the compiled decoders the
  chunks go over the cores, each thread decoding its chunk and running its GEMM on one
  BLAS thread.

Measured on SmolLM2-135M-Instruct Q4_1 and a random 100M Llama in Q4_K (2 shared cores;
benchmarks/llm.py and benchmarks/qmatmul_cpu.py, see docs/architecture.md "Quantized
matmul on the CPU" for the figures and the candidates that lost).
"""

import contextlib
import threading
import weakref

import numpy as np

from ..errors import UnsupportedDType
from . import llvm_build, llvm_f16, llvm_quant
from .addresses import address
from .blas_threads import single_thread_below
from .optional_jit import env_off, jit_disabled
from .row_parallel import run_either, run_rows, share_count

# f32 bytes of weight rows per GEMM: numpy's dequantizer measured best at 1 MiB for a
# decode step on 2 cores (bigger chunks let the BLAS threads contend with it); the
# compiled decoders are 2-5x faster, and their many-row GEMMs run better on wider chunks
CHUNK_BYTES = 1 << 20
DECODE_CHUNK_BYTES = 4 << 20
# x with at most this many rows takes the fused kernel (decode steps, small batches); more
# rows amortise one dequantization over a GEMM, which BLAS does faster
FUSED_MAX_ROWS = 4
# a many-row product's weight splits in at least this many chunks (_chunked_gemm)
SPLIT_CHUNKS = 4
# ggml's F16 type number (core/io/quant.py GGMLType; backends sit below io and do not
# import it): llvm_f16's kernels
F16 = 1
PATHS = ("auto", "fused", "decode", "integer", "numpy")


# open exact_products blocks (any thread's): while any is, "auto" takes no integer path
_exact = [0]
_exact_lock = threading.Lock()


@contextlib.contextmanager
def exact_products():
    """Within the block, the "auto" path multiplies many rows by weights decoded to f32
    (llvm_decode_gemm) instead of rounding x to 16 bits (llvm_integer_gemm): what
    ember.verify compares layer by layer against a reference computing in f32.
    EMBER_INTEGER_GEMM=0 in the environment does the same for a whole process."""
    with _exact_lock:
        _exact[0] += 1
    try:
        yield
    finally:
        with _exact_lock:
            _exact[0] -= 1


def integer_products_allowed():
    """Whether "auto" may take the integer path now: no exact_products block open and
    EMBER_INTEGER_GEMM=0 not set (read at every call, as EMBER_JIT is)."""
    return not _exact[0] and not env_off("EMBER_INTEGER_GEMM")


def compiled_kernels(ggml_type):
    """The compiled ProductKernels (llvm_products) for a ggml type number: llvm_f16's for
    F16, llvm_quant's for the block types; None for other types or where they cannot be
    built (no llvmlite, EMBER_JIT=0)."""
    if int(ggml_type) == F16:
        return llvm_f16.kernels()
    return llvm_quant.for_type(ggml_type)


def jit_available():
    """Whether the compiled block-type kernels are in use here (llvm_quant's, built now
    where they were not)."""
    return llvm_quant.kernels() is not None


def kernels_loaded():
    """The compiled kernel families this process has loaded so far, by module name
    ("llvm_f16", "llvm_quant"), without loading any: what a benchmark reports after a
    run."""
    from . import llvm_build

    return tuple(n for n in ("llvm_f16", "llvm_quant") if llvm_build.is_built(n))


def prepare(w):
    """Builds (or loads from ember's cache) the compiled kernels of w's ggml type now,
    once a process: called as weights are placed, before any is read. The build pages
    LLVM's code in, which the group's build hands back (compiler_pages); done at a
    model's first decode step instead, with every weight resident, it raised
    SmolLM2-135M's peak RSS from 214 to 268 MiB (with numba's kernels, then)."""
    t = getattr(w, "ggml_type", None)
    if t is not None:
        compiled_kernels(t)


def qmatmul_rows(x2, w, out, *, path="auto", chunk_rows=None, chunk_bytes=None):
    """``out[:] = x2 @ dequantize(w).T``: x2 C-contiguous float32 (M, K), w a 2-D host
    weight (``raw``, ``ggml_type``, ``shape`` (N, K), ``dequantize_rows``), out float32
    (M, N), returned.

    ``path``: "fused" (the compiled dot kernels), "decode" (the compiled row decoders +
    GEMM), "integer" (x rounded to 16 bits per 32 values, integer products: llvm_integer_gemm,
    where the CPU has AVX-512 VNNI and the type packs), "numpy" (numpy's dequantizer +
    GEMM, the reference), or "auto": fused for at most FUSED_MAX_ROWS rows of x, integer
    for more where it is built for the type (and allowed: integer_products_allowed),
    else decode; numpy where the kernels are missing (no llvmlite, or EMBER_JIT=0) or
    the weight is no ggml type they take.
    ``chunk_rows``: weight rows per GEMM on the dequantizing paths, else about
    ``chunk_bytes`` of f32 (default CHUNK_BYTES for numpy, at least DECODE_CHUNK_BYTES
    for the compiled decoders)."""
    if path == "auto" and x2.shape[0] <= FUSED_MAX_ROWS:
        plan = _plan_of(w)
        if plan is not None and plan.run(x2, out):
            return out
    if path not in PATHS:
        raise ValueError(f"qmatmul: path must be one of {PATHS}, got {path!r}")
    t = getattr(w, "ggml_type", None)  # a duck-typed host weight may only dequantize rows
    compiled = compiled_kernels(t) if t is not None and path != "numpy" else None
    if compiled is not None:
        return _compiled_rows(compiled, x2, w, out, path, chunk_rows, chunk_bytes)
    if path in ("fused", "decode", "integer"):
        raise UnsupportedDType(
            f"qmatmul: no {path} CPU kernel for ggml type {t!r} here (the kernels need "
            f"llvmlite: pip install 'ember[jit]'; EMBER_JIT=0 turns them off)",
            ggml_type=t,
        )
    if chunk_rows is None:
        chunk_rows = max(16, (chunk_bytes or CHUNK_BYTES) // max(1, 4 * w.shape[1]))
    return _dequantize_gemm(x2, w, out, chunk_rows)


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
            # x or out the plan does not take: the checked arguments (or their error)
            for rows, at in _compiled_parts(kernels, w):
                cols = out[:, at : at + rows.shape[0]]
                _compiled_call(kernels, kernels.args(rows, x2, cols, 0, rows.shape[0]))
        return out
    # many rows: part by part even where the parts are adjacent (a GEMM's bits depend on
    # its width, so an adjacent stack keeps a plain stack's bits only chunked as it is),
    # in fixed chunks each multiplied on one BLAS thread, over ember's threads. Whether
    # or not BLAS's pool would spin: a whole GEMM on BLAS's threads ran Whisper's encoder
    # ~5% faster on an Intel host, but OpenBLAS's Haswell kernels give other bits on two
    # threads or another width, and a result must not depend on whether numpy was
    # imported before ember.
    parts = [(kernels.weight_rows(p), at) for p, at in _block_parts(w)]
    wanted = path == "integer" or (path == "auto" and integer_products_allowed())
    if wanted and _integer_pieces(x2, out, parts, kernels, path == "integer"):
        return out
    return _chunked_gemm(x2, out, parts, kernels, chunk_rows, chunk_bytes)


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
        m, xa, oa, ldo = x2.shape[0], address(x2), address(out), out.strides[0] // 4
        for (wa, ldw, n, _), at in self.parts:
            _compiled_call(self.kernels, (wa, ldw, xa, k, oa + 4 * at, ldo, m, 0, n, k))
        return True


def _compiled_call(kernels, args):
    """A compiled dot on its checked arguments (ProductKernels.args, or a _FusedPlan's)
    on every core: through llvm_spin's spinning helpers where they are built (a decode
    step's products are too short for run_rows' hand-off: Whisper base's fc2, 512 x 2048
    halves, 68 us alone, 29 us split with a helper), else over run_rows' pool; either
    only where run_rows would share, and only while it times faster than one thread
    (row_parallel.run_either)."""
    n, elements = args[8], args[6] * args[9]
    helpers = kernels.helpers(share_count(n, elements, align=2, blas_free=True))
    if helpers is None:
        run_rows(lambda r0, r1: kernels.call(args, r0, r1), n, elements, align=2, blas_free=True)
        return
    run_either(
        _compiled_call.__code__,
        n * elements,
        lambda: kernels.call_split(args, helpers),
        lambda: kernels.call(args, 0, n),
        # each weight its own site: keyed by size alone, a decode step's products of one
        # power of two (SmolLM2's q/k/v stack and its down projection) pooled their
        # timings, each way's least being another product's, and half of a step's
        # products ran on one core
        operand=args[0],
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


def _compiled_parts(kernels, w):
    """[(weight rows [N, units], first output column)] of a weight for the dot kernel: one
    entry (an adjacent stack's one view), or one per part of a row stack whose parts lie
    apart."""
    joined = getattr(w, "joined", None)
    parts = getattr(w, "parts", None) if joined is None else None
    if parts is None:
        return [(kernels.weight_rows(w if joined is None else joined), 0)]
    return [(kernels.weight_rows(p), off) for p, off in zip(parts, w.offsets, strict=False)]


def _chunked_gemm(x2, out, parts, kernels, chunk_rows, chunk_bytes):
    """``out[:, at + r] = x2 @ decoded rows r`` for each part (its rows, first output
    column) of a weight, in pieces: a part goes in at least SPLIT_CHUNKS pieces of at most
    DECODE_CHUNK_BYTES of f32 (or ``chunk_rows`` rows, or about ``chunk_bytes``), a
    fixed count, not the thread count, so the bits do not depend on how many threads
    ran. Each piece is decoded by the kernels' decoder and multiplied on one BLAS thread,
    the pieces shared over the cores: by llvm_decode_gemm's compiled driver where it is
    built (no Python between the pieces), else over row_parallel's threads. Either way
    BLAS's own pool never wakes (where numpy was imported before ember, its workers
    would spin ~0.1 s after a prompt against the next decode steps' kernels:
    SmolLM2-135M's first step took 100 ms instead of 20)."""
    n_in = x2.shape[1]
    pieces = _pieces(parts, n_in, chunk_rows, chunk_bytes)
    widest = max(r1 - r0 for _, r0, r1, _ in pieces)
    per_piece = x2.shape[0] * n_in * widest
    with single_thread_below(0):
        if _compiled_pieces(x2, out, pieces, kernels, widest, per_piece):
            return out

        def run(start, stop):
            for rows, r0, r1, at in pieces[start:stop]:
                chunk = np.empty((r1 - r0, n_in), np.float32)
                kernels.decode(rows, chunk, r0, r1)
                np.matmul(x2, chunk.T, out=out[:, at + r0 : at + r1])

        run_rows(run, len(pieces), per_piece, blas_free=True, pieces=len(pieces))
    return out


def _pieces(parts, n_in, chunk_rows=None, chunk_bytes=None):
    """[(rows, r0, r1, first output column)]: each part (its rows, first output column)
    cut in at least SPLIT_CHUNKS pieces of at most DECODE_CHUNK_BYTES of f32 (or
    ``chunk_rows`` rows, or about ``chunk_bytes``)."""
    most = max(16, max(chunk_bytes or 0, DECODE_CHUNK_BYTES) // (4 * n_in))
    pieces = []
    for rows, at in parts:
        n = rows.shape[0]
        step = int(chunk_rows) if chunk_rows is not None else min(most, -(-n // SPLIT_CHUNKS))
        step = max(1, min(step, n))
        pieces += [(rows, r0, min(n, r0 + step), at) for r0 in range(0, n, step)]
    return pieces


def _integer_pieces(x2, out, parts, kernels, required):
    """The product through llvm_integer_gemm (x rounded to 16 bits per group of 32), True;
    False where it is not built (no AVX-512 VNNI, no llvmlite), the format does not pack,
    or x2 or out is not what it indexes (nothing written then), or, `required` (path
    "integer"), UnsupportedDType saying which. Each output is computed alone, the same
    whatever the pieces or threads: pieces as _chunked_gemm cuts them."""
    driver = llvm_build.kernels("llvm_integer_gemm")
    n_in = x2.shape[1]
    why = None
    if driver is None:
        why = "it needs an x86-64 CPU with AVX-512 VNNI and llvmlite"
    elif kernels.pack_address is None:
        why = f"{kernels.name} does not pack (only Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K)"
    elif not _rows_indexable(x2, out):
        why = "x must be C-contiguous float32 rows, out float32 with contiguous rows"
    if why is not None:
        if required:
            raise UnsupportedDType(f"qmatmul: no integer path here: {why}", ggml_type=kernels.name)
        return False
    pieces = _pieces(parts, n_in)
    per_piece = x2.shape[0] * n_in * max(r1 - r0 for _, r0, r1, _ in pieces)
    threads = share_count(len(pieces), per_piece, blas_free=True)
    driver.run(x2, out, pieces, kernels.pack_address, kernels.helpers(threads))
    return True


def _compiled_pieces(x2, out, pieces, kernels, widest, per_piece):
    """The pieces through llvm_decode_gemm's driver, True; False where it is not built
    (no llvmlite, no helpers on this CPU, no sgemm found) or x2 or out is not what it
    indexes (then nothing was written)."""
    driver = llvm_build.kernels("llvm_decode_gemm")
    if driver is None or not _rows_indexable(x2, out):
        return False
    threads = share_count(len(pieces), per_piece, blas_free=True)
    helpers = kernels.helpers(threads)
    scratch = np.empty((1 if helpers is None else threads) * widest * x2.shape[1], np.float32)
    driver.run(x2, out, pieces, kernels.decode_address, helpers, scratch)
    return True


def _rows_indexable(x2, out):
    """Whether the compiled drivers index x2 and out: x2 C-contiguous float32, out float32
    with contiguous rows."""
    return (
        x2.dtype == np.float32
        and out.dtype == np.float32
        and x2.flags.c_contiguous
        and out.strides[1] == 4
    )


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
    "PATHS",
    "compiled_kernels",
    "jit_available",
    "kernels_loaded",
    "prepare",
    "qmatmul_rows",
]
