// The segmentation page's main thread: model and image pickers, the canvas with the
// mask overlay, clicks as prompts. The model runs in the worker (ember.web.page_sam);
// files the visitor picks reach it as blob: URLs, which a same-origin worker can fetch.
// The image is decoded here by the browser (createImageBitmap + OffscreenCanvas), its
// RGBA pixels handed to the worker once, where the embedding is computed once per image.
import { adapterProblem, runPython, showLoadProgress } from "./demo-page.js";
import { EmberWorker } from "./ember-client.js";

const $ = (id) => document.getElementById(id);

function noWebGPU(why) {
  $("no-webgpu-why").textContent = why;
  $("no-webgpu").hidden = false;
  $("loading").hidden = true;
  $("controls").hidden = true;
  $("canvas-card").hidden = true;
  window.noWebGPU = why;
  return { no_webgpu: why };
}

function setStatus(text, state) {
  $("status").textContent = text;
  $("status").classList.toggle("error", state === "error");
  // Tests wait on this: "busy" while the worker works, then "ready", "done" or "error".
  $("status").dataset.state = state;
}

let ember = null;
let python = null;
const pickers = ["bundle-model", "model-files", "model-dir", "image-file"];

function startWorker() {
  ember = new EmberWorker();
  window.ember = ember;
  python = (code) => runPython(ember, code);
  showLoadProgress(ember, $);
  return ember.ready.then((info) => {
    $("loading").hidden = true;
    const sams = Object.entries(info.manifest.models || {}).filter(([, m]) => m.kind === "sam");
    if (sams.length) {
      $("bundle-model").replaceChildren(new Option("(choose)", ""),
        ...sams.map(([name]) => new Option(name, name)));
    }
    for (const id of pickers) $(id).disabled = false;
    $("bundle-model").disabled = !sams.length;
    setStatus("Pick a SAM model.", "ready");
    return info;
  }).catch((err) => {
    $("stage").textContent = err.message;
    $("loading").classList.add("error");
    throw err;
  });
}

if (!navigator.gpu) {
  window.demoReady = Promise.resolve(
    noWebGPU("navigator.gpu is missing: this browser does not offer WebGPU (or it is turned off)."));
} else {
  const booting = startWorker();
  window.demoReady = adapterProblem().then((problem) => {
    if (!problem) return booting;
    ember.worker.terminate();
    booting.catch(() => {});
    return noWebGPU(problem);
  });
}

// --- the model -------------------------------------------------------------------------
const py = (value) => JSON.stringify(value);   // a JS value as a Python literal

async function loadModel(weightsURL, configURL, label) {
  setStatus(`Loading ${label}…`, "busy");
  try {
    const out = JSON.parse(await python(
      `from ember.web import page_sam\n` +
      `await page_sam.load_model(${py(weightsURL)}, ${configURL ? py(configURL) : "None"}, ${py(label)})`));
    $("model").textContent = `${out.model}: ${(out.parameters / 1e6).toFixed(2)}M parameters, ` +
      `${out.layers} encoder layers, input ${out.image_size}×${out.image_size}, ` +
      `loaded in ${((out.seconds.read + out.seconds.load) * 1000).toFixed(0)} ms`;
    window.lastModel = out;
    image = null;   // an image embedded by another model must be embedded again
    points.length = 0;
    draw();
    setStatus(picked ? "Embedding the image…" : "Pick an image.", "ready");
    if (picked) await embedImage(picked);
    return out;
  } catch (err) {
    setStatus(err.message, "error");
    throw err;
  }
}

// The weights and config among picked files (two files, or a folder's contents).
function modelFromFiles(files) {
  const list = Array.from(files);
  const weights = list.filter((f) => f.name.endsWith(".safetensors"));
  const config = list.find((f) => f.name === "config.json");
  const chosen = weights.find((f) => f.name === "model.safetensors") || weights[0];
  if (!chosen) {
    setStatus("No .safetensors file among the picked files: pick the model's weights.", "error");
    return null;
  }
  if (weights.length > 1 && !weights.some((f) => f.name === "model.safetensors")) {
    setStatus(`Several .safetensors files (${weights.map((f) => f.name).join(", ")}): pick one.`, "error");
    return null;
  }
  const url = (f) => URL.createObjectURL(f);
  return loadModel(url(chosen), config ? url(config) : null, chosen.name).catch(() => {});
}

$("model-files").addEventListener("change", (e) => modelFromFiles(e.target.files));
$("model-dir").addEventListener("change", (e) => modelFromFiles(e.target.files));
$("bundle-model").addEventListener("change", (e) => {
  const name = e.target.value;
  if (!name) return;
  const entry = ember.info.manifest.models[name];
  const at = (rel) => new URL(entry.path + rel, location.href).href;
  const weights = Object.keys(entry.files).find((f) => f.endsWith(".safetensors"));
  loadModel(at(weights), entry.files["config.json"] ? at("config.json") : null, name).catch(() => {});
});

// --- the image -------------------------------------------------------------------------
let image = null;    // {bitmap, width, height, rgba}: the embedded image
let picked = null;   // the last picked image file, embedded again when the model changes
const points = [];   // [x, y, label] in the image's pixels
let result = null;   // the last segment() answer, its best mask drawn over the image

// RGBA pixels with the browser's own decoder: no colour-space conversion and no
// premultiplication, so an sRGB PNG gives the file's values.
async function decode(file) {
  const bitmap = await createImageBitmap(file, { colorSpaceConversion: "none", premultiplyAlpha: "none" });
  const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.drawImage(bitmap, 0, 0);
  const rgba = ctx.getImageData(0, 0, bitmap.width, bitmap.height).data;
  return { bitmap, width: bitmap.width, height: bitmap.height, rgba };
}

