"""The WebGPU backend's runtime structure: pooled buffers, cached pipelines, batched
submits, async readback, and errors that name what failed."""
import asyncio
import gc

import numpy as np
import pytest
from helpers import require

import ember
from ember.functional import rope
from wgpu_device import wgpu  # noqa: F401  (fixture)

D, HEADS, HIDDEN = 32, 4, 64


def _weights(device, rng):
    names = {"wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D), "w1": (HIDDEN, D),
             "w2": (D, HIDDEN), "ln1": (D,), "ln2": (D,), "b1": (HIDDEN,)}
    return {k: ember.tensor(rng.standard_normal(s, dtype=np.float32) * 0.2, device=device)
            for k, s in names.items()}


def _block(x, w):
    """A small pre-norm transformer block: layer_norm, softmax attention, gelu MLP,
    residuals (linear layers are x @ W.T as in nn.Linear)."""
    b, t, _ = x.shape
    h = x.layer_norm(w["ln1"])
    q = (h @ w["wq"].t()).reshape(b, t, HEADS, D // HEADS).transpose(1, 2)
    k = (h @ w["wk"].t()).reshape(b, t, HEADS, D // HEADS).transpose(1, 2)
    v = (h @ w["wv"].t()).reshape(b, t, HEADS, D // HEADS).transpose(1, 2)
    att = ((q @ k.transpose(-1, -2)) * (1.0 / (D // HEADS) ** 0.5)).softmax(-1)
    o = (att @ v).transpose(1, 2).reshape(b, t, D)
    x = x + o @ w["wo"].t()
    h = x.layer_norm(w["ln2"])
    return x + ((h @ w["w1"].t()) + w["b1"]).gelu() @ w["w2"].t()


def test_repeated_forward_creates_no_new_buffers_or_pipelines(wgpu):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((2, 8, D), dtype=np.float32)
    w = _weights(wgpu, np.random.default_rng(1))
    x = ember.tensor(xs, device=wgpu)
    backend = wgpu.backend
    first = _block(x, w).numpy()                     # warm-up: buffers and pipelines made
    made = wgpu.memory_stats()["buffers_created"]
    stats = backend.kernel_stats()
    for _ in range(3):
        again = _block(x, w).numpy()
        np.testing.assert_array_equal(again, first)
    assert wgpu.memory_stats()["buffers_created"] == made
    after = backend.kernel_stats()
    assert after["pipeline_misses"] == stats["pipeline_misses"]
    assert after["pipeline_hits"] > stats["pipeline_hits"]
    # Same block on the CPU gives the same numbers (f32 tolerance).
    cpu = ember.Device.cpu()
    ref = _block(ember.tensor(xs), {k: v.to(cpu) for k, v in w.items()}).numpy()
    np.testing.assert_allclose(first, ref, rtol=1e-4, atol=1e-5)


def test_memory_stats_track_live_and_pooled_bytes(wgpu):
    backend = wgpu.backend
    gc.collect()   # tensors of earlier tests left in reference cycles die now, not midway
    before = backend.memory_stats()
    t = ember.zeros(1000, 257, device=wgpu)
    size = t.storage.buf.size                        # its size class
    assert size >= 1000 * 257 * 4
    during = backend.memory_stats()
    assert during["bytes_in_use"] == before["bytes_in_use"] + size
    del t
    after = backend.memory_stats()
    assert after["bytes_in_use"] == before["bytes_in_use"]
    assert after["bytes_pooled"] == during["bytes_pooled"] + size
    again = ember.zeros(1000, 257, device=wgpu)      # reuses the pooled buffer
    assert backend.memory_stats()["buffers_created"] == during["buffers_created"]
    del again


def test_one_submit_per_readback(wgpu):
    backend = wgpu.backend
    x = ember.tensor(np.arange(64, dtype=np.float32).reshape(8, 8), device=wgpu)
    x.numpy()
    start = backend.kernel_stats()
    y = x
    for _ in range(20):                               # 20+ dispatches, nothing submitted
        y = (y * 0.5 + 1.0).relu()
    mid = backend.kernel_stats()
    assert mid["submits"] == start["submits"]
    assert mid["dispatches"] >= start["dispatches"] + 40
    got = y.numpy()
    end = backend.kernel_stats()
    assert end["submits"] == start["submits"] + 1
    expected = np.arange(64, dtype=np.float32).reshape(8, 8)
    for _ in range(20):
        expected = np.maximum(expected * np.float32(0.5) + np.float32(1.0), 0)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_async_readback(wgpu):
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    t = ember.tensor(x, device=wgpu)

    async def main():
        a, b = await asyncio.gather((t * 2.0).numpy_async(), t.T.tolist_async())
        c = await t.sum().item_async()
        return a, b, c

    a, b, c = asyncio.run(main())
    np.testing.assert_array_equal(a, x * 2)
    assert b == x.T.tolist()
    assert c == float(x.sum())


@pytest.mark.parametrize("dtype_name", ["bf16", "f16", "i64", "u8"])
def test_async_readback_of_converted_dtypes(wgpu, dtype_name):
    x = np.array([[-3, 1, 2], [7, 0, 5]]) if dtype_name != "u8" else np.array([[3, 255, 0]])
    t = ember.tensor(x, dtype=dtype_name, device=wgpu)
    got = asyncio.run(t.numpy_async())
    np.testing.assert_array_equal(got, x)


def test_shader_failure_is_a_device_error_naming_the_kernel(wgpu):
    backend = wgpu.backend
    t = backend.types["f32"]
    spec = {"S": "f32", "OP": "no_such_function(x)", "PARAM": "pf", "ROUND": "", "ND": 1,
            "WG": 64, "EPT": 1, "OVERFLOW": ""}
    with pytest.raises(ember.DeviceError) as info:
        backend.runtime.kernel("unary", t, spec, op="broken_op")
    assert "unary" in str(info.value) and "broken_op" in str(info.value)
    assert "no_such_function" in str(info.value)
    # The device still works afterwards.
    assert (ember.ones(3, device=wgpu) + 1).tolist() == [2.0, 2.0, 2.0]


def test_op_across_cpu_and_wgpu_is_a_device_mismatch(wgpu):
    a = ember.ones(3, device=wgpu)
    b = ember.ones(3)
    with pytest.raises(ember.DeviceMismatch, match="cpu"):
        a + b
    with pytest.raises(ember.DeviceMismatch):
        b.matmul(a.reshape(3, 1))


def test_no_adapter_says_how_to_get_one(monkeypatch):
    native = require("ember.backends.webgpu.native")
    monkeypatch.setattr(native.wgpu.gpu, "enumerate_adapters_sync", lambda: [])
    with pytest.raises(ember.DeviceError) as info:
        native.open_native_backend(0)
    assert "mesa-vulkan-drivers" in str(info.value) and "driver" in str(info.value)


def test_unsupported_dtypes_and_i64_range_are_clear_errors(wgpu):
    with pytest.raises(ember.UnsupportedDType, match="f64"):
        ember.tensor(np.ones(2), dtype="f64", device=wgpu)
    with pytest.raises(ember.UnsupportedDType, match="i64.*32 bits"):
        ember.tensor(np.array([2 ** 40]), device=wgpu)
    ids = ember.tensor([0, 5], device=wgpu)
    with pytest.raises(ember.DimOutOfRange, match="index_select.*5"):
        ember.ones(3, 2, device=wgpu).index_select(0, ids)


def _rope_reference(x, cos, sin, interleaved):
    x = x.astype(np.float64)
    out = np.empty_like(x)
    half = x.shape[-1] // 2
    for i in range(half):
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
        out[..., a] = x[..., a] * cos[:, i] - x[..., b] * sin[:, i]
        out[..., b] = x[..., b] * cos[:, i] + x[..., a] * sin[:, i]
    return out


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype_name", ["f32", "f16", "bf16"])
def test_fused_rope_matches_reference(wgpu, interleaved, dtype_name):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, 3, 8)).astype(np.float32)    # [b, t, h, d] ...
    pos = np.arange(5)[:, None] / (100.0 ** (np.arange(4)[None, :] / 4))
    cos, sin = np.cos(pos).astype(np.float32), np.sin(pos).astype(np.float32)
    # ... viewed as [b, h, t, d]: a strided input, read in place.
    tx = ember.tensor(x, dtype=dtype_name, device=wgpu).transpose(1, 2)
    got = rope(tx, ember.tensor(cos, dtype=dtype_name, device=wgpu),
               ember.tensor(sin, dtype=dtype_name, device=wgpu), interleaved)
    xr = ember.tensor(x, dtype=dtype_name).to(ember.f32).numpy().transpose(0, 2, 1, 3)
    cr = ember.tensor(cos, dtype=dtype_name).to(ember.f32).numpy()
    sr = ember.tensor(sin, dtype=dtype_name).to(ember.f32).numpy()
    expected = _rope_reference(xr, cr, sr, interleaved)
    from helpers import TOL
    rtol, atol = TOL[dtype_name]
    np.testing.assert_allclose(got.to(ember.f32).numpy(), expected, rtol=rtol, atol=atol)
    # The Tensor method and the CPU (composite) path agree with the fused kernel.
    cpu = ember.Device.cpu()
    on_cpu = ember.tensor(x, dtype=dtype_name).transpose(1, 2).rope(
        ember.tensor(cos, dtype=dtype_name), ember.tensor(sin, dtype=dtype_name), interleaved)
    assert on_cpu.device == cpu
    np.testing.assert_allclose(on_cpu.to(ember.f32).numpy(), expected, rtol=rtol, atol=atol)


def test_adapter_listing_matches_the_opened_device(wgpu):
    from ember.backends.webgpu.info import list_adapters
    adapters = list_adapters()
    first = adapters[0]
    assert first["device"] == "wgpu:0"
    assert first["name"] == wgpu.backend.driver.name
    assert first["limits"]["max-storage-buffer-binding-size"] == wgpu.backend.max_binding
    assert first["f16"] == ("shader-f16" in wgpu.backend.driver.adapter.features)


@pytest.mark.parametrize("split", [(64, 1), (64, 64), (256, 256), (64, 16)])
def test_row_kernels_with_every_row_split(wgpu, monkeypatch, split):
    """softmax, layer/rms norm and reductions give the same result whether an invocation
    owns a row (CPU adapters) or a workgroup tree shares it (GPUs): both paths run here."""
    from ember.backends.webgpu import rows
    monkeypatch.setattr(rows, "row_split", lambda runtime, rows, n, passes: split)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 70, 33), dtype=np.float32)
    w = rng.standard_normal(33, dtype=np.float32)
    b = rng.standard_normal(33, dtype=np.float32)
    t = ember.tensor(x, device=wgpu).transpose(0, 1)          # strided rows
    xt = x.transpose(1, 0, 2).astype(np.float64)
    e = np.exp(xt - xt.max(1, keepdims=True))
    np.testing.assert_allclose(t.softmax(1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(t.log_softmax(-1).numpy(),
                               xt - xt.max(-1, keepdims=True) - np.log(np.exp(
                                   xt - xt.max(-1, keepdims=True)).sum(-1, keepdims=True)),
                               rtol=1e-5, atol=1e-5)
    mu = xt.mean(-1, keepdims=True)
    ln = (xt - mu) / np.sqrt(((xt - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    got = t.layer_norm(ember.tensor(w, device=wgpu), ember.tensor(b, device=wgpu)).numpy()
    np.testing.assert_allclose(got, ln, rtol=1e-4, atol=1e-5)
    rms = xt / np.sqrt((xt ** 2).mean(-1, keepdims=True) + 1e-6) * w
    got = t.rms_norm(ember.tensor(w, device=wgpu)).numpy()
    np.testing.assert_allclose(got, rms, rtol=1e-4, atol=1e-5)
    # Reductions take the same split.
    np.testing.assert_allclose(t.sum(-1).numpy(), xt.sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.mean((0, 2)).numpy(), xt.mean((0, 2)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(t.max(1).numpy(), x.transpose(1, 0, 2).max(1))
    np.testing.assert_array_equal(t.argmin(-1).numpy(), x.transpose(1, 0, 2).argmin(-1))


def test_wgpu_backend_runs_without_numpy(wgpu):
    """The backend needs neither numpy nor per-element Python: host data travels as
    bytes (what the browser gets), in a process where numpy cannot be imported."""
    import json
    import subprocess
    import sys
    code = (
        "import sys, json, asyncio\n"
        "sys.modules['numpy'] = None\n"
        "import ember\n"
        "d = ember.Device.wgpu()\n"
        "x = ember.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=d)\n"
        "out = {'mm': (x @ x.T).tolist(), 'bf16': x.to('bf16').tolist(),\n"
        "       'u8': ember.tensor([5, 255], dtype='u8', device=d).tolist(),\n"
        "       'i64': (ember.arange(4, device=d) - 2).tolist(),\n"
        "       'async': asyncio.run(x.T.tolist_async())}\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert out["mm"] == (x @ x.T).tolist()
    assert out["bf16"] == x.tolist() and out["async"] == x.T.tolist()
    assert out["u8"] == [5, 255] and out["i64"] == [-2, -1, 0, 1]


@pytest.mark.parametrize("m", [1, 2, 3, 5, 12, 13])
@pytest.mark.parametrize("layout", ["x_at_w", "x_at_w_t"])
def test_vec4_matmul_kernels_at_every_row_count(wgpu, m, layout):
    """Register tiles shrink for small M (one-token decoding) and clamp at ragged edges."""
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 24), dtype=np.float32)
    w = rng.standard_normal((24, 20), dtype=np.float32)
    tw = ember.tensor(w, device=wgpu) if layout == "x_at_w" else \
        ember.tensor(np.ascontiguousarray(w.T), device=wgpu).t()
    got = (ember.tensor(a, device=wgpu) @ tw).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    kernels = {k[0] for k in wgpu.backend.pipelines}
    if wgpu.backend.kernel_set == "gpu":  # forced by EMBER_WGPU_KERNELS=gpu
        assert ("gemv_nn" in kernels or "gemv_nt" in kernels) if m <= 4 else (
            "matmul_tiled" in kernels)
    else:
        assert "matmul_nn" in kernels or "matmul_nt" in kernels


def test_uploads_never_overtake_recorded_work_across_full_batches(wgpu):
    """A buffer whose dispatch is still recorded is reused by an upload only after that
    work is submitted, also when the dispatch is the one that filled the batch."""
    from ember.backends.webgpu import runtime
    backend = wgpu.backend
    x = np.arange(300, dtype=np.float32)
    t = ember.tensor(x, device=wgpu)
    t.numpy()                                           # an empty batch to start from
    room = (runtime.ARENA - backend.runtime.arena_used) // backend.runtime.block
    keep = [t * 1.0 for _ in range(room)]               # the batch is now full
    y = t * 2.0                                         # flushes, then records y's dispatch
    del y                                               # y's buffer goes back to the pool
    z = ember.tensor(x + 1, device=wgpu)                # and this upload takes it
    np.testing.assert_array_equal(z.numpy(), x + 1)
    assert len(keep) == room


def test_copy_between_overlapping_views_of_one_tensor(wgpu):
    """x[1:] = x[:-1] on one buffer: numpy's result, and no rejected batch (WebGPU refuses
    a buffer bound both read-only and writable in one dispatch)."""
    x = np.arange(10, dtype=np.float32)
    t = ember.tensor(x, device=wgpu)
    pending = t * 3.0                    # recorded work in the same batch must survive
    t[1:].copy_(t[:-1])
    expected = x.copy()
    expected[1:] = x[:-1]
    np.testing.assert_array_equal(t.numpy(), expected)
    np.testing.assert_array_equal(pending.numpy(), x * 3)
