"""What `ember info` shows about WebGPU: each native adapter with its backend, name,
features, the limits that decide what ember can run there, and the kernel set it gets
(runtime.choose_kernel_set: by adapter type, or forced by EMBER_WGPU_KERNELS)."""

import os

from .runtime import KERNEL_SET_ENV, choose_kernel_set

# The limits that matter to ember's kernels, in WebGPU's spelling.
LIMITS_SHOWN = (
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-storage-buffers-per-shader-stage",
    "max-compute-workgroups-per-dimension",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-storage-size",
    "min-storage-buffer-offset-alignment",
)
# Features ember uses or that explain its choices.
FEATURES_SHOWN = ("shader-f16", "subgroup", "timestamp-query", "shader-float32-atomic")


def describe(adapter, index):
    info = dict(adapter.info)
    features = sorted(adapter.features)
    return {
        "index": index,
        "device": f"wgpu:{index}",
        "name": info.get("device") or info.get("description") or "?",
        "backend": info.get("backend_type", "?"),
        "type": info.get("adapter_type", "?"),
        "vendor": info.get("vendor") or "?",
        "driver": info.get("description") or "?",
        "f16": "shader-f16" in features,
        "kernel_set": choose_kernel_set(info),
        "kernel_set_why": (
            f"{KERNEL_SET_ENV}={os.environ[KERNEL_SET_ENV]}"
            if os.environ.get(KERNEL_SET_ENV)
            else f"adapter type {info.get('adapter_type', '?')}"
        ),
        "features": [f for f in FEATURES_SHOWN if f in features],
        "limits": {k: int(adapter.limits[k]) for k in LIMITS_SHOWN if k in adapter.limits},
    }


def list_adapters():
    """Adapters in the order Device.wgpu(index) opens them. Raises DeviceError (saying
    how to get one) when none is found, ImportError when wgpu-py is missing."""
    from .native import list_native_adapters

    return [describe(a, i) for i, a in enumerate(list_native_adapters())]
