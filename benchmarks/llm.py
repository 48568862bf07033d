"""Text generation speed and memory: a random ~100M-parameter Llama (hidden 768, 8 layers,
GQA 12/4, intermediate 2048, vocab 32000) on ember (cpu f32, cpu Q4_K GGUF, wgpu f32, wgpu Q4_K GGUF)
next to transformers on torch CPU; with --gguf, a real GGUF model (SmolLM2-135M-Instruct
Q4_1, say) on ember cpu quantized (its compiled kernels, and numpy alone), ember cpu f32
(the file dequantized once), ember wgpu with the weights kept quantized (unless
--skip-wgpu), transformers on torch CPU loaded from the same file, and llama.cpp
(llama-cpp-python, when installed) with the same thread count. The generation page's
figures (SmolLM2 in Chromium's WebGPU) come from benchmarks/generate_page.py.

    python benchmarks/llm.py [--prompt 128] [--decode 32] [--skip-wgpu] [--keep DIR] [--threads N]
                             [--rounds N] [--gguf FILE] [--skip-random] [--skip-engines A,B]

Every engine runs in its own fresh process and reports:
  prompt tok/s   128 prompt tokens in one forward pass (the KV cache filled)
  decode tok/s   one token per forward pass through the cache, greedy, after the prompt
  weights        bytes the weights occupy (Q4_K at its packed size)
  peak RSS       VmHWM of that process (load + run)
Each engine does one warm-up generation first. The Q4_K file is written with the
test-side encoder (tests/ggml_encode.py) and llama.cpp's names. Figures, not pass/fail.
On a GPU machine `--ember-devices cuda,wgpu --torch-device cuda` measures the random model's
ember f32 and Q4_K engines on those devices against transformers on torch CUDA (the "vs
torch" columns are then ratios to torch CUDA); --layers N shrinks the random model.
"""

import json
import os
import sys
import time

# argparse, signal, subprocess and tempfile are the parent's: imported in main and spawn,
# not in a worker, whose peak RSS is the engine's figure (they and what they import,
# shutil's compressors among them, were ~2 MB of every worker's)

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


def prompt_ids(vocab, n):
    """The prompt's token ids, the same for every engine. Not numpy.random: its import maps
    OpenSSL's libcrypto and four extension modules (4.6 MiB resident) into a worker whose
    figure is peak RSS, a cost of the harness that no engine should carry."""
    import random

    rng = random.Random(1)
    return [rng.randrange(3, vocab) for _ in range(n)]


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
def worker_torch(hf_dir, n_prompt, n_decode, device="cpu"):
    import torch
    import transformers

    t0 = time.perf_counter()
    model = transformers.LlamaForCausalLM.from_pretrained(hf_dir).eval().to(device)
    load = time.perf_counter() - t0
    ids = torch.randint(
        3, CONFIG["vocab_size"], (1, n_prompt), generator=torch.Generator().manual_seed(1)
    ).to(device)
    # On CUDA the forward passes are queued: wait for them before reading the clock.
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def run(n_dec):
        with torch.no_grad():
            t0 = time.perf_counter()
            out = model(ids, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            t1 = time.perf_counter()
            past = out.past_key_values
            for _ in range(n_dec):
                out = model(nxt, past_key_values=past, use_cache=True)
                past = out.past_key_values
                nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            sync()
            t2 = time.perf_counter()
        return t1 - t0, t2 - t1

    run(4)
    prompt_s, decode_s = run(n_decode)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"load_s": load, "prompt_s": prompt_s, "decode_s": decode_s, "weights": weights}


def worker_torch_gguf(path, hf_dir, n_prompt, n_decode):
    """transformers on torch CPU from a GGUF file (dequantized to f32 by transformers); the
    first run also saves that f32 model to hf_dir for ember's f32 engine."""
    import torch
    import transformers

    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), torch_dtype=torch.float32
    ).eval()
    load = time.perf_counter() - t0
    if not os.path.exists(os.path.join(hf_dir, "config.json")):
        _save_f32(model, hf_dir)
    vocab = model.config.vocab_size
    ids = torch.tensor([prompt_ids(vocab, n_prompt)])

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


