// The transcription page's main thread: a file picker and microphone recording, the
// browser's own audio decoder, and the transcript segment by segment. Whisper runs in the
// worker (ember.web.page_whisper), which posts a {type: "segment"} message per segment as
// soon as it is final; the page appends each one as it arrives.
//
// Audio is decoded here, never in Python: Web Audio's decodeAudioData on an
// OfflineAudioContext at 16 kHz (the browser resamples to the context's rate), the
// channels averaged to mono, as ember.audio.load does natively. The float32 samples reach
// the worker as a blob: URL, which a same-origin worker can fetch.
// `?model=NAME` loads another Whisper model of the bundle.
import { adapterProblem, runPython, showLoadProgress } from "./demo-page.js";
import { EmberWorker } from "./ember-client.js";

const $ = (id) => document.getElementById(id);
const modelName = new URLSearchParams(location.search).get("model") || "whisper-tiny.en";
const SAMPLE_RATE = 16000;           // Whisper's
const MAX_RECORDING_SECONDS = 600;   // a recording stops itself after ten minutes

function noWebGPU(why) {
  $("no-webgpu-why").textContent = why;
  $("no-webgpu").hidden = false;
  for (const id of ["loading", "controls", "output"]) $(id).hidden = true;
  window.noWebGPU = why;
  return { no_webgpu: why };
}

