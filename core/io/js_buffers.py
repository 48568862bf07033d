"""Tensors from JavaScript buffers in a page (Pyodide): a fetched weights file goes from
its ArrayBuffer into GPU buffers without the bytes passing through Python.

Only importable inside Pyodide (it imports `js`). The WebGPU backend's transfer module
takes the Uint8Array views made here and, for dtypes held as they are, has the browser
driver queue them straight into the GPU buffer.
"""

import struct

import js
from pyodide.ffi import JsProxy

from .. import dtype as dt
from ..backends.webgpu.transfer import upload_js_view
from ..device import Device
from ..errors import ShapeMismatch
from ..layout import Layout
from ..tensor import Tensor
from .safetensors import _check_supported, parse_header


def tensor_from_js(data, dtype, shape, device=None):
    """A WebGPU tensor filled from a JS ArrayBuffer or typed array (e.g. a fetched weights
    file, or a slice of one) without copying the bytes through Python: for f32 (and f16
    on adapters with shader-f16) the queue copies them straight into the GPU buffer. Other
    dtypes need a widening kernel and go through one host copy."""
    device = Device.webgpu() if device is None else Device.parse(device)
    dtype = dt.as_dtype(dtype)
    shape = tuple(int(d) for d in shape)
    if not isinstance(data, JsProxy):
        raise TypeError(
            f"tensor_from_js: expected a JS ArrayBuffer or typed array, got "
            f"{type(data).__name__}; use ember.tensor() for Python data"
        )
    if hasattr(data, "BYTES_PER_ELEMENT"):  # any typed array: its bytes, as a Uint8Array
        view = js.Uint8Array.new(data.buffer, data.byteOffset, data.byteLength)
    else:
        view = js.Uint8Array.new(data)
    nbytes = int(view.byteLength)
    n = 1
    for d in shape:
        n *= d
    if nbytes != n * dtype.itemsize:
        raise ShapeMismatch(
            f"tensor_from_js: {nbytes} bytes cannot hold shape {list(shape)} "
            f"of {dtype.name} ({n * dtype.itemsize} bytes)",
            op="tensor_from_js",
            shape=shape,
            dtype=dtype,
        )
    storage = upload_js_view(device.backend, view, dtype, shape)
    return Tensor(storage, Layout(shape), dtype, device)


def load_safetensors_js(array_buffer, device=None, name="<ArrayBuffer>"):
    """All tensors of a safetensors file held in a JS ArrayBuffer (a fetched file): only
    the header crosses into Python; each tensor's bytes go from a view of the buffer
    straight into its GPU buffer (`tensor_from_js`). Returns a dict name -> Tensor."""
    if not isinstance(array_buffer, JsProxy):
        raise TypeError(
            f"load_safetensors_js: expected a JS ArrayBuffer, got "
            f"{type(array_buffer).__name__}; use ember.io.load_safetensors_bytes"
        )
    size = int(array_buffer.byteLength)
    head = js.Uint8Array.new(array_buffer, 0, min(8, size)).to_bytes()
    length = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
    header_bytes = (
        js.Uint8Array.new(array_buffer, 0, min(size, 8 + length)).to_bytes()
        if 8 + length <= size
        else head
    )
    header = parse_header(header_bytes, size, name)  # validates against the full size
    out = {}
    for key, info in header.tensors.items():
        _check_supported(name, info)
        begin, end = info.file_offsets
        view = js.Uint8Array.new(array_buffer, begin, end - begin)
        out[key] = tensor_from_js(view, info.dtype, info.shape, device)
    return out
