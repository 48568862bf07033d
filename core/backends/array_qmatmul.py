"""x @ dequantize(W).T on the CPU for a ggml-quantized host weight W, without a dense copy.

Two paths, one result (to f32 rounding: only the order of the additions differs):

- **fused** (numba, the optional ``ember[jit]`` extra): array_qkernels' per-type kernels
  read the raw blocks and take each block's dot product with x directly, for the few rows
  of x a decode step has. The weight rows are split between the cores (threads running
  the GIL-free kernels), the way llama.cpp splits them.
- **dequantize + GEMM** (numpy alone, and every many-row x such as a prompt): a chunk of
  weight rows at a time is dequantized into one reused f32 buffer that stays in cache and
  multiplied by BLAS, so the dense weight never exists.

Measured on SmolLM2-135M-Instruct Q4_1 and a random 100M Llama in Q4_K (2 shared cores;
benchmarks/llm.py and benchmarks/qmatmul_cpu.py, see docs/architecture.md "Quantized
matmul on the CPU" for the figures and the candidates that lost).
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import UnsupportedDType

# weight rows dequantized per GEMM: the f32 chunk stays around this many bytes
CHUNK_BYTES = 1 << 20
# x with at most this many rows takes the fused kernel (decode steps, small batches); more
# rows amortise one dequantization over a GEMM, which BLAS does faster
FUSED_MAX_ROWS = 4
# fused work below this many weight bytes runs on the calling thread alone: a hand-off to
# the other core costs tens of microseconds
_SPLIT_MIN_BYTES = 1 << 16

_state = {"kernels": None, "tried": False}
_lock = threading.Lock()
_pool = {}


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
    if os.environ.get("EMBER_JIT", "1") == "0":
        return None
    try:
        from . import array_qkernels as k
    except ImportError:  # numba missing: the numpy path serves every type
        return None
    # ggml type numbers (core/io/quant.py GGMLType); backends sit below io and do not import it
    names = {2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0"}
    names.update({10: "q2_k", 11: "q3_k", 12: "q4_k", 13: "q5_k", 14: "q6_k"})
    return {t: (getattr(k, "dot_" + n), getattr(k, "decode_" + n)) for t, n in names.items()}, k.F16


def jit_available():
    """Whether the fused numba kernels are in use."""
    return _kernels() is not None


_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _threads():
    """Threads for the fused kernels: EMBER_NUM_THREADS, else every core this process may use."""
    asked = os.environ.get("EMBER_NUM_THREADS", "")
    return max(1, min(_CORES or 1, int(asked) if asked.isdigit() and int(asked) else 99))


def _executor(n):
    ex = _pool.get(n)
    if ex is None:
        with _lock:
            ex = _pool.get(n)
            if ex is None:
                ex = _pool[n] = ThreadPoolExecutor(n, thread_name_prefix="ember-qmatmul")
    return ex


PATHS = ("auto", "fused", "decode", "numpy")


def qmatmul_rows(x2, w, out, *, path="auto", chunk_rows=None):
    """``out[:] = x2 @ dequantize(w).T``: x2 C-contiguous float32 (M, K), w a 2-D host
    weight (``raw``, ``ggml_type``, ``shape`` (N, K), ``dequantize_rows``), out float32
    (M, N), returned.

    ``path``: "fused" (numba's fused dot kernels), "decode" (numba's row decoders + GEMM),
    "numpy" (numpy's dequantizer + GEMM, the reference), or "auto": fused for at most
    FUSED_MAX_ROWS rows of x, decode for more, numpy where numba is missing (or
    EMBER_JIT=0) or the weight is no ggml block type. ``chunk_rows``: weight rows per
    GEMM on the dequantizing paths (default about CHUNK_BYTES of f32)."""
    if path not in PATHS:
        raise ValueError(f"qmatmul: path must be one of {PATHS}, got {path!r}")
    kernels = _kernels() if path != "numpy" else None
    t = getattr(w, "ggml_type", None)  # a duck-typed host weight may only dequantize rows
    pair = kernels[0].get(int(t)) if kernels is not None and t is not None else None
    if pair is None and path in ("fused", "decode"):
        raise UnsupportedDType(
            f"qmatmul: no {path} CPU kernel for ggml type {t!r} here (the kernels need "
            f"numba: pip install 'ember[jit]')",
            ggml_type=t,
        )
    if pair is None:
        return _dequantize_gemm(x2, w, out, chunk_rows, None, None)
    if path == "fused" or (path == "auto" and x2.shape[0] <= FUSED_MAX_ROWS):
        return _fused(pair[0], kernels[1], x2, w, out)
    return _dequantize_gemm(x2, w, out, chunk_rows, pair[1], kernels[1])


def _fused(kernel, f16, x2, w, out):
    n_out, n_in = w.shape
    raw = w.raw.reshape(n_out, -1)
    xs = x2.reshape(x2.shape[0], n_in // 16, 16).sum(-1, dtype=np.float32)
    n = _threads()
    if n == 1 or raw.nbytes < _SPLIT_MIN_BYTES or n_out < 2 * n:
        kernel(raw, x2, xs, out, 0, n_out, f16)
        return out
    bounds = [n_out * i // n for i in range(n + 1)]
    ex = _executor(n - 1)
    futs = [ex.submit(kernel, raw, x2, xs, out, bounds[i], bounds[i + 1], f16) for i in range(1, n)]
    kernel(raw, x2, xs, out, bounds[0], bounds[1], f16)
    for f in futs:
        f.result()
    return out


def _dequantize_gemm(x2, w, out, chunk_rows, decode, f16):
    """Chunks of rows dequantized (by numba's row decoder where there is one, else by
    numpy: the same bits) into one reused buffer, each chunk one GEMM."""
    n_out, n_in = w.shape
    if chunk_rows is None:
        chunk_rows = max(16, CHUNK_BYTES // max(1, 4 * n_in))
    step = max(1, min(int(chunk_rows), n_out))
    buf = np.empty((step, n_in), np.float32)
    raw = w.raw.reshape(n_out, -1) if decode is not None else None
    for r0 in range(0, n_out, step):
        r1 = min(n_out, r0 + step)
        if decode is not None:
            chunk = buf[: r1 - r0]
            decode(raw, chunk, r0, r1, f16)
        else:
            chunk = w.dequantize_rows(r0, r1, out=buf[: r1 - r0])
        np.matmul(x2, chunk.T, out=out[:, r0:r1])
    return out


__all__ = ["CHUNK_BYTES", "FUSED_MAX_ROWS", "PATHS", "jit_available", "qmatmul_rows"]
