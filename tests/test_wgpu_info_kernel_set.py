"""`ember info` names the WebGPU kernel set each adapter gets, and why: by adapter type
(CPU adapters the cpu-adapter set, GPUs the gpu set), or forced by EMBER_WGPU_KERNELS.
No device is needed: adapters are described from their info, features and limits."""
import io

import pytest

from ember.backends.webgpu.info import describe
from ember.cli.info import _write_adapter


class _Adapter:
    def __init__(self, adapter_type):
        self.info = {"adapter_type": adapter_type, "device": f"a {adapter_type} adapter"}
        self.features = {"shader-f16"}
        self.limits = {"max-storage-buffer-binding-size": 1 << 27}


@pytest.mark.parametrize("adapter_type,kernel_set", [("CPU", "cpu-adapter"),
                                                     ("DiscreteGPU", "gpu"),
                                                     ("IntegratedGPU", "gpu")])
def test_the_kernel_set_follows_the_adapter_type(monkeypatch, adapter_type, kernel_set):
    monkeypatch.delenv("EMBER_WGPU_KERNELS", raising=False)
    described = describe(_Adapter(adapter_type), 0)
    assert described["kernel_set"] == kernel_set
    assert described["kernel_set_why"] == f"adapter type {adapter_type}"
    out = io.StringIO()
    _write_adapter(out, 0, described)
    assert f"\n      kernels: {kernel_set} (adapter type {adapter_type})\n" in out.getvalue()
    assert "kernel_set" not in out.getvalue()   # said once, in words, not as raw fields


def test_a_forced_kernel_set_is_shown_with_the_variable(monkeypatch):
    monkeypatch.setenv("EMBER_WGPU_KERNELS", "gpu")
    described = describe(_Adapter("CPU"), 0)
    assert (described["kernel_set"], described["kernel_set_why"]) == (
        "gpu", "EMBER_WGPU_KERNELS=gpu")
