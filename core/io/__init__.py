"""File formats: safetensors (and GGUF, npz beside it).

Only readers that import without numpy are imported here, so `ember.io` works in a
browser; numpy-backed readers (gguf) are imported from their own modules.
"""

from .safetensors import (
    SafetensorsFile,
    TensorInfo,
    load_safetensors,
    load_safetensors_bytes,
    load_safetensors_metadata,
    save_safetensors,
    save_safetensors_bytes,
)

__all__ = [
    "SafetensorsFile",
    "TensorInfo",
    "load_safetensors",
    "load_safetensors_bytes",
    "load_safetensors_metadata",
    "save_safetensors",
    "save_safetensors_bytes",
]


def __getattr__(name):
    # npz needs numpy, so it loads on first use and `import ember.io` stays numpy-free.
    if name in ("load_npz", "save_npz"):
        from . import npz

        return getattr(npz, name)
    raise AttributeError(f"module 'ember.io' has no attribute {name!r}")
