"""The wgpu device for tests/test_wgpu_*.py: skip where no adapter opens (fail under CI)."""
import pytest

import ember
from helpers import missing


@pytest.fixture(scope="session")
def wgpu():
    try:
        return ember.Device.wgpu()
    except ember.DeviceError as exc:
        missing("a WebGPU adapter (wgpu-py)", str(exc))


# lavapipe's real binding limit is 128 MiB; a second backend on the same adapter that plans
# with 4 KiB bindings (and the 256-byte offset alignment browsers use) splits tensors of a
# few thousand elements exactly as it would split hundreds of MiB.
CAP = 4096


@pytest.fixture(scope="session")
def capped(wgpu):
    from ember.backends.webgpu.backend import WebGPUBackend
    from ember.backends.webgpu.native import NativeDriver
    driver = NativeDriver(wgpu.backend.driver.adapter)
    driver.limits["max-storage-buffer-binding-size"] = CAP
    driver.limits["min-storage-buffer-offset-alignment"] = 256
    device = ember.Device("wgpu", 99, WebGPUBackend(driver, "wgpu:capped"))
    assert device.backend.max_binding == CAP
    return device
