// The semantic-search demo's main thread: progress, the query and documents, the ranked
// results. The model runs in the worker (ember.web.demo_embed), so the page stays
// responsive while it loads and embeds.
import { showLoadProgress, runPython } from "./demo-page.js";
import { EmberWorker } from "./ember-client.js";

const $ = (id) => document.getElementById(id);
const ember = new EmberWorker();
window.ember = ember;

showLoadProgress(ember, $);

const python = (code) => runPython(ember, code);
// A JS string as a Python string literal (JSON's escapes are valid in Python).
const pyString = (s) => JSON.stringify(s);

// Resolves once the model is loaded; window.demoReady lets tests wait for it.
window.demoReady = ember.ready.then(async (info) => {
  const manifest = JSON.stringify(info.manifest);
  const loaded = JSON.parse(await python(
    `from ember.web import demo_embed\nawait demo_embed.load(${pyString(manifest)})`));
  const s = loaded.seconds;
  $("loading").hidden = true;
  $("model").textContent = `${loaded.model} (${(loaded.bytes / 1e6).toFixed(0)} MB, ${loaded.dim} dims) on ` +
    `${info.adapter.description || info.adapter.vendor || "WebGPU"}: download ${s.download.toFixed(1)} s, ` +
    `load ${s.load.toFixed(1)} s, first sentence ${s.warm_up.toFixed(1)} s`;
  $("status").textContent = "Ready: type a query and press Enter or Search.";
  $("search").disabled = false;
  // Milliseconds from the page's navigation start to the first embedding's result here
  // (benchmarks/minilm.py reads it as "page open -> first embedding").
  loaded.first_embedding_ms = performance.now();
  return loaded;
}).catch((err) => {
  $("stage").textContent = err.message;
  $("loading").classList.add("error");
  throw err;
});

function resultItem(hit, rank) {
  const li = document.createElement("li");
  const cell = (cls, text) => {
    const span = document.createElement("span");
    span.className = cls;
    span.textContent = text;   // textContent: the documents are the user's text, not HTML
    return span;
  };
  const bar = document.createElement("div");
  bar.className = "score-bar";
  const fill = document.createElement("div");
  fill.style.width = `${(Math.max(0, Math.min(1, hit.score)) * 100).toFixed(1)}%`;
  bar.append(fill);
  li.append(cell("rank", `${rank}.`), cell("score", hit.score.toFixed(3)), cell("text", hit.text), bar);
  return li;
}

function setStatus(text, state) {
  $("status").textContent = text;
  $("status").classList.toggle("error", state === "error");
  // Tests wait on this: "busy" while the worker embeds, then "done" or "error".
  $("status").dataset.state = state;
}

async function search() {
  if ($("search").disabled) return;   // still loading, or a search is running
  const query = $("query").value.trim();
  const texts = $("texts").value.split("\n").map((t) => t.trim()).filter(Boolean);
  $("search").disabled = true;
  setStatus("embedding…", "busy");
  try {
    // An empty query or no documents is refused by demo_embed.search, whose message
    // lands in the status line below.
    const out = JSON.parse(await python(
      `demo_embed.search(${pyString(query)}, ${pyString(JSON.stringify(texts))})`));
    $("results").replaceChildren(...out.ranking.map((hit, i) => resultItem(hit, i + 1)));
    const t = out.timings;
    setStatus(`${texts.length} documents + the query embedded in one batch: ` +
      `${(out.seconds * 1000).toFixed(0)} ms (tokenize ${(t.tokenize * 1000).toFixed(0)} ms, ` +
      `model ${(t.embed * 1000).toFixed(0)} ms)`, "done");
    window.lastSearch = { query, texts, ...out };
  } catch (err) {
    // Old results would read as answers to this query: clear them.
    $("results").replaceChildren();
    window.lastSearch = null;
    setStatus(err.message, "error");
  }
  $("search").disabled = false;
}

$("search").addEventListener("click", search);
$("query").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.isComposing) {
    event.preventDefault();
    search();
  }
});
