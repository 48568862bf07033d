"""The semantic-search demo's Python side, run in the page's worker (web/static/embed.html).

The model's small files (config, tokenizer) are fetched into Pyodide's in-memory file
system; the weights are fetched into a JS ArrayBuffer with byte progress and uploaded from
it to the GPU without becoming Python bytes. The model is then the same BertModel and
SentenceEmbedder as natively. Answers are JSON strings, like page_runtime's.
"""

import json
import os
import time

_state = {}


def _progress(stage, fraction, text):
    import js
    from pyodide.ffi import to_js

    js.postMessage(
        to_js(
            {"type": "progress", "stage": stage, "fraction": fraction, "text": text},
            dict_converter=js.Object.fromEntries,
        )
    )


async def _fetch_file(url, path):
    import js

    response = await js.fetch(url)
    if not response.ok:
        raise FileNotFoundError(f"fetching {url}: HTTP {response.status}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write((await response.arrayBuffer()).to_bytes())


async def _fetch_array_buffer(url, size, name):
    """The file as a JS ArrayBuffer, filled chunk by chunk on the JS side (the bytes never
    become Python objects), reporting progress."""
    import js

    response = await js.fetch(url)
    if not response.ok:
        raise FileNotFoundError(f"fetching {url}: HTTP {response.status}")
    target = js.Uint8Array.new(size)
    reader = response.body.getReader()
    done = 0
    while True:
        chunk = await reader.read()
        if chunk.done:
            break
        target.set(chunk.value, done)
        done += int(chunk.value.length)
        _progress(
            "model",
            0.8 * done / size,
            f"Downloading {name} weights ({done / 1e6:.1f} / {size / 1e6:.1f} MB)",
        )
    if done != size:
        raise OSError(f"fetching {url}: got {done} bytes, the manifest says {size}")
    return target.buffer


async def _fetch_model_to_gpu(entry, name):
    """Model `name` of the bundle's manifest (`entry`: its path and files): the small files
    into Pyodide's file system under /models/<name>, model.safetensors through a JS
    ArrayBuffer straight onto the WebGPU device. Returns (root, device, tensors, t0, t1),
    t0 and t1 the perf_counter() before and after the download, for the caller's timings."""
    import ember
    from ember.io.js_buffers import load_safetensors_js

    files = entry["files"]
    t0 = time.perf_counter()
    root = f"/models/{name}"
    for rel in files:
        if rel != "model.safetensors":
            await _fetch_file(entry["path"] + rel, f"{root}/{rel}")
    weights = await _fetch_array_buffer(
        entry["path"] + "model.safetensors", files["model.safetensors"], name
    )
    t1 = time.perf_counter()
    _progress("model", 0.85, "Uploading the weights to the GPU")
    device = ember.Device.webgpu()
    # The ArrayBuffer goes with this frame: only the GPU copies outlive the call.
    tensors = load_safetensors_js(weights, device, name=f"{name}/model.safetensors")
    return root, device, tensors, t0, t1


async def load(manifest_json, name="all-MiniLM-L6-v2"):
    """Fetch model `name` listed in the bundle's manifest and load it on the WebGPU device;
    returns JSON with the model's size and the time each step took.

    Configs and the tokenizer (small) go to Pyodide's file system; the weights stay a JS
    ArrayBuffer and go from slices of it straight into GPU buffers (load_safetensors_js)."""
    from ember.models.bert import BertConfig, BertModel
    from ember.models.pooling import read_pooling_config
    from ember.nn import VarBuilder
    from ember.pipelines.sentence_embedder import SentenceEmbedder
    from ember.pipelines.tokenizer_loader import load_tokenizer

    manifest = json.loads(manifest_json)
    model = manifest.get("models", {}).get(name)
    if model is None:
        raise FileNotFoundError(
            f"the bundle has no model {name!r}: run `make models` and then `make web` "
            f"(or `ember serve --rebuild`) to include it"
        )
    files = model["files"]
    if "model.safetensors" not in files:
        raise FileNotFoundError(f"the bundle's {name} has no model.safetensors")
    root, device, tensors, t0, t1 = await _fetch_model_to_gpu(model, name)
    config = BertConfig.from_json(f"{root}/config.json")
    bert = BertModel(
        config, VarBuilder.from_tensors(tensors, device=device, label=f"{name}/model.safetensors")
    )
    pooling = read_pooling_config(root)
    limit = config.max_position_embeddings
    tokenizer = load_tokenizer(
        f"{root}/tokenizer.json", min(pooling.max_seq_length or limit, limit)
    )
    embedder = SentenceEmbedder(
        bert, tokenizer, pooling, device, model_path=root, pad_id=config.pad_token_id or 0
    )
    t2 = time.perf_counter()
    _progress("model", 0.9, "Compiling the kernels (first sentence)")
    embedder.encode(["warm up"]).tolist()
    t3 = time.perf_counter()
    _progress("ready", 1.0, f"{name} ready")
    _state["embedder"] = embedder
    return json.dumps(
        {
            "model": name,
            "bytes": sum(files.values()),
            "dim": embedder.dim,
            "seconds": {"download": t1 - t0, "load": t2 - t1, "warm_up": t3 - t2},
        }
    )


def _loaded_embedder():
    embedder = _state.get("embedder")
    if embedder is None:
        raise RuntimeError("the model is not loaded yet: call demo_embed.load() first")
    return embedder


def embed(texts_json):
    """Embeddings and their cosine-similarity matrix for a JSON list of texts
    (benchmarks/browser_ops.py times it against native)."""
    embedder = _loaded_embedder()
    texts = json.loads(texts_json)
    t0 = time.perf_counter()
    vectors = embedder.encode(texts)
    similarity = embedder.similarity(vectors, vectors).tolist()
    seconds = time.perf_counter() - t0
    return json.dumps(
        {
            "similarity": similarity,
            "seconds": seconds,
            "first_values": [row[:4] for row in vectors.tolist()],
        }
    )


def vectors(texts_json, batch_size=8):
    """The embeddings of a JSON list of texts, whole, as JSON {"vectors", "seconds"} (the
    browser test checks them against sentence-transformers')."""
    embedder = _loaded_embedder()
    texts = json.loads(texts_json)
    t0 = time.perf_counter()
    rows = embedder.encode(texts, batch_size=batch_size).tolist()
    return json.dumps({"vectors": rows, "seconds": time.perf_counter() - t0})


def search(query, texts_json):
    """Rank a JSON list of documents against `query` by cosine similarity, as `ember embed
    --query` does natively: JSON {"ranking": [{"index", "text", "score"}] best first,
    "seconds", "timings" (the encode's tokenize / embed), "query_first_values" and
    "first_values" (the first 4 values of the query's and each document's vector, for
    comparing with native ember)."""
    embedder = _loaded_embedder()
    texts = json.loads(texts_json)
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the query is empty: type what to search for")
    if not isinstance(texts, list) or not texts:
        raise ValueError("there are no documents to search: put one per line in the box")
    for n, text in enumerate(texts, 1):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"document {n} is empty or not text: {text!r}")
    t0 = time.perf_counter()
    # One encode for query and documents (query first), as the native demo does: the
    # query rides in the documents' batch instead of costing a pass of its own.
    vectors = embedder.encode([query] + texts)
    scores = embedder.similarity(
        vectors.narrow(0, 0, 1), vectors.narrow(0, 1, len(texts))
    ).tolist()[0]
    rows = vectors.tolist()
    seconds = time.perf_counter() - t0
    # Ties keep the documents' order (sorted is stable), so the ranking is deterministic.
    order = sorted(range(len(texts)), key=lambda i: -scores[i])
    return json.dumps(
        {
            "ranking": [{"index": i, "text": texts[i], "score": scores[i]} for i in order],
            "seconds": seconds,
            "timings": {k: embedder.timings[k] for k in ("tokenize", "embed")},
            "query_first_values": rows[0][:4],
            "first_values": [row[:4] for row in rows[1:]],
        }
    )


