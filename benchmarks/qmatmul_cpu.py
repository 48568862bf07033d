"""Quantized matmul candidates on the CPU, one decode step's weights (x has 1 row).

    python benchmarks/qmatmul_cpu.py [--model smollm2|llama100m] [--rounds N]

Times one token's worth of matmuls (every layer's q/k/v, o, gate/up and down, and the
output head) of SmolLM2-135M (Q4_1, head Q8_0) or the random 100M Llama of llm.py (Q4_K),
on random blocks, for:

  numpy dequantize + GEMM   today's path: rows dequantized a chunk at a time, BLAS gemv
  int8 repack + GEMM        values unpacked to int8 once at load, per token each chunk is
                            cast to f32, scaled and multiplied by BLAS (pure numpy)
  fused kernels, 1 / 2 thr  llvm_quant's: per-block dots on the raw blocks
  q8 activations (numba)    Q4_1 only: x quantized to int8 per 32, integer block dots (a
                            numba kernel of this benchmark's own, needs numba)
                            (llama.cpp's scheme; not exact to f32 rounding)
  f32 dense BLAS            the dequantized weight (5.5x the file for Q4_1): the bar

Figures are ms per token and tokens/s of the matmuls alone; compare within one run.

    python benchmarks/qmatmul_cpu.py --types [--rounds N]

instead times each ggml type's fused kernel alone on one thread, on a 2048 x 768 weight of
random blocks (x one row), in G weights/s, beside f32 BLAS (on its own threads) on the same
weight dequantized and hot in the caches, as the quantized one is.
"""

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

MODELS = {  # (hidden, intermediate, layers, q heads, kv heads, vocab, type, head type)
    "smollm2": (576, 1536, 30, 9, 3, 49152, "Q4_1", "Q8_0"),
    "llama100m": (768, 2048, 8, 12, 4, 32000, "Q4_K", "Q4_K"),
}


def shapes(name):
    h, inter, layers, nq, nkv, vocab, t, th = MODELS[name]
    kv = h // nq * nkv
    per_layer = [(h + 2 * kv, h, t), (h, h, t), (2 * inter, h, t), (h, inter, t)]
    return per_layer * layers + [(vocab, h, th)]


