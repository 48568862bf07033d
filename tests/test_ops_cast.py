"""to(dtype) between every pair of dtypes, and to(device), on every device and layout."""
import numpy as np
import pytest

import ember
from helpers import require
from strided import (ALL, FLOATS, INTS, RESULT, VARIANTS, check, on_device, rng_for,
                     skip_unless_holds, variant)


def _expected_cast(x, src, dst):
    """numpy's astype, except that bf16 results come from torch's round-to-nearest-even."""
    if dst == "bf16":
        torch = require("torch")
        return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16).float().numpy()
    if src in FLOATS and dst in INTS:
        x = np.trunc(x)  # float -> int truncates toward zero, as in C and torch
    return x.astype(RESULT[dst])


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dst", ALL)
@pytest.mark.parametrize("src", ALL)
def test_cast(device, src, dst, kind):
    skip_unless_holds(device, dst)
    rng = rng_for("cast", src, dst, kind)
    signed_ok = dst not in ("u8", "u32") and src not in ("u8", "u32")
    low = -100 if signed_ok else 0
    t, x = variant(kind, (3, 4, 5), src, device, rng, low, 100)
    if src in FLOATS and dst in INTS and dst == "u8":
        pass  # values stay below 100, inside u8
    out = t.to(getattr(ember, dst))
    check(out, _expected_cast(x, src, dst), dst)
    assert out.device == device
    # The dtype-name spelling and the method shortcuts agree.
    assert t.to(dst).dtype is getattr(ember, dst)


def test_cast_shortcuts_and_identity(device):
    t = on_device(np.arange(4), "i32", device)
    assert t.float().dtype is ember.f32
    assert t.long().dtype is ember.i64
    assert t.half().dtype is ember.f16
    assert t.to(ember.i32) is t, "a cast to the same dtype returns the tensor itself"
    assert t.to(device) is t


@pytest.mark.parametrize("shape", [(), (0,), (2, 0)], ids=str)
def test_cast_0d_and_empty(device, shape):
    x = np.full(shape, 2.75, np.float32)
    t = on_device(x, "f32", device)
    check(t.to(ember.i32), np.trunc(x).astype(np.int32), "i32")
    check(t.to(ember.f16), x.astype(np.float16), "f16")


def test_bool_mask_casts(device):
    m = on_device(np.array([0.0, 1.5, -2.0]), "f32", device) > 0
    assert m.dtype is ember.u8
    check(m.to(ember.f32), np.array([0.0, 1.0, 0.0], np.float32), "f32")


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_to_device_round_trip(device, dtype_name, kind):
    skip_unless_holds(device, dtype_name)
    rng = rng_for("transfer", dtype_name, kind)
    cpu = ember.Device.cpu()
    t, x = variant(kind, (3, 4, 5), dtype_name, cpu, rng)
    moved = t.to(device)
    assert moved.device == device and moved.dtype is t.dtype and moved.shape == t.shape
    check(moved, x, dtype_name)
    back = moved.to("cpu")
    assert back.device == cpu
    check(back, x, dtype_name)
    check(moved.cpu(), x, dtype_name)
    # Both at once: device and dtype.
    check(t.to(device, ember.f32), x.astype(np.float32), "f32")


def test_to_a_second_cpu_device_copies():
    """A second array device is a different device: .to() moves (copies) data to it."""
    from ember.backends.array import ArrayBackend
    cpu = ember.Device.cpu()
    other = ember.Device("cpu", 1, ArrayBackend(np, "cpu:1"))
    assert other != cpu and str(other) != str(cpu)
    t = ember.tensor([[1.0, 2.0], [3.0, 4.0]]).t()
    moved = t.to(other)
    assert moved.device == other and moved.device.backend is other.backend
    assert moved.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert not np.shares_memory(moved.storage, t.storage)
    assert (moved + moved).device == other


@pytest.mark.parametrize("shape", [(), (0,), (0, 3)], ids=str)
def test_to_device_0d_and_empty(device, shape):
    x = np.full(shape, 1.25, np.float32)
    t = ember.tensor(x).to(device)
    check(t, x, "f32")
    check(t.to("cpu"), x, "f32")


def test_device_identity_and_names(device):
    cpu = ember.Device.cpu()
    assert cpu is ember.Device.cpu() and cpu == "cpu" and str(cpu) == "cpu"
    assert hash(cpu) == hash(ember.Device.parse("cpu"))
    assert ember.Device.parse(device) is device and device == str(device)
    assert isinstance(ember.Device.best(), ember.Device)
    assert (device == cpu) == (device.kind == "cpu")
