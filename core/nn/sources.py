"""Where a VarBuilder's tensors come from: a dict, safetensors files, a sharded checkpoint.

A source answers four questions by full tensor name: is it there, what shape, what dtype,
and which file holds it (for error messages); `load` returns the tensor on a device in a
dtype. Shapes are checked from the header before anything is read.
"""

import os

from .. import dtype as dt
from ..errors import FormatError
from ..io.files import path_inside, read_json


class DictSource:
    """Tensors (or numpy arrays) held in a dict, e.g. built in a test. A host weight in a
    storage type of its own (io.quant.QTensor: anything with a `ggml_type`) is handed
    out as it is, for the model's layer factory (models.layer_factories) to build on."""

    def __init__(self, tensors, label="a dict of tensors"):
        self.tensors = dict(tensors)
        self.label = label

    def keys(self):
        return self.tensors.keys()

    def __contains__(self, name):
        return name in self.tensors

    def shape(self, name):
        return tuple(self.tensors[name].shape)

    def where(self, name=None):
        return self.label

    def load(self, name, device=None, dtype=None):
        from ..tensor import Tensor, from_numpy

        value = self.tensors[name]
        if hasattr(value, "ggml_type"):
            return value
        t = value if isinstance(value, Tensor) else from_numpy(value)
        return _place(t, device, dtype)


class SafetensorsSource:
    """One or more .safetensors files opened lazily; `weight_map` (from a sharded
    checkpoint's index) says which file holds which name, else every header is read."""

    def __init__(self, paths, weight_map=None, index_path=None):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.paths = [os.fspath(p) for p in paths]
        self.index_path = index_path
        self._files = {}
        self._owner = {}
        if weight_map is not None:
            base = os.path.dirname(index_path) if index_path else ""
            for name, fname in weight_map.items():
                self._owner[name] = path_inside(
                    base or ".", fname, index_path or "weight_map", f"weight_map[{name!r}]"
                )
        else:
            for path in self.paths:
                names = self._open(path).keys()  # a reader declares keys(), not iteration
                for name in names:
                    self._owner[name] = path

    def _open(self, path):
        f = self._files.get(path)
        if f is None:
            if not os.path.exists(path):
                where = f" (named by {self.index_path})" if self.index_path else ""
                raise FormatError(f"safetensors: file {path} does not exist{where}", path=path)
            f = self._files[path] = open_safetensors(path)
        return f

    def keys(self):
        return self._owner.keys()

    def __contains__(self, name):
        return name in self._owner

    def shape(self, name):
        return self._open(self._owner[name]).shape(name)

    def where(self, name=None):
        if name is not None and name in self._owner:
            return self._owner[name]
        if self.index_path:
            return self.index_path
        return ", ".join(self.paths)

    def load(self, name, device=None, dtype=None):
        t = self._open(self._owner[name]).load(name, device, dtype)
        if dtype is not None and dt.as_dtype(dtype).is_float and not t.dtype.is_float:
            # A model asking for a float weight never takes an integer tensor cast to
            # float: the file is not the checkpoint the config describes.
            raise FormatError(
                f"safetensors file {self._owner[name]}: tensor {name!r} is "
                f"{t.dtype.name}, but the model reads it as a "
                f"{dt.as_dtype(dtype).name} weight",
                path=self._owner[name],
                tensor=name,
                field="dtype",
            )
        return _place(t, device, dtype)


def source_for_dir(path):
    """The weights of a model directory: a sharded index, else model.safetensors, else
    every *.safetensors file in it."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        return sharded_source(index)
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        return SafetensorsSource(single)
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if files:
        return SafetensorsSource([os.path.join(path, f) for f in files])
    raise FormatError(
        f"no weights in {path}: expected model.safetensors, model.safetensors.index.json or "
        "*.safetensors (convert .bin checkpoints to safetensors first)",
        path=path,
    )


def sharded_source(index_path):
    index = read_json(index_path, "safetensors index")
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise FormatError(
            f"safetensors index {index_path}: field 'weight_map' must map tensor "
            "names to file names",
            path=index_path,
            field="weight_map",
        )
    base = os.path.dirname(index_path) or "."
    paths = sorted(
        {path_inside(base, v, index_path, f"weight_map[{k!r}]") for k, v in weight_map.items()}
    )
    return SafetensorsSource(paths, weight_map=weight_map, index_path=index_path)


def _place(t, device, dtype):
    if dtype is not None and t.dtype is not dt.as_dtype(dtype):
        # Cast where the data already is: on the CPU before an upload when narrowing
        # saves transfer, after it otherwise; either way the values are the same.
        t = t.to(dtype)
    if device is not None:
        t = t.to(device)
    return t


# --- opening one file ---------------------------------------------------------------------------
def open_safetensors(path):
    """A reader with keys(), shape(name), load(name, device, dtype): ember.io's when it is
    there, else the `safetensors` package's numpy reader."""
    try:
        from ..io import SafetensorsFile
    except ImportError:
        SafetensorsFile = None
    if SafetensorsFile is not None:
        return _EmberReader(SafetensorsFile(path))
    return _PackageReader(path)


class _EmberReader:
    def __init__(self, f):
        self.f = f

    def keys(self):
        return self.f.keys()

    def shape(self, name):
        info = self.f.info(name)
        shape = info.get("shape") if isinstance(info, dict) else getattr(info, "shape", None)
        return tuple(shape)

    def load(self, name, device, dtype):
        return self.f.get(name, device=device, dtype=dtype)


class _PackageReader:
    """Stand-in until ember.io.SafetensorsFile exists: numpy arrays through `safetensors`."""

    def __init__(self, path):
        try:
            from safetensors import safe_open
        except ImportError as exc:
            raise FormatError(
                f"safetensors: cannot read {path}: ember.io has no SafetensorsFile here and the "
                f"`safetensors` package is missing ({exc})",
                path=path,
            ) from None
        try:
            self.f = safe_open(path, framework="numpy")
        except Exception as exc:  # the package raises its own error types
            raise FormatError(f"safetensors: cannot open {path}: {exc}", path=path) from None
        self.path = path

    def keys(self):
        return self.f.keys()

    def shape(self, name):
        return tuple(self.f.get_slice(name).get_shape())

    def load(self, name, device, dtype):
        from ..tensor import from_numpy

        return from_numpy(self.f.get_tensor(name))