async def search_profiled(query, texts_json):
    """search() run under ember's profiler: its JSON plus "profile", the per-kernel table
    the page shows: "rows" (summary rows {kind, device, name, calls, time_ns, bytes_in,
    bytes_out}; host ops, then GPU kernels, each longest first), "kernel_ns" (the kernels'
    summed time), "gpu_ns" (the GPU time of the run's submissions as a whole, which
    includes the gaps between kernels) and "table" (the same as text). GPU timestamps are
    read back without blocking (stop_async); an adapter without timestamp queries gives
    host-op rows only."""
    from ember.profiler import Profiler

    profiler = Profiler().start()
    try:
        out = json.loads(search(query, texts_json))
    finally:
        prof = await profiler.stop_async()
    out["profile"] = {
        "rows": prof.summary(),
        "kernel_ns": prof.kernel_time_ns(),
        "gpu_ns": prof.gpu_time_ns(),
        "table": prof.table(),
    }
    return json.dumps(out)


def encode_timed(texts_json, batch_size=64):
    """Embed a JSON list of texts in batches of `batch_size` and read the vectors back;
    JSON with the count, the dimension, the seconds it took and the kernels it compiled
    (for benchmarks/minilm.py, which times the same call natively)."""
    embedder = _loaded_embedder()
    texts = json.loads(texts_json)
    counters = getattr(embedder.device.backend, "counters", {})
    compiled = counters.get("pipeline_misses", 0)
    t0 = time.perf_counter()
    rows = embedder.encode(texts, batch_size=batch_size).tolist()
    seconds = time.perf_counter() - t0
    # Kernels first met in this call (shapes the one-sentence warm-up did not have) were
    # compiled inside the timed span; the count says how much of it that could be.
    return json.dumps(
        {
            "n": len(rows),
            "dim": len(rows[0]) if rows else 0,
            "seconds": seconds,
            "pipelines_compiled": counters.get("pipeline_misses", 0) - compiled,
        }
    )
