// The generation demo's main thread: load progress, the streamed text, tokens/s. The model
// runs in the worker (ember.web.demo_generate), which posts a {type: "delta"} message per
// piece of decoded text; the page appends each one as it arrives.
import { showLoadProgress, runPython } from "./demo-page.js";
import { EmberWorker } from "./ember-client.js";

const $ = (id) => document.getElementById(id);
const ember = new EmberWorker();
window.ember = ember;

// A frame counter: it only advances while the main thread is free to paint, so a test
// (or a person) can see the page stayed responsive while tokens were being generated.
window.heartbeat = 0;
const beat = () => { window.heartbeat += 1; requestAnimationFrame(beat); };
requestAnimationFrame(beat);

showLoadProgress(ember, $);

let current = null;   // the run whose deltas are arriving: {deltas, started}
ember.onevent = (msg) => {
  if (msg.type !== "delta" || !current) return;
  current.deltas.push({ text: msg.text, tokens: msg.tokens, worker_seconds: msg.seconds,
                        at_ms: performance.now() - current.started, heartbeat: window.heartbeat });
  $("output-text").textContent += msg.text;
  const seconds = (performance.now() - current.started) / 1000;
  $("status").textContent = `${msg.tokens} tokens`;
  $("speed").textContent = `${(msg.tokens / seconds).toFixed(1)} tokens/s`;
};

const python = (code) => runPython(ember, code);

const pageOpened = performance.now();
const adapterName = (a) => a.description ||
  [a.vendor, a.architecture].filter(Boolean).join(" ") || "WebGPU";
// Resolves once the model is loaded and warm; window.demoReady lets tests wait for it.
window.demoReady = ember.ready.then(async (info) => {
  const manifest = JSON.stringify(info.manifest);
  const loaded = JSON.parse(await python(
    `from ember.web import demo_generate\nawait demo_generate.load(${JSON.stringify(manifest)})`));
  loaded.page_ready_ms = performance.now() - pageOpened;
  loaded.boot_ms = info.timings_ms;
  const s = loaded.seconds;
  $("loading").hidden = true;
  $("model").textContent = `${loaded.model}: ${(loaded.parameters / 1e3).toFixed(0)}k parameters, ` +
    `${loaded.layers} layers, vocab ${loaded.vocab}, on ${adapterName(info.adapter)}`;
  $("status").textContent = `ready in ${(loaded.page_ready_ms / 1000).toFixed(1)} s (model: download ` +
    `${s.download.toFixed(1)} s, load ${s.load.toFixed(1)} s, warm-up ${s.warm_up.toFixed(1)} s)`;
  $("generate").disabled = false;
  window.demoLoaded = loaded;
  return loaded;
}).catch((err) => {
  $("stage").textContent = err.message;
  $("loading").classList.add("error");
  throw err;
});

// Generate a continuation; resolves with the worker's answer plus the deltas as the page
// received them (time, frame counter). Used by the button and by tests.
window.generateText = async ({ prompt, max_new_tokens = 48, temperature = 0, top_k = 0,
                               seed = null, ignore_eos = false }) => {
  await window.demoReady;
  $("generate").disabled = true;
  $("stop").hidden = false;
  $("output-prompt").textContent = prompt;
  $("output-text").textContent = "";
  $("cursor").hidden = false;
  $("speed").textContent = "";
  $("status").textContent = "processing the prompt…";
  current = { deltas: [], started: performance.now(), heartbeat: window.heartbeat };
  const run = current;
  try {
    const args = [JSON.stringify(prompt), Number(max_new_tokens), Number(temperature), Number(top_k),
                  "1.0", seed === null ? "None" : Number(seed), ignore_eos ? "True" : "False"].join(", ");
    const out = JSON.parse(await python(`await demo_generate.generate(${args})`));
    out.page_deltas = run.deltas;
    out.page_ms = performance.now() - run.started;
    out.heartbeat_start = run.heartbeat;
    out.heartbeat_end = window.heartbeat;
    const rate = out.decode_tokens_per_second;
    $("status").textContent = `${out.token_ids.length} tokens in ${out.seconds.toFixed(2)} s ` +
      `(first text after ${(1000 * (out.first_delta_seconds || 0)).toFixed(0)} ms, stop: ${out.stop_reason})`;
    $("speed").textContent = rate ? `${rate.toFixed(1)} tokens/s decoding` : "";
    window.lastGeneration = out;
    return out;
  } catch (err) {
    $("status").textContent = err.message;
    throw err;
  } finally {
    current = null;
    $("stop").hidden = true;
    $("cursor").hidden = true;
    $("generate").disabled = false;
  }
};

// Stop: the worker's Python checks for this message between decoding steps.
window.stopGeneration = () => ember.worker.postMessage({ type: "generate-stop" });
$("stop").addEventListener("click", window.stopGeneration);

$("generate").addEventListener("click", () => window.generateText({
  prompt: $("prompt").value,
  max_new_tokens: $("max-tokens").value,
  temperature: $("temperature").value,
  top_k: $("top-k").value,
  seed: $("seed").value === "" ? null : $("seed").value,
}).catch(() => {}));
