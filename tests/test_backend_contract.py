"""The backend contract (backends/base.py) declares every method callers use: every
attribute that code in core/ outside backends/ reads from a backend object is declared on
`Backend`, and nothing probes a backend with hasattr/getattr. The contract's default
bodies (backends/composites.py) agree with the numpy backend's fused ops."""
import ast
import os
import pathlib

import numpy as np
import pytest

import ember
import ember.functional as F
from ember.backends import composites
from ember.backends.array import ArrayBackend
from ember.backends.base import Backend

CORE = pathlib.Path(ember.__file__).resolve().parent


def _is_backend(node):
    """`backend`, or anything's `.backend` (self.backend, x.backend, dev.backend)."""
    return (isinstance(node, ast.Name) and node.id == "backend") or (
        isinstance(node, ast.Attribute) and node.attr == "backend")


def backend_uses(tree):
    """(line, attribute) for every attribute read from a backend object, and (line,
    "hasattr"/"getattr") for every probe of one."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_backend(node.value):
            found.append((node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("hasattr", "getattr") and node.args
              and _is_backend(node.args[0])):
            found.append((node.lineno, node.func.id))
    return found


def _caller_files():
    return [p for p in sorted(CORE.rglob("*.py")) if "backends" not in p.relative_to(CORE).parts]


def undeclared(files):
    return [bad for path in files for bad in _undeclared_in(path)]


def test_every_backend_attribute_used_in_core_is_declared_on_backend():
    files = _caller_files()
    assert len(files) > 50   # the walk found the package
    uses = [u for p in files for u in backend_uses(ast.parse(p.read_text()))]
    assert len(uses) > 30    # and the calls in it
    assert undeclared(files) == []


def test_the_check_catches_an_undeclared_call_and_a_probe(tmp_path):
    src = tmp_path / "caller.py"
    src.write_text("def f(x, backend):\n    x.backend.softmax(1)\n    backend.fancy_op(2)\n"
                   "    return hasattr(x.backend, 'qmatmul')\n")
    assert sorted(b.split(": ", 1)[1] for b in _undeclared_in(src)) == ["backend.fancy_op",
                                                                        "backend.hasattr"]


def _undeclared_in(path):
    out = []
    for line, attr in backend_uses(ast.parse(path.read_text())):
        if attr in ("hasattr", "getattr") or not hasattr(Backend, attr):
            out.append(f"{path}:{line}: backend.{attr}")
    return out


def test_the_contract_names_no_fused_registry():
    for name in ("has_fused", "fused"):
        assert not hasattr(Backend, name)
        assert not hasattr(ArrayBackend, name)


# --- the default bodies ---------------------------------------------------------------------

class Composed(ArrayBackend):
    """numpy primitives, the contract's default fused ops."""
    softmax = Backend.softmax
    layer_norm = Backend.layer_norm
    linear = Backend.linear
    qmatmul = Backend.qmatmul


@pytest.fixture
def both():
    import numpy
    fast = ember.Device.cpu()
    composed = ember.Device("cpu", 7, Composed(numpy, "cpu:7"))
    return fast, composed


def _on(dev, a):
    return ember.tensor(a, device=dev)


def test_default_softmax_norms_and_linear_match_the_fused_ones(both):
    fast, composed = both
    rng = np.random.default_rng(0)
    x, r = rng.standard_normal((2, 5, 24)).astype(np.float32), rng.standard_normal((2, 5, 24)).astype(np.float32)
    w, b = rng.standard_normal(24).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    lw = rng.standard_normal((7, 24)).astype(np.float32)
    outs = []
    for dev in both:
        tx, tr, tw, tb, tl = (_on(dev, a) for a in (x, r, w, b, lw))
        outs.append([tx.softmax(-1), tx.softmax(1), tx.log_softmax(0),
                     tx.layer_norm(tw, tb, residual=tr), tx.rms_norm(tw, residual=tr),
                     tx.layer_norm(tw, tb),
                     F.linear(tx, tl, _on(dev, b[:7]), "gelu", _on(dev, r[..., :7].copy()))])
    for got, want in zip(outs[1], outs[0], strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=2e-6)


def test_default_qmatmul_dequantizes_a_host_weight_in_chunks(both, monkeypatch):
    class Weight:                     # a host weight: shape and dequantize_rows
        def __init__(self, dense):
            self.dense, self.shape, self.calls = dense, dense.shape, []

        def dequantize_rows(self, start, stop, out=None):
            self.calls.append((start, stop))
            return self.dense[start:stop].copy()

    rng = np.random.default_rng(1)
    dense = rng.standard_normal((40, 256)).astype(np.float32)
    import ember.backends.array as array_backend
    monkeypatch.setattr(array_backend, "_QMATMUL_CHUNK_BYTES", 4096)
    monkeypatch.setattr(composites, "QMATMUL_CHUNK_BYTES", 4096)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    for dev in both:
        wt = Weight(dense)
        tx = _on(dev, x)
        st, shape = dev.backend.qmatmul(tx.storage, tx.layout, wt, ember.f32)
        got = ember.Tensor(st, ember.Layout(shape), ember.f32, dev).numpy()
        np.testing.assert_allclose(got, x @ dense.T, rtol=1e-5, atol=1e-4)
        assert shape == (3, 40) and len(wt.calls) > 1   # never the whole weight at once


