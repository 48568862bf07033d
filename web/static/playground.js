// The playground's main thread: progress, device card, editor. All Python runs in the worker.
import { EmberWorker } from "./ember-client.js";

const $ = (id) => document.getElementById(id);
const ember = new EmberWorker();
window.ember = ember;   // tests and the console drive the same worker

ember.onprogress = ({ fraction, text }) => {
  const pct = Math.round(fraction * 100);
  $("bar-fill").style.width = `${pct}%`;
  $("percent").textContent = `${pct}%`;
  $("stage").textContent = text;
};

// Limits that decide what a model can do on this adapter.
const SHOWN_LIMITS = [
  "maxStorageBufferBindingSize", "maxBufferSize", "maxStorageBuffersPerShaderStage",
  "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX",
  "maxComputeWorkgroupsPerDimension", "maxComputeWorkgroupStorageSize",
];

function formatLimit(value) {
  if (value >= 1 << 20 && value % (1 << 20) === 0) return `${value / (1 << 20)} MiB`;
  return String(value);
}

ember.ready.then((info) => {
  $("loading").hidden = true;
  $("device").hidden = false;
  const a = info.adapter || {};
  $("adapter-name").textContent = [a.description || a.device || a.vendor || "WebGPU adapter",
    a.architecture && `(${a.architecture})`].filter(Boolean).join(" ");
  const t = info.timings_ms;
  $("timings").textContent = `Pyodide ${info.pyodide_version}, ready in ${(t.total / 1000).toFixed(1)} s ` +
    `(Pyodide ${(t.pyodide / 1000).toFixed(1)} s, ember ${(t.ember_import / 1000).toFixed(1)} s, ` +
    `device ${(t.device / 1000).toFixed(1)} s) · features: ${(info.features || []).join(", ") || "none"}`;
  const rows = SHOWN_LIMITS.filter((k) => k in (info.limits || {}))
    .map((k) => `<tr><th>${k}</th><td>${formatLimit(info.limits[k])}</td></tr>`);
  $("limits").innerHTML = rows.join("");
  $("run").disabled = false;
}, (err) => {
  $("stage").textContent = err.message;
  $("loading").classList.add("error");
});

async function runEditor() {
  const button = $("run");
  if (button.disabled) return;
  button.disabled = true;
  $("stop").disabled = !ember.interruptFlag;
  $("run-status").textContent = "running…";
  const started = performance.now();
  const result = await ember.run($("code").value).catch((err) => ({ ok: false, stdout: "", error: { type: "Error", message: err.message } }));
  const ms = performance.now() - started;
  const out = $("output");
  out.classList.toggle("error", !result.ok);
  let text = result.stdout || "";
  if (result.ok && result.repr !== null && result.repr !== undefined) text += `→ ${result.repr}`;
  if (!result.ok) text += result.error.traceback || `${result.error.type}: ${result.error.message}`;
  out.textContent = text;
  $("run-status").textContent = `${result.ok ? "done" : "error"} in ${ms.toFixed(0)} ms`;
  button.disabled = false;
  $("stop").disabled = true;
}

$("run").addEventListener("click", runEditor);
$("stop").addEventListener("click", () => ember.interrupt());
$("code").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); runEditor(); }
});
