"""The text-generation demo's Python side, run in the page's worker (web/static/generate.html).

The model (a tiny Llama made by build_scripts/make_tiny_llama.py) is fetched the way the
embedding demo fetches its own: config and tokenizer into Pyodide's file system, the
weights into a JS ArrayBuffer (byte progress) and from there straight into GPU buffers.
Generation is ember's own `TextGeneration`, iterated with `async for`: every step's logits
come back through the async readback, so the worker's event loop keeps running, and each
text delta is posted to the page as soon as it is decoded:

    {type: "delta", text, tokens, seconds}      (tokens: ids generated so far)

The page's Stop button posts {type: "generate-stop"} to the worker; the worker's own
handler ignores it, and a listener added here sets a flag the loop checks between steps
(the loop awaits each readback, so the message is handled while it runs).

Answers are JSON strings, like page_runtime's.
"""

import json
import time

from .demo_embed import _fetch_model_to_gpu, _progress

DEFAULT_MODEL = "tiny-llama-random"
_state = {}


def _listen_for_stop():
    """Once per worker: a message listener that raises the stop flag."""
    if "listener" in _state:
        return
    import js
    from pyodide.ffi import create_proxy

    def on_message(event):
        data = event.data
        if getattr(data, "type", None) == "generate-stop":
            _state["stop"] = True

    _state["listener"] = create_proxy(on_message)  # kept alive for the worker's lifetime
    js.self.addEventListener("message", _state["listener"])


def _post(message):
    import js
    from pyodide.ffi import to_js

    js.postMessage(to_js(message, dict_converter=js.Object.fromEntries))


async def load(manifest_json, name=DEFAULT_MODEL):
    """Fetch model `name` from the bundle, put it on the WebGPU device and compile its
    kernels (a two-token warm-up); returns JSON with its size and each step's seconds."""
    from ember.generation import TextGeneration
    from ember.models.llama import LlamaConfig, LlamaForCausalLM, merge_generation_config
    from ember.nn import VarBuilder
    from ember.tokenizers import Tokenizer

    model_entry = json.loads(manifest_json).get("models", {}).get(name)
    if model_entry is None:
        raise FileNotFoundError(
            f"the bundle has no model {name!r}: `make web` makes it with "
            f"build_scripts/make_tiny_llama.py (needs torch, transformers and tokenizers)"
        )
    files = model_entry["files"]
    root, device, tensors, t0, t1 = await _fetch_model_to_gpu(model_entry, name)
    config = LlamaConfig.from_file(root)
    merge_generation_config(config, root)
    model = LlamaForCausalLM(
        config,
        VarBuilder.from_tensors(tensors, device=device, label=f"{name}/model.safetensors"),
        device,
    )
    tokenizer = Tokenizer.from_file(f"{root}/tokenizer.json")
    t2 = time.perf_counter()
    _progress("model", 0.9, "Compiling the kernels (two tokens)")
    warm = TextGeneration(model, tokenizer, "Hello there", max_new_tokens=2)
    async for _ in warm:
        pass
    t3 = time.perf_counter()
    _state.update(model=model, tokenizer=tokenizer, name=name)
    _progress("ready", 1.0, f"{name} ready")
    return json.dumps(
        {
            "model": name,
            "bytes": sum(files.values()),
            "parameters": model.num_parameters(),
            "layers": config.num_hidden_layers,
            "hidden": config.hidden_size,
            "vocab": config.vocab_size,
            "seconds": {"download": t1 - t0, "load": t2 - t1, "warm_up": t3 - t2},
        }
    )


async def generate(
    prompt, max_new_tokens=32, temperature=0.0, top_k=0, top_p=1.0, seed=None, ignore_eos=False
):
    """Stream a continuation of `prompt`: a "delta" message per piece of text as it is
    decoded; returns JSON with the prompt's and the new token ids, the text and timings
    (tokens/s counts the decode steps after the first token, which also holds the
    prompt's pass)."""
    from ember.generation import TextGeneration

    model, tokenizer = _state.get("model"), _state.get("tokenizer")
    if model is None:
        raise RuntimeError("the model is not loaded yet: call demo_generate.load() first")
    gen = TextGeneration(
        model,
        tokenizer,
        prompt,
        max_new_tokens=int(max_new_tokens),
        temperature=float(temperature),
        top_k=int(top_k),
        top_p=float(top_p),
        seed=None if seed is None else int(seed),
        stop_token_ids=() if ignore_eos else None,
    )
    _listen_for_stop()
    _state["stop"] = False
    t0 = time.perf_counter()
    first = None
    deltas = 0
    stop_reason = None
    async for delta in gen:
        now = time.perf_counter() - t0
        if first is None:
            first = now
        deltas += 1
        _post({"type": "delta", "text": delta, "tokens": len(gen.token_ids), "seconds": now})
        if _state["stop"]:  # between steps: no readback is in flight
            stop_reason = "stopped"
            break
    total = time.perf_counter() - t0
    n = len(gen.token_ids)
    decode = (n - 1) / (total - first) if first is not None and n > 1 and total > first else None
    return json.dumps(
        {
            "prompt_ids": gen.prompt_ids,
            "token_ids": gen.token_ids,
            "text": gen.text,
            "stop_reason": stop_reason or gen.stop_reason,
            "deltas": deltas,
            "seconds": total,
            "first_delta_seconds": first,
            "tokens_per_second": n / total if total else None,
            "decode_tokens_per_second": decode,
        }
    )
