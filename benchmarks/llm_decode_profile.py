"""Where one decode step of a GGUF model goes on ember's CPU backend: the step's time,
the time inside each backend method (outermost calls only, so a composite's inner calls
count for it), Python outside the backend (the rest), a cProfile listing, and the
quantized matmul kernels alone (GB/s of weight bytes read) on 1 and 2 threads, and what
a step builds (`counts`: Layouts, Tensors, the array backend's views, backend calls by
method, nested ones included).

    python benchmarks/llm_decode_profile.py [--gguf FILE] [--prompt 128] [--decode 32]
                                            [--threads 1|2]
                                            [--what steps,ops,counts,cprofile,kernels]

The default file is ember.packaged's SmolLM2-135M-Instruct Q4_1. Figures, not pass/fail;
the machine may be shared: compare within one run.
"""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections import defaultdict

# The backend methods a forward pass calls (timed where they are the outermost call).
TIMED = (
    "qlinear",
    "qmatmul",
    "attention_step",
    "gated_activation",
    "layer_norm",
    "rms_norm",
    "rope",
    "scaled_dot_product_attention",
    "matmul",
    "softmax",
    "binary",
    "unary",
    "copy_into",
    "copy_strided",
    "cast",
    "index_select",
    "from_host",
    "full",
    "empty",
    "linear",
    "where",
    "reduce",
)


def load(path):
    from ember.models.gguf_llama import load_gguf_model

    return load_gguf_model(path)


def prompt_then(model, n_prompt, n_decode, each=None):
    """Run a prompt and n_decode greedy steps; returns the decode steps' seconds."""
    import numpy as np

    ids = np.random.default_rng(1).integers(3, model.config.vocab_size, (1, n_prompt))
    cache = model.new_cache(1, n_prompt + n_decode + 1)
    nxt = int(model(ids, cache=cache, last_only=True).numpy()[0, -1].argmax())
    times = []
    for _ in range(n_decode):
        t0 = time.perf_counter()
        if each is not None:
            with each():
                logits = model([[nxt]], cache=cache, last_only=True).numpy()
        else:
            logits = model([[nxt]], cache=cache, last_only=True).numpy()
        times.append(time.perf_counter() - t0)
        nxt = int(logits[0, -1].argmax())
    return times


class OpTimer:
    """Wraps a backend instance's methods: seconds and calls per method, outermost only."""

    def __init__(self, backend):
        self.backend = backend
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)
        self.depth = 0
        self.active = False
        self.wrapped = [name for name in TIMED if hasattr(backend, name)]
        for name in self.wrapped:
            setattr(backend, name, self._wrap(name, getattr(backend, name)))

    def close(self):
        """The backend's own methods back (the wrappers were instance attributes)."""
        for name in self.wrapped:
            delattr(self.backend, name)

    def _wrap(self, name, fn):
        def timed(*a, **k):
            if not self.active or self.depth:
                return fn(*a, **k)
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.seconds[name] += time.perf_counter() - t0
                self.calls[name] += 1
                self.depth -= 1

        return timed

    def __call__(self):
        timer = self

        class _On:
            def __enter__(self):
                timer.active = True

            def __exit__(self, *exc):
                timer.active = False

        return _On()


def report_ops(model, args):
    timer = OpTimer(model.device.backend)
    try:
        steps = prompt_then(model, args.prompt, args.decode, timer)
    finally:
        timer.close()
    n = len(steps)
    total = sum(steps) / n * 1e3
    inside = sum(timer.seconds.values()) / n * 1e3
    print(f"per decode step: {total:.2f} ms (ops timer on; {1e3 / total:.1f} tok/s)")
    for name in sorted(timer.seconds, key=timer.seconds.get, reverse=True):
        ms = timer.seconds[name] / n * 1e3
        print(f"  {name:30s} {ms:7.2f} ms {timer.calls[name] / n:6.0f} calls  {ms / total:5.1%}")
    print(
        f"  {'python outside the backend':30s} {total - inside:7.2f} ms  {1 - inside / total:5.1%}"
    )


