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

// Bytes as the profiler's text table writes them (B, kB, MB, GB).
function size(n) {
  for (const [unit, scale] of [["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) {
    if (n >= scale) return `${(n / scale).toFixed(1)} ${unit}`;
  }
  return `${n} B`;
}

// The profile of a search (demo_embed.search_profiled): GPU kernels, then host ops, each
// longest first; "%" is of its kind's total. A kernel's bytes are those bound to it.
function showProfile(profile) {
  const kinds = [["kernel", "GPU kernel"], ["op", "host op"]];
  const rows = [];
  for (const [kind, label] of kinds) {
    const mine = profile.rows.filter((r) => r.kind === kind).sort((a, b) => b.time_ns - a.time_ns);
    const total = mine.reduce((sum, r) => sum + r.time_ns, 0) || 1;
    for (const r of mine) {
      const tr = document.createElement("tr");
      tr.className = kind;
      const cells = [label, r.name, String(r.calls), (r.time_ns / 1e6).toFixed(3),
        (100 * r.time_ns / total).toFixed(1), (r.time_ns / 1e3 / r.calls).toFixed(1),
        size(r.bytes_in + r.bytes_out)];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      rows.push(tr);
    }
  }
  $("profile-table").tBodies[0].replaceChildren(...rows);
  const kernels = profile.rows.filter((r) => r.kind === "kernel");
  const calls = kernels.reduce((sum, r) => sum + r.calls, 0);
  $("profile-summary").textContent = kernels.length
    ? `GPU time ${(profile.gpu_ns / 1e6).toFixed(3)} ms, of which ${calls} kernel runs ` +
      `(${kernels.length} kernels) ${(profile.kernel_ns / 1e6).toFixed(3)} ms`
    : "This adapter has no timestamp queries: host ops only, no per-kernel GPU times.";
  $("profile-panel").hidden = false;
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
  const profiled = $("profile").checked;
  $("search").disabled = true;
  setStatus(profiled ? "embedding under the profiler…" : "embedding…", "busy");
  try {
    // An empty query or no documents is refused by demo_embed.search, whose message
    // lands in the status line below.
    const args = `${pyString(query)}, ${pyString(JSON.stringify(texts))}`;
    const out = JSON.parse(await python(profiled
      ? `await demo_embed.search_profiled(${args})` : `demo_embed.search(${args})`));
    if (profiled) {
      showProfile(out.profile);
      $("profile").checked = false;   // "the next search": one profiled run per check of the box
    }
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
    if (profiled) $("profile-panel").hidden = true;   // nor a profile of an earlier search
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
