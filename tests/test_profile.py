"""The profiler: per-op calls and bytes on every device, per-kernel GPU time from timestamp
queries on WebGPU, the Chrome trace, the `--profile` flag and `ember profile`."""
import json
import numbers

import ember
import numpy as np
import pytest
from ember import functional as F
from ember.cli import main
from ember.profiler import profile
from ember.profiler.ops import contract_methods
from helpers import missing
from minilm_fixtures import SENTENCES, minilm_dir  # noqa: F401 (a fixture)

F32 = 4


def check_chrome_trace(doc):
    """Every event has the Trace Event Format's fields with their types; returns the
    complete ("X") events."""
    assert isinstance(doc, dict) and isinstance(doc["traceEvents"], list)
    complete = []
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["args"], dict)
        if e["ph"] == "X":
            for key in ("ts", "dur"):
                assert isinstance(e[key], numbers.Real) and not isinstance(e[key], bool)
                assert e[key] >= 0, e
            complete.append(e)
        else:
            assert e["ph"] == "M" and e["name"] in ("process_name", "thread_name")
            assert isinstance(e["args"]["name"], str)
    return complete


def _dispatches(device):
    return device.backend.counters["dispatches"] if device.kind == "wgpu" else 0


def test_linear_gelu_softmax_counts_calls_and_bytes(device):
    rng = np.random.default_rng(0)
    rows, n_in, n_out = 4, 8, 16
    x = ember.from_numpy(rng.standard_normal((rows, n_in), dtype=np.float32), device=device)
    w = ember.from_numpy(rng.standard_normal((n_out, n_in), dtype=np.float32), device=device)
    b = ember.from_numpy(rng.standard_normal(n_out, dtype=np.float32), device=device)
    before = dict(vars(device.backend))
    dispatches = _dispatches(device)
    with profile() as prof:
        y = F.linear(x, w, b).gelu().softmax(-1)
    out = rows * n_out * F32
    expected = {
        "linear": (1, (rows * n_in + n_in * n_out + n_out) * F32, out),
        "unary.gelu": (1, out, out),
        "softmax": (1, out, out),
    }
    ops = {r["name"]: (r["calls"], r["bytes_in"], r["bytes_out"])
           for r in prof.summary() if r["kind"] == "op"}
    assert ops == expected
    assert vars(device.backend) == before   # nothing left wrapped: no cost once it ends
    if device.kind == "wgpu":
        assert len(prof.kernels()) == _dispatches(device) - dispatches > 0
        assert prof.gpu_time_ns() >= prof.kernel_time_ns() > 0
    np.testing.assert_allclose(y.numpy().sum(-1), np.ones(rows), rtol=1e-5)


def test_nested_contract_calls_are_recorded_under_their_caller(cpu):
    x = ember.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), device=cpu)
    with profile() as prof:
        x.log_softmax(-1)
    # The contract's default log_softmax calls softmax(log=True) on the same backend.
    assert [(r["name"], r["calls"]) for r in prof.summary()] == [("log_softmax", 1)]
    outer, = [e for e in prof.events if e["name"] == "log_softmax"]
    inner, = [e for e in prof.events if e["name"] == "softmax"]
    assert (outer["depth"], inner["depth"]) == (0, 1)
    assert outer["ts_ns"] <= inner["ts_ns"]
    assert inner["ts_ns"] + inner["dur_ns"] <= outer["ts_ns"] + outer["dur_ns"]
    events = check_chrome_trace(prof.trace())
    assert sorted(e["name"] for e in events) == ["log_softmax", "softmax"]


def test_profilers_do_not_nest_and_results_wait_for_the_end(cpu):
    with profile() as prof:
        with pytest.raises(ember.InvalidArgument, match="already active"):
            profile().__enter__()
        with pytest.raises(ember.InvalidArgument, match="once the block has ended"):
            prof.table()
    assert "no ops ran" in prof.table()


def test_every_contract_method_is_wrapped_while_active(cpu):
    with profile():
        shadowed = set(vars(cpu.backend))
    assert {"matmul", "linear", "softmax", "to_bytes_async", "synchronize"} <= shadowed
    assert set(contract_methods()) <= shadowed
    assert "lacks" not in shadowed


def test_minilm_kernel_times_sum_to_the_runs_gpu_time_and_trace_is_valid(minilm_dir,  # noqa: F811
                                                                         tmp_path):
    try:
        device = ember.Device.parse("wgpu")
    except ember.DeviceError as exc:
        missing("a WebGPU adapter", str(exc))
    if "timestamp-query" not in device.backend.driver.features:
        missing("timestamp queries on this adapter", device.backend.driver.name)
    from ember.cli.common import load_embedder
    embedder = load_embedder(minilm_dir, device)
    dispatches = _dispatches(device)
    with profile() as prof:
        vectors = embedder.encode(SENTENCES[:3]).numpy()
    assert vectors.shape == (3, 384)
    kernels, whole = prof.kernel_time_ns("wgpu:0"), prof.gpu_time_ns("wgpu:0")
    assert len(prof.kernels()) == _dispatches(device) - dispatches > 10
    assert 0 < kernels <= whole
    assert whole - kernels <= 0.10 * whole, (kernels, whole)
    labels = {label for _, label, _, _, _ in prof.kernels()}
    assert any(label.startswith("matmul") for label in labels)
    path = prof.save_trace(tmp_path / "minilm.json")
    doc = json.loads(path.read_text())
    events = check_chrome_trace(doc)
    gpu = [e for e in events if e["cat"] == "kernel"]
    assert len(gpu) == len(prof.kernels())
    assert sum(e["dur"] for e in gpu) == pytest.approx(kernels / 1e3)
    with pytest.raises(ember.InvalidArgument, match="exists"):
        prof.save_trace(path)


def test_profile_flag_and_verb_keep_stdout_and_write_the_table_and_trace(capsys, minilm_dir,  # noqa: F811
                                                                         tmp_path):
    texts = ["A kitten naps in the sun.", "Interest rates rose again."]
    argv = ["embed", "--device", "cpu", "--model", minilm_dir, *texts]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    trace = tmp_path / "embed.json"
    assert main(argv + ["--profile", "--profile-trace", str(trace)]) == 0
    out, err = capsys.readouterr()
    assert out == plain
    assert "host ops" in err and "linear" in err and str(trace) in err
    names = {e["name"] for e in check_chrome_trace(json.loads(trace.read_text()))}
    assert {"linear", "layer_norm", "index_select"} <= names
    # The same as a verb of its own; an existing trace file is refused, not overwritten.
    assert main(["profile", "--trace", str(trace)] + argv) == 1
    assert "exists" in capsys.readouterr().err
    assert check_chrome_trace(json.loads(trace.read_text()))
    assert main(["profile"] + argv) == 0
    out, err = capsys.readouterr()
    assert out == plain and "host ops" in err


def test_a_device_opened_while_profiling_is_watched_too():
    from ember.backends.base import Backend

    class Tiny(Backend):
        name = "tiny"

        def full(self, shape, value, dtype):
            return bytes(4 * len(shape))

    key = ("tiny-profile-test", 0)
    try:
        with profile() as prof:
            device = ember.Device._get(*key, Tiny)
            device.backend.full((2, 3), 0.0, ember.f32)
        assert "full" not in vars(device.backend)   # unwrapped once the block ended
    finally:
        ember.Device._cache.pop(key, None)
    assert [(e["name"], e["device"], e["bytes_out"]) for e in prof.events] == [
        ("full", "tiny-profile-test:0", 8)]
