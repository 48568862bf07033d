"""What the device check runs on, before any stage relies on it: versions, which ember is
imported, and whether the cuda-stage device and wgpu open and multiply correctly.

    python benchmarks/gpu_check_probe.py --cuda cuda --peer cuda
    python benchmarks/gpu_check_probe.py --cuda cpu --peer cpu --software-wgpu   # dry mode

Prints what it found, then one JSON line (benchmarks/gpu_check.py reads it); exits 1 when
ember is not this checkout's, a device does not open or gets a wrong product, or wgpu's
adapter is a CPU one without --software-wgpu.
"""

import argparse
import importlib.metadata
import json
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = (
    "numpy",
    "torch",
    "cupy",
    "wgpu",
    "cffi",
    "transformers",
    "gguf",
    "pytest",
    "pytest-xdist",
    "pytest-timeout",
    "hypothesis",
)


def version(name):
    """The installed distribution's version, read from its metadata (nothing imported)."""
    for dist in (name, f"{name}-cuda13x", f"{name}-cuda12x"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "missing"


def matmul_error(dev):
    """Largest error of a 256x256x256 f32 product on `dev`, relative to its largest value."""
    import ember
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    b = rng.standard_normal((256, 256), dtype=np.float32)
    got = (ember.tensor(a, device=dev) @ ember.tensor(b, device=dev)).numpy()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def open_device(spec):
    import ember

    out = {"spec": spec}
    try:
        dev = ember.Device.parse(spec)
        out["error_of_product"] = matmul_error(dev)
    except Exception as exc:  # report it, and keep probing the others
        out.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        return out, None
    out["ok"] = out["error_of_product"] < 1e-4
    out["matmul_error"] = f"{out['error_of_product']:.1e}"
    return out, dev


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuda", default="cuda", help="the device of the tests_cuda stage")
    ap.add_argument("--peer", default="cuda", help="torch's device")
    ap.add_argument(
        "--software-wgpu",
        action="store_true",
        help="accept a CPU adapter (lavapipe: the dry mode); else wgpu must be a GPU",
    )
    args = ap.parse_args()
    found = {"python": platform.python_version(), "executable": sys.executable}
    found["packages"] = {name: version(name) for name in PACKAGES}
    import ember

    where = os.path.dirname(os.path.realpath(ember.__file__))
    found["ember"] = where
    found["ember_is_this_checkout"] = where == os.path.realpath(os.path.join(ROOT, "core"))

    found["cuda"], dev = open_device(args.cuda)
    if dev is not None:
        if dev.kind == "cuda":
            import cupy

            props = cupy.cuda.runtime.getDeviceProperties(dev.index)
            found["cuda"]["name"] = props["name"].decode()
        else:
            found["cuda"]["name"] = f"{dev} (the numpy backend, standing in for CuPy)"

    found["wgpu"], dev = open_device("wgpu")
    if dev is not None:
        be = dev.backend
        info = be.adapter_info
        found["wgpu"].update(
            name=f"{info.get('device')} ({info.get('adapter_type')}, {info.get('backend_type')})",
            adapter=info,
            kernel_set=be.kernel_set,
            shader_f16=be.has_f16,
            max_binding=be.max_binding,
        )
        if be.is_software_adapter and not args.software_wgpu:
            found["wgpu"].update(ok=False, error="a CPU adapter, not the GPU (no NVIDIA ICD?)")
    try:
        import torch

        on = args.peer
        if on == "cuda" and not torch.cuda.is_available():
            found["torch"] = {"version": torch.__version__, "device": "none: no CUDA in torch"}
        else:
            name = torch.cuda.get_device_name() if on == "cuda" else platform.processor() or "cpu"
            found["torch"] = {"version": torch.__version__, "device": f"{on} ({name})"}
    except ImportError as exc:
        found["torch"] = {"version": None, "device": f"none ({exc})"}

    for key, value in found.items():
        print(f"{key}: {value}")
    print(json.dumps(found))
    good = found["ember_is_this_checkout"] and found["cuda"]["ok"] and found["wgpu"]["ok"]
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
