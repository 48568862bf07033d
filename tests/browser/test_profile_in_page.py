"""The profiler in the page: host ops on the browser's device and, where its adapter offers
timestamp queries (Chromium's SwiftShader does, without flags), per-kernel GPU times read
back without blocking (`await Profiler.stop_async()`)."""

CODE = """
import ember
from ember.profiler import Profiler
x = ember.tensor([[0.5 * i - j for i in range(8)] for j in range(4)], device=dev)
w = ember.tensor([[0.1 * (i - j) for i in range(8)] for j in range(16)], device=dev)
b = ember.tensor([0.01 * j for j in range(16)], device=dev)
before = dev.backend.counters["dispatches"]
profiler = Profiler().start()
y = ember.functional.linear(x, w, b).gelu().softmax(-1)
rows = await y.tolist_async()
prof = await profiler.stop_async()
{"ops": {r["name"]: [r["calls"], r["bytes_in"], r["bytes_out"]]
         for r in prof.summary() if r["kind"] == "op"},
 "dispatches": dev.backend.counters["dispatches"] - before,
 "kernels": len(prof.kernels()), "kernel_ns": prof.kernel_time_ns(),
 "gpu_ns": prof.gpu_time_ns(), "timestamps": "timestamp-query" in dev.backend.driver.features,
 "row_sums": [sum(r) for r in rows], "table": prof.table(),
 "trace_events": len(prof.trace()["traceEvents"])}
"""


def test_profile_in_page_counts_ops_and_times_kernels(ember_page):
    got = ember_page.run(CODE)
    out = 4 * 16 * 4
    assert {k: got["ops"][k] for k in ("linear", "unary.gelu", "softmax")} == {
        "linear": [1, (4 * 8 + 8 * 16 + 16) * 4, out], "unary.gelu": [1, out, out],
        "softmax": [1, out, out]}
    assert all(abs(s - 1) < 1e-5 for s in got["row_sums"])
    assert "host ops" in got["table"] and got["trace_events"] > 3
    if got["timestamps"]:
        assert got["kernels"] == got["dispatches"] >= 3
        assert 0 < got["kernel_ns"] <= got["gpu_ns"]
        assert "GPU kernels" in got["table"]
    else:
        assert got["kernels"] == 0
