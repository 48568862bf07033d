"""The sentence-embedding demo's Python side, run in the page's worker (web/static/embed.html).

The model's files are fetched from the bundle with byte progress into Pyodide's in-memory
file system, then `SentenceEmbedder.from_pretrained` loads them on the WebGPU device
exactly as it does natively. Answers are JSON strings, like page_runtime's.
"""
import json
import os
import time

_state = {}


def _progress(stage, fraction, text):
    import js
    from pyodide.ffi import to_js
    js.postMessage(to_js({"type": "progress", "stage": stage, "fraction": fraction,
                          "text": text}, dict_converter=js.Object.fromEntries))


async def load(manifest_json, name="all-MiniLM-L6-v2"):
    """Fetch model `name` listed in the bundle's manifest and load it; returns JSON with
    the model's size and the time each step took."""
    import js
    import ember
    from ember.pipelines.sentence_embedder import SentenceEmbedder
    manifest = json.loads(manifest_json)
    model = manifest.get("models", {}).get(name)
    if model is None:
        raise FileNotFoundError(
            f"the bundle has no model {name!r}: run `make models` and then `make web` "
            f"(or `ember serve --rebuild`) to include it")
    total = sum(model["files"].values())
    done = 0
    t0 = time.perf_counter()
    root = f"/models/{name}"
    for rel, size in sorted(model["files"].items(), key=lambda kv: kv[1]):
        path = f"{root}/{rel}"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        response = await js.fetch(model["path"] + rel)
        if not response.ok:
            raise FileNotFoundError(f"fetching {model['path'] + rel}: HTTP {response.status}")
        reader = response.body.getReader()
        with open(path, "wb") as out:
            while True:
                chunk = await reader.read()
                if chunk.done:
                    break
                out.write(chunk.value.to_bytes())
                done += int(chunk.value.length)
                _progress("model", 0.8 * done / total,
                          f"Downloading {name} ({done / 1e6:.1f} / {total / 1e6:.1f} MB)")
    t1 = time.perf_counter()
    _progress("model", 0.85, "Loading the weights onto the GPU")
    embedder = SentenceEmbedder.from_pretrained(root, device=ember.Device.webgpu())
    t2 = time.perf_counter()
    _progress("model", 0.9, "Compiling the kernels (first sentence)")
    embedder.encode(["warm up"]).tolist()
    t3 = time.perf_counter()
    _progress("ready", 1.0, f"{name} ready")
    _state["embedder"] = embedder
    return json.dumps({"model": name, "bytes": total, "dim": embedder.dim,
                       "seconds": {"download": t1 - t0, "load": t2 - t1, "warm_up": t3 - t2}})


def embed(texts_json):
    """Embeddings and their cosine-similarity matrix for a JSON list of texts."""
    embedder = _state.get("embedder")
    if embedder is None:
        raise RuntimeError("the model is not loaded yet: call demo_embed.load() first")
    texts = json.loads(texts_json)
    t0 = time.perf_counter()
    vectors = embedder.encode(texts)
    similarity = embedder.similarity(vectors, vectors).tolist()
    seconds = time.perf_counter() - t0
    return json.dumps({"similarity": similarity, "seconds": seconds,
                       "first_values": [row[:4] for row in vectors.tolist()]})
