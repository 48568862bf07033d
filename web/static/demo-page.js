// What the demo pages (embed.html, generate.html) share: the load progress bar and
// running Python in the worker for its value.

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