def _sdpa_reference(q, k, v, mask, scale, causal):
    s = q @ np.swapaxes(k, -1, -2) * scale
    if mask is not None:
        s = s + mask
    if causal:
        tq, tk = s.shape[-2:]
        s = np.where(np.arange(tk)[None, :] <= np.arange(tq)[:, None] + (tk - tq), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_attention_runs_in_query_tiles_and_matches_numpy(device, causal, monkeypatch):
    monkeypatch.setattr(composites, "ATTENTION_TILE_ELEMENTS", 2 * 3 * 11 * 2)  # 2 rows/tile
    monkeypatch.setattr(composites, "CPU_ATTENTION_TILE_ELEMENTS", 2 * 3 * 11 * 2)
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    k = rng.standard_normal((2, 3, 11, 8)).astype(np.float32)
    v = rng.standard_normal((2, 3, 11, 5)).astype(np.float32)
    mask = np.where(rng.random((1, 1, 7, 11)) < 0.2, -np.inf, 0).astype(np.float32)
    mask[..., -1] = 0    # every query keeps its last key
    calls = []
    real = device.backend.softmax
    monkeypatch.setattr(device.backend, "softmax",
                        lambda *a, **kw: calls.append(a[1].shape) or real(*a, **kw))
    got = F.scaled_dot_product_attention(*(ember.tensor(a, device=device) for a in (q, k, v)),
                                         mask=ember.tensor(mask, device=device),
                                         is_causal=causal)
    want = _sdpa_reference(q, k, v, mask, 1 / np.sqrt(8), causal)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    if device.kind == "cpu" and not causal:
        return  # numpy's own tiles (array_attention) serve: tests/test_array_attention.py
    assert calls and all(s[-2] <= 2 for s in calls)   # never the whole (7, 11) at once


def test_attention_refuses_mismatched_shapes():
    q = ember.zeros(2, 4, 8)
    with pytest.raises(ember.ShapeMismatch, match="must be") as info:
        F.scaled_dot_product_attention(q, ember.zeros(2, 5, 6), ember.zeros(2, 5, 3))
    assert info.value.shapes == ((2, 4, 8), (2, 5, 6), (2, 5, 3))


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_takes_per_row_tables(device, interleaved):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    ang = rng.standard_normal((2, 5, 4)).astype(np.float32)
    cos, sin = np.cos(ang), np.sin(ang)
    tx = ember.tensor(x, device=device)
    got = F.rope(tx, ember.tensor(cos, device=device), ember.tensor(sin, device=device),
                 interleaved).numpy()
    for b in range(2):       # each batch row with its own [T, D/2] tables
        row = F.rope(ember.tensor(x[b], device=device), ember.tensor(cos[b], device=device),
                     ember.tensor(sin[b], device=device), interleaved).numpy()
        np.testing.assert_allclose(got[b], row, rtol=1e-6, atol=1e-6)
    a, c = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., :4], x[..., 4:])
    cb, sb = cos[:, None], sin[:, None]
    first, second = a * cb - c * sb, c * cb + a * sb
    want = np.stack([first, second], -1).reshape(x.shape) if interleaved else \
        np.concatenate([first, second], -1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_rope_names_the_table_shapes_it_takes():
    with pytest.raises(ember.ShapeMismatch, match=r"\[5, 4\] or \[2, 5, 4\]"):
        F.rope(ember.zeros(2, 3, 5, 8), ember.zeros(3, 5, 4), ember.zeros(3, 5, 4))


def test_device_facts_are_declared_properties(device):
    be = device.backend
    assert isinstance(be.info, dict) and be.info["name"]
    assert device.is_software() is be.is_software_adapter
    if device.kind == "cpu":
        assert be.kernel_set == "numpy" and be.is_software_adapter is False
    else:
        by_type = "cpu-adapter" if be.info.get("adapter_type") == "CPU" else "gpu"
        assert be.kernel_set == (os.environ.get("EMBER_WGPU_KERNELS") or by_type)


def test_a_forced_kernel_set_outside_the_two_is_refused_naming_the_variable(monkeypatch):
    from ember.backends.webgpu.runtime import choose_kernel_set

    monkeypatch.setenv("EMBER_WGPU_KERNELS", "tiled")
    with pytest.raises(ember.DeviceError, match=r"EMBER_WGPU_KERNELS='tiled'.*cpu-adapter, gpu"):
        choose_kernel_set({"adapter_type": "CPU"})
    monkeypatch.setenv("EMBER_WGPU_KERNELS", "gpu")
    assert choose_kernel_set({"adapter_type": "CPU"}) == "gpu"
    monkeypatch.delenv("EMBER_WGPU_KERNELS")
    assert choose_kernel_set({"adapter_type": "CPU"}) == "cpu-adapter"
    assert choose_kernel_set({"adapter_type": "DiscreteGPU"}) == "gpu"