def make_weights(name, rng):
    from ember.io.quant import BLOCK_SIZES, GGMLType, QTensor
    from test_gguf import random_blocks

    out = []
    cache = {}
    for n, k, t in shapes(name):
        key = (n, k, t)
        if key not in cache:  # layers share one random weight per shape: the timing is the same
            gt = GGMLType[t]
            raw = random_blocks(rng, gt, n * k // BLOCK_SIZES[gt][0])
            cache[key] = QTensor(raw.reshape(-1), gt, (n, k))
        out.append(cache[key])
    return out


def time_it(fn, rounds):
    fn()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def int8_repack(w):
    """(int8 values, per-block scale, per-block offset) of a 32-block type, made at load."""
    W = w.dequantize()
    n, k = W.shape
    blocks = W.reshape(n, k // 32, 32)
    lo, hi = blocks.min(-1, keepdims=True), blocks.max(-1, keepdims=True)
    d = np.where(hi > lo, (hi - lo) / 255.0, 1.0).astype(np.float32)
    q = np.round((blocks - lo) / d - 128).astype(np.int8)
    return q.reshape(n, k), d[..., 0], (lo[..., 0] + 128 * d[..., 0]).astype(np.float32)


def int8_gemm(x, packed, out):
    q, d, m = packed
    n, k = q.shape
    step = max(16, (1 << 20) // (4 * k))
    buf = np.empty((step, k), np.float32)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        b = buf[: r1 - r0]
        np.copyto(b, q[r0:r1], casting="unsafe")
        b3 = b.reshape(r1 - r0, -1, 32)
        np.multiply(b3, d[r0:r1, :, None], out=b3)
        np.add(b3, m[r0:r1, :, None], out=b3)
        np.matmul(x, b.T, out=out[:, r0:r1])


def q8_kernel():
    import numba

    @numba.njit(nogil=True, fastmath=True, cache=True)
    def dot_q4_1_q8(raw, xq, xd, xs, out, f16):
        nb = raw.shape[1] // 20
        for r in range(raw.shape[0]):
            row = raw[r]
            acc = np.float32(0.0)
            for b in range(nb):
                o, k = b * 20, b * 32
                s = np.int32(0)
                for j in range(16):
                    v = np.int32(row[o + 4 + j])
                    s += (v & 15) * np.int32(xq[k + j]) + (v >> 4) * np.int32(xq[k + 16 + j])
                d = f16[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]
                m = f16[np.int64(row[o + 2]) | (np.int64(row[o + 3]) << 8)]
                acc += d * xd[b] * np.float32(s) + m * xs[b]
            out[0, r] = acc

    return dot_q4_1_q8


TYPES_SHAPE = (2048, 768)  # a multiple of every block size (256)


def per_type(rounds):
    """Each ggml type's fused kernel on one thread: G weights/s, and f32 BLAS beside it."""
    import functools

    from ember.backends import llvm_quant
    from ember.io.quant import BLOCK_SIZES, GGMLType, QTensor
    from test_gguf import random_blocks

    rng = np.random.default_rng(0)
    n, k = TYPES_SHAPE
    x = rng.standard_normal((1, k)).astype(np.float32)
    out = np.empty((1, n), np.float32)
    print(f"fused kernels, one thread, {n} x {k}, load {os.getloadavg()[0]:.2f}")
    for t in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
        gt = GGMLType[t]
        w = QTensor(random_blocks(rng, gt, n * k // BLOCK_SIZES[gt][0]).reshape(-1), gt, (n, k))
        raw = w.raw.reshape(n, -1)
        kernel = functools.partial(llvm_quant.for_type(gt).dot, raw, x, out, 0, n)
        dense = w.dequantize()

        def fused(kernel=kernel):
            for _ in range(20):
                kernel()

        def blas(dense=dense):
            for _ in range(20):
                np.matmul(x, dense.T, out=out)

        fused()
        tf, tb = time_it(fused, rounds) / 20, time_it(blas, rounds) / 20
        print(
            f"  {t:5s} {tf * 1e3:7.3f} ms {n * k / tf / 1e9:6.2f} G weights/s   "
            f"f32 BLAS, its threads {tb * 1e3:7.3f} ms"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--types", action="store_true", help="each type's fused kernel alone")
    args = ap.parse_args()
    from ember.backends import array_qmatmul as aq

    if args.types:
        if not aq.jit_available():
            sys.exit("--types needs the compiled kernels (pip install 'ember[jit]')")
        per_type(args.rounds)
        return

    rng = np.random.default_rng(0)
    ws = make_weights(args.model, rng)
    h = MODELS[args.model][0]
    xs_in = {k: rng.standard_normal((1, k)).astype(np.float32) for k in {w.shape[1] for w in ws}}
    outs = [np.empty((1, w.shape[0]), np.float32) for w in ws]
    uniq = {id(w): w for w in ws}
    dense = {i: u.dequantize() for i, u in uniq.items()}
    runs = {}

    def each(fn):
        def step():
            for w, o in zip(ws, outs, strict=True):
                fn(xs_in[w.shape[1]], w, o)

        return step

    runs["numpy dequantize + GEMM"] = each(lambda x, w, o: aq.qmatmul_rows(x, w, o, path="numpy"))
    if all(w.ggml_type.name in ("Q4_0", "Q4_1", "Q8_0") for w in ws):
        packed = {i: int8_repack(u) for i, u in uniq.items()}
        runs["int8 repack + GEMM"] = each(lambda x, w, o: int8_gemm(x, packed[id(w)], o))
    if aq.jit_available():
        from ember.backends import row_parallel

        fused = each(lambda x, w, o: aq.qmatmul_rows(x, w, o, path="fused"))
        row_parallel._state["workers"] = 1  # the numpy backend's row threads, forced
        runs["fused kernels, 1 thread"] = time_it(fused, args.rounds)
        row_parallel._state["workers"] = 2
        runs["fused kernels, 2 threads"] = each(
            lambda x, w, o: aq.qmatmul_rows(x, w, o, path="fused")
        )
        if MODELS[args.model][6] == "Q4_1":
            # half bits -> f32, the table the numba candidate reads its scales from
            F16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
            F16 = F16.astype(np.float32)
            k8 = q8_kernel()

            def q8(x, w, o):
                if w.ggml_type.name != "Q4_1":
                    return aq.qmatmul_rows(x, w, o, path="fused")
                xb = x.reshape(-1, 32)
                xd = (np.abs(xb).max(-1) / 127.0).astype(np.float32)
                xq = np.round(xb / np.where(xd > 0, xd, 1)[:, None]).astype(np.int8).reshape(-1)
                k8(w.raw.reshape(w.shape[0], -1), xq, xd, xb.sum(-1), o, F16)

            runs["q8 activations (numba, 1 thread)"] = each(q8)
    runs["f32 dense BLAS"] = each(lambda x, w, o: np.matmul(x, dense[id(w)].T, out=o))
    print(f"{args.model}: {len(ws)} matmuls per token, hidden {h}, load {os.getloadavg()[0]:.2f}")
    base = None
    for name, fn in runs.items():
        t = fn if isinstance(fn, float) else time_it(fn, args.rounds)
        base = base or t
        print(f"  {name:34s} {t * 1e3:8.2f} ms/token {1 / t:8.1f} tok/s  {base / t:5.2f}x numpy")


if __name__ == "__main__":
    main()
