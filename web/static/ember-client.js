// The page's handle on the ember worker: start it, follow its progress, run snippets.
//   const ember = new EmberWorker();
//   ember.onprogress = ({stage, fraction, text}) => ...;
//   const info = await ember.ready;            // adapter name, limits, timings
//   const result = await ember.run("1 + 1");   // {ok, value, repr, stdout, error}
export class EmberWorker {
  constructor(workerURL = new URL("./worker.js", import.meta.url)) {
    this.onprogress = null;
    this.onlog = null;
    this.onevent = null;   // any other message type the worker posts
    this.info = null;
    this.progressLog = [];   // every progress message, for the page and for tests
    this.pending = new Map();
    this.nextId = 1;
    this.ready = new Promise((resolve, reject) => { this._resolve = resolve; this._reject = reject; });
    this.worker = new Worker(workerURL, { type: "module" });
    this.worker.onmessage = (event) => this._receive(event.data);
    // A shared flag Pyodide polls between bytecodes: interrupt() stops a runaway snippet
    // with KeyboardInterrupt. SharedArrayBuffer needs cross-origin isolation (ember serve
    // sends the headers); without it there is no interrupt.
    this.interruptFlag = self.crossOriginIsolated ? new Int32Array(new SharedArrayBuffer(4)) : null;
    if (this.interruptFlag) this.worker.postMessage({ type: "interrupt-buffer", buffer: this.interruptFlag });
    this.worker.onerror = (event) => this._fail(`worker error: ${event.message || "failed to start"}`);
  }

  _receive(msg) {
    switch (msg.type) {
      case "progress":
        this.progressLog.push(msg);
        if (this.onprogress) this.onprogress(msg);
        break;
      case "log":
        if (this.onlog) this.onlog(msg);
        break;
      case "ready":
        this.info = msg;
        this._resolve(msg);
        break;
      case "failed":
        this._fail(msg.error);
        break;
      case "result": {
        const entry = this.pending.get(msg.id);
        this.pending.delete(msg.id);
        if (entry) entry.resolve(msg.result);
        break;
      }
      default:
        // A demo's own messages, posted by its Python while a snippet runs (for example
        // the generation demo's {type: "delta"} per decoded piece of text).
        if (this.onevent) this.onevent(msg);
    }
  }

  _fail(message) {
    const err = new Error(`ember worker failed to start: ${message}`);
    this._reject(err);
    for (const entry of this.pending.values()) entry.reject(err);
    this.pending.clear();
  }

  // Stops the running snippet with KeyboardInterrupt; returns false where not possible.
  interrupt() {
    if (!this.interruptFlag) return false;
    Atomics.store(this.interruptFlag, 0, 2);   // 2 is SIGINT
    return true;
  }

  // Runs Python in the worker; resolves with {ok, value, repr, stdout, error}.
  // mode "async" (default) allows top-level await and sync readback through JSPI;
  // mode "plain" runs without a suspendable stack, as a browser without JSPI would.
  async run(code, { mode = "async" } = {}) {
    await this.ready;
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ type: "run", id, code, mode });
    });
  }
}
