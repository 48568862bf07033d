// The worker half of every ember page: it boots Pyodide, installs the ember wheel, opens
// the WebGPU device and runs Python snippets, so the page's main thread never blocks.
// Protocol (page -> worker): {type: "run", id, code, mode: "async" | "plain"}
// Protocol (worker -> page): {type: "progress", stage, fraction, text}, {type: "ready", ...},
//                            {type: "failed", error}, {type: "result", id, result}
import { loadPyodide } from "./pyodide/pyodide.mjs";

const here = (path) => new URL(path, import.meta.url).href;
const post = (msg) => self.postMessage(msg);
const progress = (stage, fraction, text) => post({ type: "progress", stage, fraction, text });

let runtime = null;   // the Python module ember.web.page_runtime
let queue = Promise.resolve();
let interruptFlag = null;   // Int32Array over a SharedArrayBuffer the page writes 2 into
let setInterrupt = null;

// Fetch a file while reporting how much of it has arrived; the fraction moves the bar
// between `from` and `to`.
async function fetchWithProgress(url, stage, from, to, text) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`fetching ${url}: HTTP ${response.status}`);
  const total = Number(response.headers.get("Content-Length")) || 0;
  const reader = response.body.getReader();
  const chunks = [];
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    received += value.length;
    if (total) progress(stage, from + (to - from) * (received / total),
                        `${text} (${(received / 1e6).toFixed(1)} / ${(total / 1e6).toFixed(1)} MB)`);
  }
  return new Blob(chunks);
}

async function boot() {
  const t0 = performance.now();
  const manifest = await (await fetch(here("./manifest.json"))).json();
  const stdlib = await fetchWithProgress(here("./pyodide/python_stdlib.zip"), "pyodide", 0.02, 0.2,
                                         "Downloading the Python standard library");
  progress("pyodide", 0.25, "Compiling the Pyodide runtime (WebAssembly)");
  const pyodide = await loadPyodide({
    indexURL: here("./pyodide/"),
    stdLibURL: URL.createObjectURL(stdlib),
    stdout: (line) => post({ type: "log", stream: "stdout", line }),
    stderr: (line) => post({ type: "log", stream: "stderr", line }),
  });
  const t1 = performance.now();
  const wheel = await fetchWithProgress(here(manifest.wheel), "wheel", 0.6, 0.7, "Downloading the ember wheel");
  progress("wheel", 0.72, "Installing the ember wheel");
  // Installed from bytes: loadPackage's 404 does not throw, and the wheel is small.
  const wheelName = manifest.wheel.split("/").pop();
  const sitePackages = pyodide.runPython("import site; site.getsitepackages()[0]");
  const zipPath = `/tmp/${wheelName}`;
  pyodide.FS.writeFile(zipPath, new Uint8Array(await wheel.arrayBuffer()));
  pyodide.runPython(`
import zipfile
with zipfile.ZipFile(${JSON.stringify(zipPath)}) as z:
    z.extractall(${JSON.stringify(sitePackages)})
import importlib; importlib.invalidate_caches()
`);
  setInterrupt = (flag) => pyodide.setInterruptBuffer(flag);
  if (interruptFlag) setInterrupt(interruptFlag);
  progress("wheel", 0.8, "Importing ember");
  runtime = pyodide.pyimport("ember.web.page_runtime");
  const t2 = performance.now();
  progress("device", 0.85, "Opening the WebGPU device");
  const info = JSON.parse(await runtime.open_device());
  const t3 = performance.now();
  progress("ready", 1, "Ready");
  post({
    type: "ready", ...info, pyodide_version: pyodide.version, manifest,
    timings_ms: { pyodide: t1 - t0, ember_import: t2 - t1, device: t3 - t2, total: t3 - t0 },
  });
}

const booted = boot().catch((err) => {
  post({ type: "failed", error: String(err && err.message || err), stack: String(err && err.stack || "") });
  throw err;
});

async function runOne(id, code, mode) {
  await booted;
  if (interruptFlag) Atomics.store(interruptFlag, 0, 0);   // an old Stop must not hit this run
  // "async" runs as a coroutine (JSPI: sync readback works); "plain" runs as an ordinary
  // call, where the browser cannot suspend Python, so only the async readback works.
  const json = mode === "plain" ? runtime.run_plain(code) : await runtime.run(code);
  post({ type: "result", id, result: JSON.parse(json) });
}

self.onmessage = (event) => {
  const { type, id, code, mode } = event.data;
  if (type === "interrupt-buffer") {
    interruptFlag = event.data.buffer;
    if (setInterrupt) setInterrupt(interruptFlag);
    return;
  }
  if (type !== "run") return;
  // One snippet at a time, in the order they arrived.
  queue = queue.then(() => runOne(id, code, mode)).catch((err) => post({
    type: "result", id,
    result: { ok: false, stdout: "", error: { type: "JavaScriptError", message: String(err && err.message || err), traceback: String(err && err.stack || "") } },
  }));
};
