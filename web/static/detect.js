// The detection page's main thread: model and image pickers, the camera, the canvas with
// the boxes. The model runs in the worker (ember.web.page_yolo); files the visitor picks
// reach it as blob: URLs, which a same-origin worker can fetch. Images and camera frames
// are decoded here by the browser (createImageBitmap + OffscreenCanvas); their RGB pixels
// go to the worker as float32 0..255 values, which it uploads to the GPU as they are.
import { adapterProblem, runPython, showLoadProgress } from "./demo-page.js";
import { EmberWorker } from "./ember-client.js";

const $ = (id) => document.getElementById(id);
const py = (value) => JSON.stringify(value);   // a JS value as a Python literal
const MAX_PIXELS = 4096 * 4096;                 // page_yolo.MAX_PIXELS
const COLOURS = ["#ff3838", "#3838ff", "#38c838", "#ff9d33", "#c838ff", "#00c2ff", "#ff37c7", "#84cc00"];

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
const inputs = ["bundle-model", "model-files", "image-file", "camera-start", "imgsz", "conf"];

function startWorker() {
  ember = new EmberWorker();
  window.ember = ember;
  python = (code) => runPython(ember, code);
  showLoadProgress(ember, $);
  return ember.ready.then(async (info) => {
    $("loading").hidden = true;
    const yolos = Object.entries(info.manifest.models || {}).filter(([, m]) => m.kind === "yolo");
    if (yolos.length) {
      $("bundle-model").replaceChildren(...yolos.map(([name]) => new Option(name, name)));
    }
    for (const id of inputs) $(id).disabled = false;
    $("bundle-model").disabled = !yolos.length;
    if (!yolos.length) {
      setStatus("This bundle has no YOLO model: pick model.safetensors and yolo.json.", "ready");
      return { model: null };
    }
    // The bundle's model is loaded at once: the page is ready when it is.
    return loadBundleModel(yolos[0][0]).catch((err) => ({ model: null, error: err.message }));
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
let model = null;   // load_model()'s answer for the loaded model

async function loadModel(weightsURL, metaURL, label) {
  setStatus(`Loading ${label}…`, "busy");
  try {
    const out = JSON.parse(await python(
      `from ember.web import page_yolo\n` +
      `await page_yolo.load_model(${py(weightsURL)}, ${py(metaURL)}, ${py(label)})`));
    model = out;
    window.lastModel = out;
    const classes = Object.values(out.names);
    $("model").textContent = `${out.model}: ${(out.parameters / 1e6).toFixed(2)}M parameters, ` +
      `${classes.length} classes (${classes.slice(0, 6).join(", ")}${classes.length > 6 ? ", …" : ""}), ` +
      `trained at ${out.imgsz}, loaded in ${((out.seconds.read + out.seconds.load) * 1000).toFixed(0)} ms`;
    $("imgsz").placeholder = String(out.imgsz);
    setStatus(picked ? "Detecting…" : "Pick an image or start the camera.", "ready");
    if (picked) await detectFile(picked);
    return out;
  } catch (err) {
    model = null;   // the worker dropped the old model before loading this one
    setStatus(err.message, "error");
    throw err;
  }
}

function loadBundleModel(name) {
  const entry = ember.info.manifest.models[name];
  const at = (rel) => new URL(entry.path + rel, location.href).href;
  return loadModel(at("model.safetensors"), at("yolo.json"), name);
}

$("bundle-model").addEventListener("change", (e) => {
  if (e.target.value) loadBundleModel(e.target.value).catch(() => {});
});

$("model-files").addEventListener("change", (e) => {
  const files = Array.from(e.target.files);
  const weights = files.find((f) => f.name.endsWith(".safetensors"));
  const meta = files.find((f) => f.name.endsWith(".json"));
  if (!weights || !meta || files.length !== 2) {
    setStatus("Pick two files: the model's .safetensors weights and its yolo.json.", "error");
    return;
  }
  const url = (f) => URL.createObjectURL(f);
  loadModel(url(weights), url(meta), weights.name).catch(() => {});
});

// --- frames ----------------------------------------------------------------------------
// A number input's value as a Python literal (`empty` when blank); what is not a number
// goes as a string, for page_yolo to refuse by name.
function pyNumber(id, empty) {
  const v = $(id).value.trim();
  if (v === "") return empty;
  return Number.isFinite(Number(v)) ? String(Number(v)) : py(v);
}

// RGBA pixels with the browser's own decoder: no colour-space conversion and no
// premultiplication, so a PNG gives the file's values.
function pixelsOf(source, width, height) {
  const canvas = new OffscreenCanvas(width, height);
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  ctx.drawImage(source, 0, 0);
  return ctx.getImageData(0, 0, width, height).data;
}

// RGB as float32 0..255, what the worker uploads to the GPU without a copy in Python.
function rgbFloats(rgba) {
  const n = rgba.length / 4;
  const out = new Float32Array(3 * n);
  for (let i = 0, j = 0; i < n; i++, j += 3) {
    out[j] = rgba[4 * i];
    out[j + 1] = rgba[4 * i + 1];
    out[j + 2] = rgba[4 * i + 2];
  }
  return out;
}

// One frame through the worker: {detections, ms: {preprocess, forward, postprocess}, ...}.
async function detectPixels(rgba, width, height) {
  if (!model) throw new Error("No model is loaded: pick a YOLO model first.");
  if (width * height > MAX_PIXELS) {
    throw new Error(`The image is ${width}×${height}, over the ${MAX_PIXELS.toLocaleString()} pixels this page takes.`);
  }
  const url = URL.createObjectURL(new Blob([rgbFloats(rgba)]));
  try {
    // imgsz: the letterbox side, the model's own when blank
    return JSON.parse(await python(`await page_yolo.detect(${py(url)}, ${width}, ${height}, ` +
      `${pyNumber("imgsz", "None")}, ${pyNumber("conf", "0.25")})`));
  } finally {
    URL.revokeObjectURL(url);
  }
}

// The frame and its boxes, labels and scores on the visible canvas.
function draw(source, width, height, detections) {
  const canvas = $("view");
  canvas.width = width;
  canvas.height = height;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(source, 0, 0);
  const line = Math.max(2, Math.round(Math.min(width, height) / 250));
  const font = Math.max(12, Math.round(Math.min(width, height) / 40));
  ctx.font = `${font}px system-ui, sans-serif`;
  ctx.textBaseline = "top";
  for (const d of detections) {
    const [x1, y1, x2, y2] = d.box;
    const colour = COLOURS[d.class % COLOURS.length];
    ctx.lineWidth = line;
    ctx.strokeStyle = colour;
    ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
    const text = `${d.label} ${d.score.toFixed(2)}`;
    const w = ctx.measureText(text).width + 8;
    const ty = y1 >= font + 4 ? y1 - font - 4 : y1;
    ctx.fillStyle = colour;
    ctx.fillRect(x1, ty, w, font + 4);
    ctx.fillStyle = "#fff";
    ctx.fillText(text, x1 + 4, ty + 2);
  }
}

function showResult(out, totalMs, prefix = "") {
  const ms = out.ms;
  $("timings").textContent = `${prefix}forward ${ms.forward.toFixed(0)} ms · total ${totalMs.toFixed(0)} ms ` +
    `(letterbox ${ms.preprocess.toFixed(0)} ms, NMS ${ms.postprocess.toFixed(0)} ms; ` +
    `input ${out.input[1]}×${out.input[0]})`;
  $("detections").replaceChildren(...out.detections.map((d) => {
    const li = document.createElement("li");
    li.textContent = `${d.label} ${d.score.toFixed(3)}  [${d.box.map((v) => v.toFixed(1)).join(", ")}]`;
    return li;
  }));
}

// --- an image file ---------------------------------------------------------------------
let picked = null;   // the last picked image file, detected again when the model changes
let image = null;    // {width, height, rgba}: the last decoded image

async function detectFile(file) {
  if (!model) {
    setStatus("Pick a YOLO model first.", "ready");
    return null;
  }
  const t0 = performance.now();
  setStatus(`Decoding ${file.name}…`, "busy");
  try {
    let bitmap;
    try {
      bitmap = await createImageBitmap(file, { colorSpaceConversion: "none", premultiplyAlpha: "none" });
    } catch (err) {
      if (picked === file) picked = null;   // not detected again when the model changes
      throw new Error(`${file.name} is not an image this browser can decode (${err.message}).`);
    }
    const { width, height } = bitmap;
    const rgba = pixelsOf(bitmap, width, height);
    image = { width, height, rgba };
    setStatus(`Detecting in the ${width}×${height} image…`, "busy");
    const out = await detectPixels(rgba, width, height);
    draw(bitmap, width, height, out.detections);
    const total = performance.now() - t0;
    showResult(out, total);
    window.lastDetect = { ...out, total_ms: total };
    setStatus(`${out.detections.length} detection${out.detections.length === 1 ? "" : "s"} in ${file.name}.`, "done");
    return out;
  } catch (err) {
    setStatus(err.message, "error");
    throw err;
  }
}

$("image-file").addEventListener("change", (e) => {
  picked = e.target.files[0] || null;
  e.target.value = "";   // so that picking the same file again detects again
  if (picked) detectFile(picked).catch(() => {});
});

// The last decoded image's RGBA pixels as base64 (for tests comparing the browser's decoder).
window.imagePixels = () => {
  let s = "";
  const bytes = image.rgba;
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
};

// --- the camera ------------------------------------------------------------------------
let camera = null;   // {stream, frames, last}: while the camera runs

function cameraMessage(err) {
  switch (err.name) {
    case "NotAllowedError":
    case "SecurityError":
      return "Camera permission was denied: allow the camera for this page in the browser's " +
        "site settings and press Start camera again, or pick an image.";
    case "NotFoundError":
    case "OverconstrainedError":
      return "No camera was found: connect one and press Start camera again, or pick an image.";
    case "NotReadableError":
    case "AbortError":
      return "The camera could not be started (another application may be using it).";
    default:
      return `The camera could not be started: ${err.name}: ${err.message}`;
  }
}

async function startCamera() {
  if (!model) {
    setStatus("Pick a YOLO model first.", "ready");
    return null;
  }
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    setStatus("This page cannot use a camera here: navigator.mediaDevices is missing " +
      "(it needs https or localhost).", "error");
    return null;
  }
  $("camera-start").disabled = true;
  setStatus("Asking for the camera…", "busy");
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ video: { width: { ideal: 640 }, height: { ideal: 480 } }, audio: false });
  } catch (err) {
    $("camera-start").disabled = false;
    window.cameraError = { name: err.name, message: cameraMessage(err) };
    setStatus(cameraMessage(err), "error");
    return null;
  }
  const video = $("camera");
  video.srcObject = stream;
  await video.play();
  camera = { stream, frames: 0, last: null };
  window.camera = camera;
  $("camera-stop").disabled = false;
  setStatus("Camera on: detecting frame after frame.", "camera");
  cameraLoop(camera).catch((err) => {
    stopCamera();
    setStatus(err.message, "error");
  });
  return true;
}

// Frame after frame while the camera runs: capture, detect, draw; ms per frame shown.
async function cameraLoop(cam) {
  const video = $("camera");
  while (camera === cam) {
    const t0 = performance.now();
    const bitmap = await createImageBitmap(video);
    const { width, height } = bitmap;
    const out = await detectPixels(pixelsOf(bitmap, width, height), width, height);
    if (camera !== cam) break;   // stopped meanwhile: leave the canvas as it is
    draw(bitmap, width, height, out.detections);
    const total = performance.now() - t0;
    cam.frames += 1;
    cam.last = { ...out, total_ms: total };
    showResult(out, total, `camera frame ${cam.frames}: ${total.toFixed(0)} ms/frame · `);
    // Let the page paint and handle clicks between frames.
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
}

function stopCamera() {
  if (!camera) return;
  for (const track of camera.stream.getTracks()) track.stop();
  camera = null;
  $("camera").srcObject = null;
  $("camera-start").disabled = false;
  $("camera-stop").disabled = true;
  setStatus("Camera stopped.", "ready");
}

$("camera-start").addEventListener("click", () => { startCamera().catch(() => {}); });
$("camera-stop").addEventListener("click", stopCamera);
