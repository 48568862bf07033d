// What the demo pages share: why WebGPU cannot be used here (if it cannot), the load
// progress bar and running Python in the worker for its value.

// One bar for two phases: the worker's boot fills the first 40%, the model the rest
// (from the moment the worker is ready, when the page starts loading its model).
export function showLoadProgress(ember, $) {
  let booted = false;
  ember.ready.then(() => { booted = true; }, () => {});
  ember.onprogress = ({ fraction, text }) => {
    const pct = Math.round((booted ? 0.4 + 0.6 * fraction : 0.4 * fraction) * 100);
    $("bar-fill").style.width = `${pct}%`;
    $("percent").textContent = `${pct}%`;
    $("stage").textContent = text;
  };
}

// The value of `code` run in the worker; a Python error becomes a thrown Error.
export async function runPython(ember, code) {
  const result = await ember.run(code);
  if (!result.ok) throw new Error(`${result.error.type}: ${result.error.message}`);
  return result.value;
}

// Why this browser's WebGPU cannot run the demo (no adapter, or asking for one failed), or
// null; the page checks that navigator.gpu exists first.
export async function adapterProblem() {
  try {
    if (!(await navigator.gpu.requestAdapter())) {
      return "navigator.gpu.requestAdapter() found no GPU adapter (WebGPU is blocked or unsupported here).";
    }
  } catch (err) {
    return `requesting a WebGPU adapter failed: ${err.message || err}`;
  }
  return null;
}
