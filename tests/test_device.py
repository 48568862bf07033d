"""Device selection: best() never trades numpy for a software WebGPU adapter."""
import ember
import pytest
from helpers import missing


def _wgpu_or_none():
    try:
        return ember.Device.wgpu()
    except ember.DeviceError:
        return None


def test_lavapipe_counts_as_software():
    dev = _wgpu_or_none()
    if dev is None:
        missing("a wgpu adapter", "Device.wgpu() did not open")
    name = dev.backend.driver.info.get("device", "") + dev.backend.driver.info.get("description", "")
    if "llvmpipe" not in name.lower():
        pytest.skip(f"the adapter here is {name!r}, not lavapipe")
    assert dev.is_software()


def test_best_skips_a_software_adapter_when_numpy_is_there():
    best = ember.Device.best()
    dev = _wgpu_or_none()
    if best.kind == "cuda":
        return
    if dev is not None and not dev.is_software():
        assert best == dev
    else:
        assert best == ember.Device.cpu()
        assert not best.is_software()
