"""numpy's .npz archives (and single .npy arrays) as ember tensors.

numpy reads these formats itself, so this module only maps names to tensors, refuses
pickled objects (an .npz may carry code), and turns numpy's many error types into a
FormatError naming the file and the array. numpy is required here (CPU-side format).
"""

import os
import zipfile

from .. import dtype as dt
from ..errors import FormatError, UnsupportedDType
from .files import open_regular


def _fail(path, what, name=None, cls=FormatError):
    where = f"npz file {path!r}" + (f", array {name!r}" if name is not None else "")
    return cls(f"{where}: {what}", path=path, tensor=name)


def _to_tensor(path, name, array, device, dtype):
    import numpy

    from ..tensor import _device, tensor

    if array.dtype == numpy.bool_:
        array = array.view(numpy.uint8)
    try:
        edtype = dt.as_dtype(array.dtype.name)
    except UnsupportedDType:
        raise _fail(
            path, f"numpy dtype {array.dtype} has no ember dtype", name, cls=UnsupportedDType
        ) from None
    t = tensor(array, dtype=edtype, device=_device(device))
    if dtype is not None and edtype.is_float and dt.as_dtype(dtype) is not edtype:
        t = t.to(dtype)
    return t


def load_npz(path, device=None, dtype=None):
    """Every array of an .npz (or the one array of an .npy, named "arr_0") as a dict of
    tensors. `dtype` converts floating-point arrays; integer arrays keep their dtype."""
    import numpy

    path = os.fspath(path)
    # Opened by ember, not numpy: a FIFO would block numpy's open forever.
    with open_regular(path, "npz file") as fh:
        try:
            data = numpy.load(fh, allow_pickle=False)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise _fail(path, f"cannot read it ({type(exc).__name__}: {exc})") from None
        if isinstance(data, numpy.ndarray):  # an .npy holds one array
            return {"arr_0": _to_tensor(path, "arr_0", data, device, dtype)}
        with data:
            return {
                name: _to_tensor(path, name, _read(path, data, name), device, dtype)
                for name in data.files
            }


def _read(path, data, name):
    try:
        return data[name]
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise _fail(path, f"cannot read it ({type(exc).__name__}: {exc})", name) from None


def save_npz(tensors, path, compressed=False):
    """Write `tensors` (name -> Tensor, any device) as an .npz. bf16 has no numpy dtype:
    convert it first (`.to(ember.f32)`)."""
    import numpy

    from ..tensor import Tensor

    arrays = {}
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"save_npz: {name!r} is a {type(t).__name__}, not an ember Tensor")
        if t.dtype is dt.bf16:
            raise UnsupportedDType(
                f"save_npz: tensor {name!r} is bf16, which numpy cannot "
                "store; convert it with .to(ember.f32)",
                dtype=t.dtype,
            )
        arrays[name] = numpy.ascontiguousarray(t.cpu().numpy())
    (numpy.savez_compressed if compressed else numpy.savez)(path, **arrays)


__all__ = ["load_npz", "save_npz"]
