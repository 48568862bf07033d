"""Text generation speed and memory: a random ~100M-parameter Llama (hidden 768, 8 layers,
GQA 12/4, intermediate 2048, vocab 32000) on ember (cpu f32, cpu Q4_K GGUF, wgpu f32, wgpu Q4_K GGUF)
next to transformers on torch CPU.

    python benchmarks/llm.py [--prompt 128] [--decode 32] [--skip-wgpu] [--keep DIR] [--threads N]
                             [--rounds N]

Every engine runs in its own fresh process and reports:
  prompt tok/s   128 prompt tokens in one forward pass (the KV cache filled)
  decode tok/s   one token per forward pass through the cache, greedy, after the prompt
  weights        bytes the weights occupy (Q4_K at its packed size)
  peak RSS       VmHWM of that process (load + run)
Each engine does one warm-up generation first. The Q4_K file is written with the
test-side encoder (tests/ggml_encode.py) and llama.cpp's names. Figures, not pass/fail.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

CONFIG = {
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 8,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 1024,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-5,
}


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def make_model(out_dir):
    """Save the random model (safetensors) and its Q4_K GGUF; returns their paths."""
    import torch
    import transformers
    from ggml_encode import write_llama_gguf

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    hf_dir = os.path.join(out_dir, "hf")
    model.save_pretrained(hf_dir, safe_serialization=True)
    gguf_path = os.path.join(out_dir, "q4k.gguf")
    write_llama_gguf(gguf_path, model, {"linear": "Q4_K", "embed": "Q4_K", "output": "Q4_K"})
    n = sum(p.numel() for p in model.parameters())
    return hf_dir, gguf_path, n


# --- workers: each runs in a fresh process and prints one JSON line ------------------------------
def worker_torch(hf_dir, n_prompt, n_decode):
    import torch
    import transformers

    t0 = time.perf_counter()
    model = transformers.LlamaForCausalLM.from_pretrained(hf_dir).eval()
    load = time.perf_counter() - t0
    ids = torch.randint(
        3, CONFIG["vocab_size"], (1, n_prompt), generator=torch.Generator().manual_seed(1)
    )

    def run(n_dec):
        with torch.no_grad():
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            t1 = time.perf_counter()
            past = out.past_key_values
            for _ in range(n_dec):
                out = model(nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    run(4)
    prompt_s, decode_s = run(n_decode)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"load_s": load, "prompt_s": prompt_s, "decode_s": decode_s, "weights": weights}


def worker_ember(path, device, n_prompt, n_decode, gguf):
    import ember
    import numpy as np
    from ember.models.gguf_llama import load_gguf_model
    from ember.models.llama import LlamaForCausalLM

    dev = ember.Device.parse(device)
    t0 = time.perf_counter()
    model = (
        load_gguf_model(path, device=dev)
        if gguf
        else LlamaForCausalLM.from_pretrained(path, device=dev)
    )
    load = time.perf_counter() - t0
    # The weights on the device right after load (None where the backend keeps no count).
    on_device = dev.memory_stats().get("bytes_in_use")
    ids = np.random.default_rng(1).integers(3, CONFIG["vocab_size"], (1, n_prompt))

    def run(n_dec):
        cache = model.new_cache(1, n_prompt + n_dec + 1)
        t0 = time.perf_counter()
        logits = model(ids, cache=cache, last_only=True).numpy()
        nxt = int(logits[0, -1].argmax())
        t1 = time.perf_counter()
        for _ in range(n_dec):
            logits = model([[nxt]], cache=cache, last_only=True).numpy()
            nxt = int(logits[0, -1].argmax())
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    run(4)
    before = dev.memory_stats().get("buffers_created")
    prompt_s, decode_s = run(n_decode)
    out = {
        "load_s": load,
        "prompt_s": prompt_s,
        "decode_s": decode_s,
        "weights": model.weight_bytes(),
    }
    if before is not None:
        out["gpu_buffers_created_in_run"] = dev.memory_stats()["buffers_created"] - before
        out["gpu_bytes_after_load"] = on_device
    return out


def _worker_main(argv):
    kind = argv[0]
    if kind == "torch":
        res = worker_torch(argv[1], int(argv[2]), int(argv[3]))
    else:
        res = worker_ember(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5] == "gguf")
    res["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(res))


def spawn(args, timeout, threads=None):
    env = dict(os.environ)
    if threads:
        # Both engines get the same thread count: OpenBLAS (numpy) and OpenMP (torch).
        env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    try:
        out = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--worker", *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()
        return {"error": tail[-1] if tail else f"exit status {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return _worker_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--skip-wgpu", action="store_true")
    ap.add_argument("--keep", default=None, help="reuse/keep the model files in this directory")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per engine")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every engine this many times, interleaved, keeping its fastest",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="BLAS/OpenMP threads for every engine (default: the libraries' own); "
        "1 gives steadier ratios on a busy machine",
    )
    args = ap.parse_args()

    work = args.keep or tempfile.mkdtemp(prefix="ember-llm-bench-")
    hf_dir, gguf_path = os.path.join(work, "hf"), os.path.join(work, "q4k.gguf")
    if not (
        os.path.exists(os.path.join(hf_dir, "model.safetensors")) and os.path.exists(gguf_path)
    ):
        t0 = time.perf_counter()
        _, _, n = make_model(work)
        print(
            f"random Llama: {n / 1e6:.1f}M parameters, written in {time.perf_counter() - t0:.1f} s to {work}"
        )
    try:
        from common import machine_report

        for line in machine_report():
            print(line)
    except ImportError:
        pass
    p, d = args.prompt, args.decode
    engines = [
        ("torch cpu f32 (transformers)", ["torch", hf_dir, p, d]),
        ("ember cpu f32", ["ember", hf_dir, "cpu", p, d, "hf"]),
        ("ember cpu Q4_K (gguf)", ["ember", gguf_path, "cpu", p, d, "gguf"]),
    ]
    if not args.skip_wgpu:
        engines.append(("ember wgpu f32", ["ember", hf_dir, "wgpu", p, d, "hf"]))
        engines.append(
            (
                "ember wgpu Q4_K (gguf, quantized on device)",
                ["ember", gguf_path, "wgpu", p, d, "gguf"],
            )
        )
    results = {}
    for _ in range(args.rounds):  # engines interleaved; each keeps its fastest round
        for name, a in engines:
            r = spawn(a, args.timeout, args.threads)
            old = results.get(name)
            if (
                old is None
                or "error" in old
                or ("error" not in r and r["decode_s"] < old["decode_s"])
            ):
                results[name] = r
    base = results.get("torch cpu f32 (transformers)", {})
    base_w = results.get("ember cpu f32", {}).get("weights")
    threads = f"{args.threads} BLAS/OpenMP thread(s) each" if args.threads else "default threads"
    print(f"\nprompt {p} tokens, decode {d} tokens, greedy, batch 1, {threads}")
    head = (
        f"{'engine':42s} {'prompt tok/s':>12s} {'decode tok/s':>12s} {'decode vs torch':>15s} "
        f"{'weights MB':>10s} {'vs f32':>7s} {'peak RSS MB':>11s}"
    )
    print(head)
    print("-" * len(head))
    for name, r in results.items():
        if "error" in r:
            print(f"{name:42s} error: {r['error']}")
            continue
        ptok, dtok = p / r["prompt_s"], d / r["decode_s"]
        vs = f"{dtok / (d / base['decode_s']):.2f}x" if "decode_s" in base else "-"
        wr = f"{r['weights'] / base_w:.2f}x" if base_w else "-"
        print(
            f"{name:42s} {ptok:12.1f} {dtok:12.1f} {vs:>15s} {r['weights'] / 1e6:10.1f} {wr:>7s} "
            f"{r['peak_rss_mb']:11.0f}"
        )
        if "gpu_buffers_created_in_run" in r:
            print(
                f"{'':42s} GPU buffers created during the timed run: {r['gpu_buffers_created_in_run']}"
            )
        if r.get("gpu_bytes_after_load") is not None:
            print(
                f"{'':42s} GPU memory in use after load: {r['gpu_bytes_after_load'] / 1e6:.1f} MB"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