def _save_f32(model, hf_dir):
    """The GGUF-loaded (already f32) model as a plain safetensors directory: transformers
    refuses save_pretrained on it, and a tied lm_head is the embedding."""
    from safetensors.torch import save_file

    os.makedirs(hf_dir, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, os.path.join(hf_dir, "model.safetensors"))
    cfg = model.config.to_dict()
    cfg.pop("quantization_config", None)
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(cfg, f)


# Set in llama.cpp's worker: its model loaded without extra buffer types. On an Intel host
# with AMX (a Sapphire Rapids KVM guest here) llama.cpp 0.3.36 built natively crashed in
# ggml_backend_amx_mul_mat (SIGSEGV, SmolLM2 Q4_1 and Gemma 3 Q4_K_M); a run that dies of
# SIGSEGV is redone this way, whatever its last log line was.
NO_EXTRA_BUFFERS = "EMBER_BENCH_LLAMACPP_NO_EXTRA_BUFTS"


def worker_llamacpp(path, n_prompt, n_decode, threads):
    """llama.cpp through llama-cpp-python: the prompt in one batch, then greedy tokens."""
    import llama_cpp
    import numpy as np

    if os.environ.get(NO_EXTRA_BUFFERS):
        # llama.cpp's extra buffer types (weights repacked for AMX and other kernels) off
        default_params = llama_cpp.llama_model_default_params

        def params():
            made = default_params()
            made.use_extra_bufts = False
            return made

        llama_cpp.llama_cpp.llama_model_default_params = params
        llama_cpp.llama.llama_cpp.llama_model_default_params = params
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(
        model_path=path,
        n_ctx=n_prompt + n_decode + 16,
        n_batch=n_prompt + n_decode + 16,  # scores has n_batch rows, indexed by position
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
    load = time.perf_counter() - t0
    vocab = llm.n_vocab()
    ids = prompt_ids(vocab, n_prompt)

    def run(n_dec):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t1 = time.perf_counter()
        for _ in range(n_dec):
            llm.eval([nxt])
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        return t1 - t0, time.perf_counter() - t1

    run(4)
    prompt_s, decode_s = run(n_decode)
    out = {"load_s": load, "prompt_s": prompt_s, "decode_s": decode_s}
    out["weights"] = os.path.getsize(path)
    if os.environ.get(NO_EXTRA_BUFFERS):
        out["note"] = "extra buffer types (AMX) off: the default run crashed"
    return out


def worker_ember(path, device, n_prompt, n_decode, gguf):
    import ember
    import numpy as np
    from ember.models.causal_lm import load_causal_lm
    from ember.models.gguf_llama import load_gguf_model

    dev = ember.Device.parse(device)
    t0 = time.perf_counter()
    # load_causal_lm: the directory's model_type picks the family (Gemma 3's f32 copy is
    # gemma3_text, not a Llama config)
    model = load_gguf_model(path, device=dev) if gguf else load_causal_lm(path, device=dev)
    load = time.perf_counter() - t0
    # The weights on the device right after load (None where the backend keeps no count).
    on_device = dev.memory_stats().get("bytes_in_use")
    vocab = model.config.vocab_size
    ids = np.array([prompt_ids(vocab, n_prompt)])

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
    from ember.backends.array_qmatmul import kernels_loaded

    out["kernels"] = kernels_loaded()
    if before is not None:
        out["gpu_buffers_created_in_run"] = dev.memory_stats()["buffers_created"] - before
        out["gpu_bytes_after_load"] = on_device
    return out


def _worker_main(argv):
    kind = argv[0]
    if kind == "torch":
        res = worker_torch(argv[1], int(argv[2]), int(argv[3]), *argv[4:5])
    elif kind == "torch-gguf":
        res = worker_torch_gguf(argv[1], argv[2], int(argv[3]), int(argv[4]))
    elif kind == "llamacpp":
        res = worker_llamacpp(argv[1], int(argv[2]), int(argv[3]), int(argv[4]))
    else:
        res = worker_ember(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5] == "gguf")
    res["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(res))


def spawn(args, timeout, threads=None, extra_env=None):
    import subprocess

    env = dict(os.environ, **(extra_env or {}))
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
        why = f"exit status {out.returncode}"
        return {"error": f"{why}: {tail[-1]}" if tail else why, "returncode": out.returncode}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return _worker_main(sys.argv[2:])
    import argparse
    import tempfile

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
    ap.add_argument("--gguf", default=None, help="a real GGUF model to measure as well")
    ap.add_argument("--skip-random", action="store_true", help="only the --gguf model")
    ap.add_argument(
        "--ember-devices",
        default="cpu,wgpu",
        help="devices of the random model's ember engines (cpu, wgpu, cuda; --skip-wgpu "
        "drops wgpu)",
    )
    ap.add_argument(
        "--torch-device", default="cpu", help="device of the random model's transformers peer"
    )
    ap.add_argument(
        "--layers",
        type=int,
        default=None,
        help=f"decoder layers of the random model (default {CONFIG['num_hidden_layers']})",
    )
    ap.add_argument(
        "--json-progress",
        action="store_true",
        help="print each engine's result as a JSON line as soon as it is measured",
    )
    ap.add_argument(
        "--skip-engines",
        default=None,
        help="comma-separated parts of engine names: engines whose name contains one are "
        "left out (e.g. 'numpy only')",
    )
    args = ap.parse_args()
    if args.layers:
        CONFIG["num_hidden_layers"] = args.layers

    if args.keep:
        measure(args, args.keep)
        return
    # the models' copies (f32 ones of hundreds of MB) in a folder of the run's own making,
    # removed when it ends, however it ends
    with tempfile.TemporaryDirectory(prefix="ember-llm-bench-") as work:
        measure(args, work)


def measure(args, work):
    """Every engine of every section, interleaved; the tables and the JSON."""
    import signal

    try:
        from common import machine_report

        for line in machine_report():
            print(line)
    except ImportError:
        pass
    print(f"load average at start: {os.getloadavg()}")
    sections = []
    if not args.skip_random:
        sections.append(random_section(args, work))
    if args.gguf:
        sections.append(gguf_section(args, work))
    skipped = [w.strip() for w in (args.skip_engines or "").split(",") if w.strip()]
    for _title, engines, _base, _f32, _size in sections:
        engines[:] = [e for e in engines if not any(w in e[0] for w in skipped)]
        for i, (name, a, env) in enumerate(engines):
            engines[i] = (name, a, env, {})
    for _ in range(args.rounds):  # engines interleaved; each keeps its fastest round
        for _title, engines, _base, _f32, _size in sections:
            for _name, a, env, results in engines:
                r = spawn(a, args.timeout, args.threads, env)
                if a[0] == "llamacpp" and r.get("returncode") == -signal.SIGSEGV:
                    r = spawn(a, args.timeout, args.threads, {**(env or {}), NO_EXTRA_BUFFERS: "1"})
                if args.json_progress:
                    progress = {"section": _title, "engine": _name, "result": r}
                    print(json.dumps({"progress": progress}), flush=True)
                old = results.get("r")
                if (
                    old is None
                    or "error" in old
                    or ("error" not in r and r["decode_s"] < old["decode_s"])
                ):
                    results["r"] = r
    print(f"load average at end: {os.getloadavg()}")
    threads = f"{args.threads} BLAS/OpenMP thread(s) each" if args.threads else "default threads"
    p, d = args.prompt, args.decode
    everything = {}
    for title, engines, base_name, f32_name, size in sections:
        results = {name: res["r"] for name, _, _, res in engines}
        everything[title] = results
        print(f"\n{title}: prompt {p} tokens, decode {d} tokens, greedy, batch 1, {threads}")
        report(results, p, d, base_name, f32_name, size)
    print(json.dumps(everything))


def random_section(args, work):
    hf_dir, gguf_path = os.path.join(work, "hf"), os.path.join(work, "q4k.gguf")
    if not (
        os.path.exists(os.path.join(hf_dir, "model.safetensors")) and os.path.exists(gguf_path)
    ):
        t0 = time.perf_counter()
        _, _, n = make_model(work)
        print(
            f"random Llama: {n / 1e6:.1f}M parameters, written in {time.perf_counter() - t0:.1f} s to {work}"
        )
    p, d = args.prompt, args.decode
    devices = [x.strip() for x in args.ember_devices.split(",") if x.strip()]
    torch_name = f"torch {args.torch_device} f32 (transformers)"
    engines = [(torch_name, ["torch", hf_dir, p, d, args.torch_device], None)]
    if "cpu" in devices:
        engines += [
            ("ember cpu f32", ["ember", hf_dir, "cpu", p, d, "hf"], None),
            ("ember cpu Q4_K (gguf)", ["ember", gguf_path, "cpu", p, d, "gguf"], None),
            (
                "ember cpu Q4_K (gguf, numpy only)",
                ["ember", gguf_path, "cpu", p, d, "gguf"],
                {"EMBER_JIT": "0"},
            ),
        ]
    for device in devices:
        if device == "cpu" or (device == "wgpu" and args.skip_wgpu):
            continue
        engines.append((f"ember {device} f32", ["ember", hf_dir, device, p, d, "hf"], None))
        engines.append(
            (
                f"ember {device} Q4_K (gguf, quantized on device)",
                ["ember", gguf_path, device, p, d, "gguf"],
                None,
            )
        )
    f32_name = f"ember {devices[0]} f32" if devices else None
    title = "random 100M Llama" if args.layers is None else f"random Llama, {args.layers} layers"
    return (title, engines, torch_name, f32_name, None)


def gguf_section(args, work):
    path = os.path.abspath(args.gguf)
    name = os.path.basename(path)
    hf_dir = os.path.join(work, name + ".f32")  # torch's dequantized copy, for ember f32
    p, d = args.prompt, args.decode
    torch_name = "torch cpu f32 (transformers, from the gguf)"
    engines = [
        (torch_name, ["torch-gguf", path, hf_dir, p, d], None),
        ("ember cpu f32 (dequantized once)", ["ember", hf_dir, "cpu", p, d, "hf"], None),
        ("ember cpu quantized", ["ember", path, "cpu", p, d, "gguf"], None),
        (
            "ember cpu quantized, numpy only",
            ["ember", path, "cpu", p, d, "gguf"],
            {"EMBER_JIT": "0"},
        ),
    ]
    if not args.skip_wgpu:  # the weights kept quantized on the device (the page's path)
        engines.append(("ember wgpu quantized", ["ember", path, "wgpu", p, d, "gguf"], None))
    try:
        import llama_cpp  # noqa: F401

        n = args.threads or os.cpu_count()
        engines.append((f"llama.cpp, {n} threads", ["llamacpp", path, p, d, n], None))
    except ImportError:
        print("llama-cpp-python is not installed: llama.cpp is left out")
    return (name, engines, torch_name, "ember cpu f32 (dequantized once)", os.path.getsize(path))


def report(results, p, d, base_name, f32_name, file_size):
    base = results.get(base_name, {})
    base_w = results.get(f32_name, {}).get("weights")
    f32 = results.get(f32_name, {})
    head = (
        f"{'engine':44s} {'prompt tok/s':>12s} {'vs torch':>8s} {'decode tok/s':>12s} "
        f"{'vs torch':>8s} {'vs f32':>7s} {'weights MB':>10s} {'peak RSS MB':>11s}"
    )
    if file_size:
        head += f" {'RSS/file':>8s}"
    print(head)
    print("-" * len(head))
    for name, r in results.items():
        if "error" in r:
            print(f"{name:44s} error: {r['error']}")
            continue
        ptok, dtok = p / r["prompt_s"], d / r["decode_s"]

        def ratio(other, key, mine):
            return (
                f"{mine / (p if key == 'prompt_s' else d) * other[key]:.2f}x"
                if key in other
                else "-"
            )

        line = (
            f"{name:44s} {ptok:12.1f} {ratio(base, 'prompt_s', ptok):>8s} {dtok:12.1f} "
            f"{ratio(base, 'decode_s', dtok):>8s} {ratio(f32, 'decode_s', dtok):>7s} "
            f"{r['weights'] / 1e6:10.1f} {r['peak_rss_mb']:11.0f}"
        )
        if file_size:
            line += f" {r['peak_rss_mb'] * 2**20 / file_size:7.2f}x"
        if base_w and r.get("weights"):
            line += f"  (weights {r['weights'] / base_w:.2f}x f32)"
        if "kernels" in r:
            line += f"  [{' + '.join(r['kernels']) or 'numpy'}]"
        if "note" in r:
            line += f"  [{r['note']}]"
        print(line)
        if "gpu_buffers_created_in_run" in r:
            print(
                f"{'':44s} GPU buffers created during the timed run: {r['gpu_buffers_created_in_run']}"
            )
        if r.get("gpu_bytes_after_load") is not None:
            print(
                f"{'':44s} GPU memory in use after load: {r['gpu_bytes_after_load'] / 1e6:.1f} MB"
            )


if __name__ == "__main__":
    main()
