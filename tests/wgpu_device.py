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
