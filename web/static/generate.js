// The generation page's main thread: a chat with SmolLM2-135M-Instruct (load progress in
// MB, streamed replies, Stop, tokens/s). The model runs in the worker
// (ember.web.demo_generate), which posts a {type: "delta"} message per piece of decoded
// text; the page appends each one to the reply as it arrives. `?model=NAME` loads another
// model of the bundle (the tiny Llama continues plain prompts: it has no chat template).
import { adapterProblem, runPython, showLoadProgress } from "./demo-page.js";
import { EmberWorker } from "./ember-client.js";

const $ = (id) => document.getElementById(id);
const modelName = new URLSearchParams(location.search).get("model") || "smollm2-135m-instruct";

// A frame counter: it only advances while the main thread is free to paint, so a test
// (or a person) can see the page stayed responsive while tokens were being generated.
window.heartbeat = 0;
const beat = () => { window.heartbeat += 1; requestAnimationFrame(beat); };
requestAnimationFrame(beat);

// A visitor without WebGPU reads why instead of watching a bar that never moves.
const noGPU = navigator.gpu ? null
  : "navigator.gpu is missing: this browser does not offer WebGPU (or it is turned off).";

function showNoWebGPU(why) {
  $("no-webgpu-why").textContent = why;
  $("no-webgpu").hidden = false;
  $("loading").hidden = true;
  $("chat").hidden = true;
}

const history = [];   // the chat so far: {role, content}, rendered by the model's template
let current = null;   // the run whose deltas are arriving: {deltas, started, text}

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = `msg ${role}`;
  div.textContent = text;   // textContent: the visitor's text and the model's, not HTML
  $("transcript").append(div);
  return div;
}

// A reply bubble whose text span is #output-text while it streams (the newest one).
function replyBubble(prefix) {
  const old = $("output-text");
  if (old) old.removeAttribute("id");
  const div = bubble("assistant", "");
  if (prefix) {
    const p = document.createElement("span");
    p.className = "prompt-text";
    p.textContent = prefix;
    div.append(p);
  }
  const text = document.createElement("span");
  text.id = "output-text";
  const cursor = document.createElement("span");
  cursor.className = "cursor";
  cursor.textContent = "▍";
  div.append(text, cursor);
  return { div, text, cursor };
}

function showSpeed(tokens, seconds) {
  $("speed").textContent = seconds > 0 ? `${(tokens / seconds).toFixed(1)} tokens/s` : "";
}

let ember = null;
let python = null;

// Resolves once the model is loaded and warm; window.demoReady lets tests wait for it.
// The worker starts at once where navigator.gpu exists (window.ember is there for tests
// from the first moment) and is ended if no adapter turns up.
function noWebGPU(problem) {
  showNoWebGPU(problem);
  window.noWebGPU = problem;
  return { no_webgpu: problem };
}
if (noGPU) {
  window.demoReady = Promise.resolve(noWebGPU(noGPU));
} else {
  const loading = startModel();
  window.demoReady = adapterProblem().then((problem) => {
    if (!problem) return loading;
    ember.worker.terminate();
    loading.catch(() => {});
    return noWebGPU(problem);
  });
}

function startModel() {
  ember = new EmberWorker();
  window.ember = ember;
  python = (code) => runPython(ember, code);
  showLoadProgress(ember, $);
  ember.onevent = (msg) => {
    if (msg.type !== "delta" || !current) return;
    current.deltas.push({ text: msg.text, tokens: msg.tokens, worker_seconds: msg.seconds,
                          at_ms: performance.now() - current.started, heartbeat: window.heartbeat });
    current.view.text.textContent += msg.text;
    $("status").textContent = `${msg.tokens} tokens`;
    showSpeed(msg.tokens, (performance.now() - current.started) / 1000);
  };
  const pageOpened = performance.now();
  const adapterName = (a) => a.description ||
    [a.vendor, a.architecture].filter(Boolean).join(" ") || "WebGPU";
  return ember.ready.then(async (info) => {
    const manifest = JSON.stringify(info.manifest);
    const loaded = JSON.parse(await python(
      `from ember.web import demo_generate\n` +
      `await demo_generate.load(${JSON.stringify(manifest)}, ${JSON.stringify(modelName)})`));
    loaded.page_ready_ms = performance.now() - pageOpened;
    loaded.boot_ms = info.timings_ms;
    const s = loaded.seconds;
    $("loading").hidden = true;
    $("model").textContent = `${loaded.model}: ${(loaded.parameters / 1e6).toFixed(1)}M parameters, ` +
      `${(loaded.bytes / 1e6).toFixed(0)} MB, ${loaded.layers} layers, on ${adapterName(info.adapter)}`;
    $("status").textContent = `ready in ${(loaded.page_ready_ms / 1000).toFixed(1)} s (model: download ` +
      `${s.download.toFixed(1)} s, load ${s.load.toFixed(1)} s, warm-up ${s.warm_up.toFixed(1)} s)`;
    if (!loaded.chat) $("message").value = "Once upon a time";
    $("send").disabled = false;
    $("clear").disabled = false;
    window.demoLoaded = loaded;
    return loaded;
  }).catch((err) => {
    $("stage").textContent = err.message;
    $("loading").classList.add("error");
    throw err;
  });
}