function setStatus(text, state) {
  $("status").textContent = text;
  $("status").classList.toggle("error", state === "error");
  // Tests can wait on this: "busy" while decoding or recording, then "done" or "error".
  $("status").dataset.state = state;
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

// An error the visitor should read (an undecodable file, no microphone): shown in the
// page; the run resolves with it rather than throwing, so the page stays usable.
function failed(message) {
  showError(message);
  setStatus("Nothing transcribed", "error");
  setInputs(true);
  return { error: message };
}

function setInputs(enabled) {
  $("file").disabled = !enabled;
  $("record").disabled = !enabled;
}

let ember = null;
let python = null;
let current = null;   // the transcription whose segments are arriving

const clock = (s) => {
  const m = Math.floor(s / 60);
  return `${m}:${(s - 60 * m).toFixed(2).padStart(5, "0")}`;
};

function addSegment(seg) {
  const li = document.createElement("li");
  const time = document.createElement("span");
  time.className = "time";
  time.textContent = `${clock(seg.start)} → ${clock(seg.end)}`;
  const text = document.createElement("span");
  text.className = "text";
  text.textContent = seg.text.trim();   // textContent: the model's text, not HTML
  li.append(time, text);
  $("segments").append(li);
}

function startWorker() {
  ember = new EmberWorker();
  window.ember = ember;
  python = (code) => runPython(ember, code);
  showLoadProgress(ember, $);
  ember.onevent = (msg) => {
    if (msg.type !== "segment" || !current) return;
    current.events.push({ ...msg, at_ms: performance.now() - current.started });
    addSegment(msg);
    setStatus(`Transcribing… ${clock(msg.end)} done`, "busy");
  };
  const pageOpened = performance.now();
  const adapterName = (a) => a.description ||
    [a.vendor, a.architecture].filter(Boolean).join(" ") || "WebGPU";
  return ember.ready.then(async (info) => {
    const manifest = JSON.stringify(info.manifest);
    const loaded = JSON.parse(await python(
      `from ember.web import page_whisper\n` +
      `await page_whisper.load(${JSON.stringify(manifest)}, ${JSON.stringify(modelName)})`));
    loaded.page_ready_ms = performance.now() - pageOpened;
    loaded.boot_ms = info.timings_ms;
    $("loading").hidden = true;
    $("model").textContent = `${loaded.model}: ${(loaded.parameters / 1e6).toFixed(1)}M parameters ` +
      `(${loaded.dtype}), ${(loaded.bytes / 1e6).toFixed(0)} MB, on ${adapterName(info.adapter)}; ` +
      `ready in ${(loaded.page_ready_ms / 1000).toFixed(1)} s`;
    setInputs(true);
    setStatus("Choose a file or record.", "ready");
    window.demoLoaded = loaded;
    return loaded;
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
  const loading = startWorker();
  window.demoReady = adapterProblem().then((problem) => {
    if (!problem) return loading;
    ember.worker.terminate();
    loading.catch(() => {});
    return noWebGPU(problem);
  });
}

// The audio in `bytes` (any format this browser decodes) as mono float32 at 16 kHz.
async function decodeAudio(bytes) {
  const context = new OfflineAudioContext(1, 1, SAMPLE_RATE);
  const buffer = await context.decodeAudioData(bytes);
  const mono = new Float32Array(buffer.length);
  for (let c = 0; c < buffer.numberOfChannels; c++) {
    const channel = buffer.getChannelData(c);
    for (let i = 0; i < mono.length; i++) mono[i] += channel[i];
  }
  if (buffer.numberOfChannels > 1) {
    for (let i = 0; i < mono.length; i++) mono[i] /= buffer.numberOfChannels;
  }
  return mono;
}

// Decoded audio -> text: the samples go to the worker; segments arrive as events.
async function transcribeSamples(samples, label) {
  if (!samples.length) return failed(`${label} holds no audio samples.`);
  const url = URL.createObjectURL(new Blob([samples.buffer]));
  const run = { events: [], started: performance.now() };
  current = run;
  $("segments").replaceChildren();
  $("stats").textContent = "";
  setStatus(`Transcribing ${label} (${(samples.length / SAMPLE_RATE).toFixed(1)} s)…`, "busy");
  try {
    const out = JSON.parse(await python(
      `await page_whisper.transcribe(${JSON.stringify(url)}, ${JSON.stringify(label)})`));
    out.page_events = run.events;
    out.page_ms = performance.now() - run.started;
    const first = out.first_segment_seconds;
    $("stats").textContent = `${out.audio_seconds.toFixed(1)} s of audio in ${out.seconds.toFixed(1)} s ` +
      `(${out.real_time_factor.toFixed(2)}× real time` +
      (first === null ? ", no speech found)" : `, first segment after ${first.toFixed(1)} s)`);
    setStatus(out.segments.length ? `Done: ${out.segments.length} segments` : "Done: no speech found", "done");
    window.lastTranscript = out;
    return out;
  } catch (err) {
    return failed(`Transcribing ${label} failed: ${err.message}`);
  } finally {
    current = null;
    URL.revokeObjectURL(url);
    setInputs(true);
  }
}

async function transcribeFile(file) {
  showError("");
  setInputs(false);
  setStatus(`Decoding ${file.name}…`, "busy");
  let samples;
  try {
    samples = await decodeAudio(await file.arrayBuffer());
  } catch (err) {
    return failed(`${file.name} could not be decoded as audio by this browser ` +
                  `(${err.name || "Error"}: ${err.message || err}).`);
  }
  return transcribeSamples(samples, file.name);
}

// What a visitor reads when the microphone cannot be opened.
function microphoneProblem(err) {
  switch (err.name) {
    case "NotAllowedError":
    case "SecurityError":
      return "Microphone permission was denied: allow this page to use the microphone " +
             "(the icon in the address bar), then press Record again.";
    case "NotFoundError":
    case "OverconstrainedError":
      return "No microphone was found: connect one, or choose an audio file instead.";
    case "NotReadableError":
      return "The microphone could not be opened (is another program using it?).";
    default:
      return `The microphone could not be opened (${err.name}: ${err.message}).`;
  }
}

let recorder = null;

// Record until Stop (or MAX_RECORDING_SECONDS), then decode and transcribe the recording.
async function recordAndTranscribe() {
  showError("");
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    return failed("This browser cannot record audio here (no navigator.mediaDevices: the page " +
                  "must come from localhost or https).");
  }
  setInputs(false);
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (err) {
    return failed(microphoneProblem(err));
  }
  const chunks = [];
  try {
    recorder = new MediaRecorder(stream);
  } catch (err) {
    for (const track of stream.getTracks()) track.stop();
    return failed(`This browser cannot record the microphone (${err.name}: ${err.message}).`);
  }
  recorder.ondataavailable = (event) => { if (event.data.size) chunks.push(event.data); };
  const stopped = new Promise((resolve) => { recorder.onstop = resolve; });
  const started = performance.now();
  const seconds = () => (performance.now() - started) / 1000;
  const tick = setInterval(() => {
    $("recording").textContent = `● recording ${seconds().toFixed(1)} s`;
    if (seconds() >= MAX_RECORDING_SECONDS) window.stopRecording();
  }, 100);
  recorder.start();
  $("recording").classList.add("live");
  $("record").hidden = true;
  $("stop-recording").hidden = false;
  setStatus("Recording…", "recording");
  await stopped;
  clearInterval(tick);
  for (const track of stream.getTracks()) track.stop();
  $("recording").classList.remove("live");
  $("recording").textContent = `recorded ${seconds().toFixed(1)} s`;
  $("record").hidden = false;
  $("stop-recording").hidden = true;
  const blob = new Blob(chunks, { type: recorder.mimeType });
  recorder = null;
  let samples;
  try {
    samples = await decodeAudio(await blob.arrayBuffer());
  } catch (err) {
    return failed(`The recording could not be decoded (${err.name || "Error"}: ${err.message || err}).`);
  }
  return transcribeSamples(samples, "the recording");
}

window.stopRecording = () => {
  if (recorder && recorder.state === "recording") recorder.stop();
};

// Each run's promise is window.lastRun: it resolves with page_whisper's answer plus the
// segment events as the page received them, or with {error} (shown in the page).
$("file").addEventListener("change", () => {
  const file = $("file").files[0];
  if (file) window.lastRun = transcribeFile(file);
});
$("record").addEventListener("click", () => { window.lastRun = recordAndTranscribe(); });
$("stop-recording").addEventListener("click", () => window.stopRecording());