class Counter:
    """Counts, while on, every Layout and Tensor built (their classes' __init__ wrapped)
    and every call of the backend's public methods and its `view` (instance wrappers)."""

    def __init__(self, backend):
        from ember.layout import Layout
        from ember.tensor import Tensor

        self.counts = defaultdict(int)
        self.active = False
        self.classes = [(cls, cls.__init__) for cls in (Layout, Tensor)]
        for cls, init in self.classes:
            cls.__init__ = self._count(f"{cls.__name__} built", init)
        self.backend = backend
        self.wrapped = [
            name
            for name in dir(type(backend))
            if (not name.startswith("_") or name == "view")
            and callable(getattr(type(backend), name, None))
        ]
        for name in self.wrapped:
            setattr(backend, name, self._count(f"backend.{name}", getattr(backend, name)))

    def _count(self, key, fn):
        def counted(*a, **k):
            if self.active:
                self.counts[key] += 1
            return fn(*a, **k)

        return counted

    def close(self):
        for cls, init in self.classes:
            cls.__init__ = init
        for name in self.wrapped:
            delattr(self.backend, name)

    def __call__(self):
        counter = self

        class _On:
            def __enter__(self):
                counter.active = True

            def __exit__(self, *exc):
                counter.active = False

        return _On()


def report_counts(model, args):
    counter = Counter(model.device.backend)
    try:
        n = len(prompt_then(model, args.prompt, args.decode, counter))
    finally:
        counter.close()
    counts = counter.counts
    calls = sum(v for k, v in counts.items() if k.startswith("backend.") and k != "backend.view")
    print(f"per decode step ({model.config.num_hidden_layers} layers):")
    for key in ("Layout built", "Tensor built", "backend.view"):
        print(f"  {key:34s} {counts[key] / n:8.1f}")
    print(f"  {'backend calls (all methods)':34s} {calls / n:8.1f}")
    for key in sorted(counts, key=counts.get, reverse=True):
        if key.startswith("backend.") and key != "backend.view":
            print(f"    {key[8:]:32s} {counts[key] / n:8.1f}")


def report_kernels(model, args):
    """Each distinct quantized weight shape of one layer, and the head: ms and GB/s."""
    import numpy as np
    from ember.backends import array_qmatmul, row_parallel
    from ember.models.quant_layers import QuantLinear

    seen = {}
    for name, m in model.named_modules():
        if isinstance(m, QuantLinear):
            key = (m.qweight.ggml_type, m.qweight.shape, type(m.qweight).__name__)
            seen.setdefault(key, (name, m.qweight))
    for (gt, shape, kind), (name, w) in seen.items():
        x = np.random.default_rng(0).standard_normal((1, shape[1])).astype(np.float32)
        out = np.empty((1, shape[0]), np.float32)
        line = f"  {name:34s} {gt.name:5s} {shape[0]:6d}x{shape[1]:<5d} {kind:14s}"
        for threads in (1, 2):
            row_parallel._state["workers"] = threads
            for _ in range(3):
                array_qmatmul.qmatmul_rows(x, w, out)
            reps = []
            for _ in range(20):
                t0 = time.perf_counter()
                array_qmatmul.qmatmul_rows(x, w, out)
                reps.append(time.perf_counter() - t0)
            s = statistics.median(reps)
            line += f"  {threads}T {s * 1e3:6.3f} ms {w.nbytes / s / 1e9:5.2f} GB/s"
        print(line)
    row_parallel._state["workers"] = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", default=None)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--threads", type=int, default=None, help="EMBER_CPU_THREADS for the steps")
    ap.add_argument("--what", default="steps,ops,counts,cprofile,kernels")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if args.threads:
        os.environ["EMBER_CPU_THREADS"] = str(args.threads)
    sys.setrecursionlimit(10000)
    from ember import packaged

    path = args.gguf or packaged.file("smollm2-135m-instruct")
    model = load(path)
    from ember.backends.array_qmatmul import kernels_loaded
    from ember.backends.row_parallel import workers

    print(f"load average: {os.getloadavg()}")
    what = set(args.what.split(","))
    prompt_then(model, 8, 4)  # warm-up (the kernels compile or load from ember's cache)
    kinds = " + ".join(kernels_loaded()) or "numpy"
    print(f"{os.path.basename(path)}: kernels {kinds}, threads {workers()}")
    if "steps" in what:
        steps = prompt_then(model, args.prompt, args.decode)
        med = statistics.median(steps)
        print(
            f"decode step: median {med * 1e3:.2f} ms ({1 / med:.1f} tok/s), "
            f"min {min(steps) * 1e3:.2f} ms"
        )
    if "ops" in what:
        report_ops(model, args)
    if "counts" in what:
        report_counts(model, args)
    if "cprofile" in what:
        prof = cProfile.Profile()

        class _Prof:
            def __enter__(self):
                prof.enable()

            def __exit__(self, *exc):
                prof.disable()

        prompt_then(model, args.prompt, args.decode, _Prof)
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    if "kernels" in what:
        report_kernels(model, args)


if __name__ == "__main__":
    main()
