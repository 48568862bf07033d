// The embedding demo's main thread: progress, the similarity matrix. The model runs in
// the worker (ember.web.demo_embed), so the page stays responsive while it loads.
import { showLoadProgress, runPython } from "./demo-page.js";
import { EmberWorker } from "./ember-client.js";

const $ = (id) => document.getElementById(id);
const ember = new EmberWorker();
window.ember = ember;

showLoadProgress(ember, $);

const escape = (s) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

const python = (code) => runPython(ember, code);

// Resolves once the model is loaded; window.demoReady lets tests wait for it.
window.demoReady = ember.ready.then(async (info) => {
  const manifest = JSON.stringify(info.manifest);
  const loaded = JSON.parse(await python(
    `from ember.web import demo_embed\nawait demo_embed.load(${JSON.stringify(manifest)})`));
  const s = loaded.seconds;
  $("loading").hidden = true;
  $("status").textContent = `${loaded.model} (${(loaded.bytes / 1e6).toFixed(0)} MB, ${loaded.dim} dims) on ` +
    `${info.adapter.description || info.adapter.vendor || "WebGPU"}: download ${s.download.toFixed(1)} s, ` +
    `load ${s.load.toFixed(1)} s, first sentence ${s.warm_up.toFixed(1)} s`;
  $("embed").disabled = false;
  // Milliseconds from the page's navigation start to the first embedding's result here
  // (benchmarks/minilm.py reads it as "page open -> first embedding").
  loaded.first_embedding_ms = performance.now();
  return loaded;
}).catch((err) => {
  $("stage").textContent = err.message;
  $("loading").classList.add("error");
  throw err;
});

async function compare() {
  const texts = $("texts").value.split("\n").map((t) => t.trim()).filter(Boolean);
  if (!texts.length) return;
  $("embed").disabled = true;
  $("status").textContent = "embedding…";
  try {
    const out = JSON.parse(await python(`demo_embed.embed(${JSON.stringify(JSON.stringify(texts))})`));
    const head = `<tr><th></th>${texts.map((_, j) => `<th>${j + 1}</th>`).join("")}</tr>`;
    const rows = texts.map((t, i) => `<tr><th class="text">${i + 1}. ${escape(t)}</th>` +
      out.similarity[i].map((v) => `<td style="background: rgba(232, 89, 12, ${Math.max(0, v).toFixed(2)})">${v.toFixed(2)}</td>`).join("") + "</tr>");
    $("matrix").innerHTML = head + rows.join("");
    $("status").textContent = `${texts.length} sentences in ${(out.seconds * 1000).toFixed(0)} ms`;
    window.lastSimilarity = out;
  } catch (err) {
    $("status").textContent = err.message;
  }
  $("embed").disabled = false;
}

$("embed").addEventListener("click", compare);
