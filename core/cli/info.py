"""`ember info`: the devices ember can use here, with their libraries, adapters and limits."""

import json
import platform
import sys


def add_parser(subparsers):
    p = subparsers.add_parser(
        "info", help="list the devices ember can use here", description=__doc__
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)
    return p


def cpu_info():
    out = {"python": platform.python_version(), "machine": platform.machine()}
    try:
        import numpy
    except ImportError as exc:
        out["available"] = False
        out["reason"] = f"numpy is missing ({exc})"
        return out
    out["available"] = True
    out["numpy"] = numpy.__version__
    try:
        deps = numpy.show_config(mode="dicts").get("Build Dependencies", {})
        blas = deps.get("blas", {})
        out["blas"] = " ".join(str(blas.get(k, "")) for k in ("name", "version")).strip()
    except Exception:  # older numpy: no dict mode
        out["blas"] = "unknown"
    try:
        from threadpoolctl import threadpool_info

        pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
        if pools:
            out["blas_threads"] = pools[0].get("num_threads")
            out["blas_kernel"] = pools[0].get("architecture")
    except ImportError:
        pass
    import os

    out["cores"] = os.cpu_count()
    return out


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return (
            [_plain(v) for v in sorted(value, key=str)]
            if isinstance(value, (set, frozenset))
            else [_plain(v) for v in value]
        )
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__dict__"):
        return {k: _plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


def wgpu_info():
    """{"available": bool, "adapters": [...] or "reason": str}."""
    try:
        from ..backends.webgpu.info import list_adapters
    except ImportError as exc:
        return {
            "available": False,
            "reason": f"adapter listing is not available in this build ({exc})",
        }
    try:
        adapters = list_adapters()
    except Exception as exc:  # no wgpu, no driver: report, never crash `info`
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}"}
    if not adapters:
        return {"available": False, "reason": "wgpu found no adapter"}
    return {"available": True, "adapters": _plain(adapters)}


def cuda_info():
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        return {"available": False, "reason": "cupy is not installed (pip install ember[cuda])"}
    try:
        from ..device import Device

        dev = Device.cuda(0)
        return {"available": True, "device": str(dev)}
    except Exception as exc:
        return {"available": False, "reason": str(exc)}


def collect():
    return {"cpu": cpu_info(), "wgpu": wgpu_info(), "cuda": cuda_info()}


def run(args, out=None):
    out = out or sys.stdout
    info = collect()
    if args.json:
        json.dump(info, out, indent=2)
        out.write("\n")
        return 0
    cpu = info["cpu"]
    if cpu["available"]:
        extra = "".join(
            f", {k.replace('_', ' ')} {cpu[k]}"
            for k in ("blas_threads", "blas_kernel")
            if cpu.get(k) is not None
        )
        out.write(
            f"cpu     available: numpy {cpu['numpy']}, BLAS {cpu['blas']}{extra}, "
            f"{cpu['cores']} cores, Python {cpu['python']} ({cpu['machine']})\n"
        )
    else:
        out.write(f"cpu     unavailable: {cpu['reason']}\n")
    w = info["wgpu"]
    if w["available"]:
        out.write(f"wgpu    available: {len(w['adapters'])} adapter(s)\n")
        for i, adapter in enumerate(w["adapters"]):
            _write_adapter(out, i, adapter)
    else:
        out.write(f"wgpu    unavailable: {w['reason']}\n")
    c = info["cuda"]
    out.write(
        f"cuda    {'available: ' + c['device'] if c['available'] else 'unavailable: ' + c['reason']}\n"
    )
    return 0


def _write_adapter(out, i, adapter):
    if not isinstance(adapter, dict):
        out.write(f"  [{i}] {adapter}\n")
        return
    kernels = {k: adapter[k] for k in ("kernel_set", "kernel_set_why") if k in adapter}
    head = {
        k: v for k, v in adapter.items() if not isinstance(v, (dict, list)) and k not in kernels
    }
    out.write(f"  [{i}] " + ", ".join(f"{k}: {v}" for k, v in head.items()) + "\n")
    if "kernel_set" in kernels:  # which WebGPU kernel family ember runs there, and why
        why = kernels.get("kernel_set_why")
        out.write(f"      kernels: {kernels['kernel_set']}" + (f" ({why})" if why else "") + "\n")
    for key, value in adapter.items():
        if isinstance(value, list):
            out.write(f"      {key}: {', '.join(str(v) for v in value) or '-'}\n")
        elif isinstance(value, dict):
            out.write(f"      {key}:\n")
            for k, v in value.items():
                out.write(f"        {k}: {v}\n")