// One streamed run in the worker (`code` yields demo_generate's JSON answer); resolves
// with it plus the deltas as the page received them (time, frame counter).
async function streamed(code, view) {
  $("send").disabled = true;
  $("clear").disabled = true;
  $("stop").hidden = false;
  $("speed").textContent = "";
  $("status").textContent = "reading the prompt…";
  current = { deltas: [], started: performance.now(), heartbeat: window.heartbeat, view };
  const run = current;
  try {
    const out = JSON.parse(await python(code));
    out.page_deltas = run.deltas;
    out.page_ms = performance.now() - run.started;
    out.heartbeat_start = run.heartbeat;
    out.heartbeat_end = window.heartbeat;
    view.text.textContent = out.text;
    const rate = out.decode_tokens_per_second;
    $("status").textContent = `${out.token_ids.length} tokens in ${out.seconds.toFixed(2)} s ` +
      `(first text after ${(1000 * (out.first_delta_seconds || 0)).toFixed(0)} ms, stop: ${out.stop_reason})`;
    $("speed").textContent = rate ? `${rate.toFixed(1)} tokens/s decoding` : "";
    window.lastGeneration = out;
    return out;
  } catch (err) {
    view.div.classList.add("error");
    view.text.textContent += ` [${err.message}]`;
    $("status").textContent = err.message;
    throw err;
  } finally {
    current = null;
    view.cursor.remove();
    $("stop").hidden = true;
    $("send").disabled = false;
    $("clear").disabled = false;
  }
}

// A plain continuation of `prompt` (no chat template): what the tiny Llama does, and what
// tests and benchmarks/generate_page.py call with fixed prompts.
window.generateText = async ({ prompt, max_new_tokens = 48, temperature = 0, top_k = 0,
                               seed = null, ignore_eos = false }) => {
  await window.demoReady;
  const args = [JSON.stringify(prompt), Number(max_new_tokens), Number(temperature), Number(top_k),
                "1.0", seed === null ? "None" : Number(seed), ignore_eos ? "True" : "False"].join(", ");
  return streamed(`await demo_generate.generate(${args})`, replyBubble(prompt));
};

// The visitor's next message: the whole history goes through the model's chat template,
// and the reply (cut where Stop cut it) joins the history for the next turn.
window.sendChat = async ({ text, max_new_tokens = 96 }) => {
  await window.demoReady;
  if (!window.demoLoaded.chat) return window.generateText({ prompt: text, max_new_tokens });
  const turn = { role: "user", content: text };
  bubble("user", text);
  const messages = JSON.stringify([...history, turn]);
  const out = await streamed(
    `await demo_generate.chat(${JSON.stringify(messages)}, ${Number(max_new_tokens)})`, replyBubble(""));
  history.push(turn, { role: "assistant", content: out.text });
  out.history = history.slice();
  return out;
};

// Stop: the worker's Python checks for this message between decoding steps.
window.stopGeneration = () => ember.worker.postMessage({ type: "generate-stop" });
$("stop").addEventListener("click", () => window.stopGeneration());

const send = () => {
  if ($("send").disabled) return;
  const text = $("message").value.trim();
  if (!text) return;
  $("message").value = "";
  window.sendChat({ text, max_new_tokens: $("max-tokens").value }).catch(() => {});
};
$("send").addEventListener("click", send);
$("message").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send();
  }
});
$("clear").addEventListener("click", () => {
  history.length = 0;
  $("transcript").replaceChildren();
  $("status").textContent = "";
  $("speed").textContent = "";
});