async function embedImage(file) {
  if (!window.lastModel) {
    setStatus("Pick a SAM model first: the image is embedded by it.", "ready");
    return null;
  }
  setStatus("Decoding the image…", "busy");
  try {
    const decoded = await decode(file);
    image = null;
    points.length = 0;
    result = null;
    const url = URL.createObjectURL(new Blob([decoded.rgba]));
    setStatus(`Embedding the ${decoded.width}×${decoded.height} image…`, "busy");
    const out = JSON.parse(await python(
      `await page_sam.set_image(${py(url)}, ${decoded.width}, ${decoded.height})`));
    URL.revokeObjectURL(url);
    image = { ...decoded, ms: out.ms };
    window.lastImage = { width: out.width, height: out.height, resized: out.resized, ms: out.ms };
    $("clear-points").disabled = false;
    draw();
    showTimings();
    setStatus("Click the object to segment it (shift-click: not this).", "done");
    return out;
  } catch (err) {
    setStatus(err.message, "error");
    throw err;
  }
}

$("image-file").addEventListener("change", (e) => {
  picked = e.target.files[0] || null;
  e.target.value = "";   // so that picking the same file again embeds it again
  if (picked) embedImage(picked).catch(() => {});
});

// The picked image's RGBA pixels as base64 (for tests comparing the browser's decoder).
window.imagePixels = () => {
  let s = "";
  const bytes = image.rgba;
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
};

// --- prompts and masks -----------------------------------------------------------------
let running = false;
let again = false;   // points were added while a segment() ran: run once more after it

async function segment() {
  if (running) { again = true; return null; }
  running = true;
  setStatus(`Segmenting (${points.length} point${points.length === 1 ? "" : "s"})…`, "busy");
  try {
    const out = JSON.parse(await python(`await page_sam.segment(${py(JSON.stringify(points))})`));
    result = out;
    window.lastSegment = out;
    draw();
    showTimings();
    setStatus(`${out.points.length} point${out.points.length === 1 ? "" : "s"}: best predicted IoU ` +
      `${Math.max(...out.scores).toFixed(3)}`, "done");
    return out;
  } catch (err) {
    setStatus(err.message, "error");
    throw err;
  } finally {
    running = false;
    if (again) { again = false; segment().catch(() => {}); }
  }
}

// The page's entry point for a prompt (what a click calls; tests call it with points).
window.segmentPoints = async (pts) => {
  points.splice(0, points.length, ...pts);
  return segment();
};

$("view").addEventListener("click", (event) => {
  if (!image) return;
  const canvas = $("view");
  // The canvas is drawn at the image's size and may be shown scaled down.
  const x = event.offsetX * canvas.width / canvas.clientWidth;
  const y = event.offsetY * canvas.height / canvas.clientHeight;
  if (x < 0 || y < 0 || x >= image.width || y >= image.height) return;
  points.push([x, y, event.shiftKey ? 0 : 1]);
  draw();
  segment().catch(() => {});
});

$("clear-points").addEventListener("click", () => {
  points.length = 0;
  result = null;
  draw();
  $("scores").replaceChildren();
});

function bestIndex(scores) {
  return scores.reduce((best, s, i) => (s > scores[best] ? i : best), 0);
}

// The image, the best mask as a translucent overlay, the points (green on, red off).
function draw() {
  const canvas = $("view");
  if (!image) { canvas.width = 0; canvas.height = 0; return; }
  canvas.width = image.width;
  canvas.height = image.height;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(image.bitmap, 0, 0);
  if (result && result.width === image.width && result.height === image.height) {
    const mask = Uint8Array.from(atob(result.masks[bestIndex(result.scores)]), (c) => c.charCodeAt(0));
    const overlay = new ImageData(image.width, image.height);
    for (let i = 0; i < mask.length; i++) {
      if (!mask[i]) continue;
      overlay.data.set([232, 89, 12, 130], 4 * i);
    }
    const layer = new OffscreenCanvas(image.width, image.height);
    layer.getContext("2d").putImageData(overlay, 0, 0);
    ctx.drawImage(layer, 0, 0);
  }
  const r = Math.max(2, Math.round(Math.max(image.width, image.height) / 120));
  for (const [x, y, label] of points) {
    ctx.beginPath();
    ctx.arc(x, y, r, 0, 2 * Math.PI);
    ctx.fillStyle = label ? "#2f9e44" : "#e03131";
    ctx.fill();
    ctx.strokeStyle = "#fff";
    ctx.stroke();
  }
}

function showTimings() {
  const parts = [];
  if (image) parts.push(`image: resize + normalize ${image.ms.preprocess.toFixed(0)} ms, ` +
                        `encoder ${image.ms.encoder.toFixed(0)} ms (once per image)`);
  if (result) parts.push(`last click: decoder ${result.ms.decoder.toFixed(0)} ms, ` +
                         `masks upsampled ${result.ms.postprocess.toFixed(0)} ms`);
  $("timings").textContent = parts.join(" · ");
  if (!result) return;
  const best = bestIndex(result.scores);
  $("scores").replaceChildren(...result.scores.map((s, i) => {
    const li = document.createElement("li");
    li.textContent = `mask ${i + 1}: predicted IoU ${s.toFixed(3)}`;
    if (i === best) li.className = "best";
    return li;
  }));
}
