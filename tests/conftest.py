"""The one `device` fixture: every op test body runs on every device available here.

Devices: cpu always; wgpu when wgpu-py finds an adapter (lavapipe in CI); cuda when cupy
finds a GPU. Under CI=true the wgpu device is required: a missing adapter fails the run.
EMBER_TEST_DEVICES=cuda,wgpu (benchmarks/gpu_check.py on a GPU machine) runs the bodies on
exactly the devices it names, and a named device that does not open fails.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import ON_CI  # noqa: E402

import ember  # noqa: E402

_opened = {}


def _try_open(kind):
    if kind not in _opened:
        try:
            _opened[kind] = (ember.Device.parse(kind), None)
        except ember.DeviceError as exc:
            _opened[kind] = (None, str(exc))
    return _opened[kind]


_LISTED = [k.strip() for k in os.environ.get("EMBER_TEST_DEVICES", "").split(",") if k.strip()]


def _device_kinds():
    if _LISTED:
        return _LISTED
    kinds = ["cpu", "wgpu"]
    if os.environ.get("EMBER_TEST_CUDA"):
        kinds.append("cuda")
    return kinds


# Dtypes a device kind refuses by design (WGSL has no 64-bit floats; see
# core/backends/webgpu/dtypes.py). Those (device, dtype) cases are not collected rather
# than skipped: the refusal itself is tested once, in tests/test_wgpu_runtime.py.
_DTYPE_GAPS = {"wgpu": {"f64", "float64"}}


def pytest_collection_modifyitems(config, items):
    keep, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        gaps = _DTYPE_GAPS.get(params.get("device"), ())
        if gaps and any(str(v) in gaps for k, v in params.items() if k != "device"):
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session", params=_device_kinds())
def device(request):
    dev, why = _try_open(request.param)
    if dev is None:
        if _LISTED:
            pytest.fail(f"device {request.param} is named in EMBER_TEST_DEVICES but did not open: "
                        f"{why}")
        if ON_CI and request.param != "cuda":
            pytest.fail(f"device {request.param} is required under CI=true but did not open: {why}")
        pytest.skip(f"device {request.param} is not available here: {why}")
    return dev


@pytest.fixture(scope="session")
def cpu():
    return ember.Device.cpu()


@pytest.fixture
def attention_kernels():
    """llvm_attention's compiled kernel (a decode step's attention): as math_kernels."""
    from ember.backends import llvm_attention

    return _built(llvm_attention, "llvm_attention")


@pytest.fixture
def row_attention_kernels():
    """llvm_attention_rows' compiled kernel (many queries, no mask): as math_kernels."""
    from ember.backends import llvm_attention_rows

    return _built(llvm_attention_rows, "llvm_attention_rows")


@pytest.fixture
def norm_kernels():
    """llvm_norm's compiled layer and RMS norms: as math_kernels."""
    from ember.backends import llvm_norm

    return _built(llvm_norm, "llvm_norm")


def _built(module, name):
    k = module.kernels()
    if k is None:
        if ON_CI:
            pytest.fail(f"{name}'s kernels are not built (llvmlite missing or refused)")
        pytest.skip(f"{name}'s kernels are not built here (no llvmlite, or EMBER_JIT=0)")
    return k


@pytest.fixture
def math_kernels():
    """llvm_math's compiled kernels (GELU, SiLU, softmax exponentials): a failure under
    CI=true where they are not built, a skip on a machine without llvmlite."""
    from ember.backends import llvm_math

    return _built(llvm_math, "llvm_math")
