"""VarBuilder: tensors by dotted name, with prefixes, shape checks, dtype casts and placement.

    vb = VarBuilder.from_dir("all-MiniLM-L6-v2", dtype=ember.f32, device=dev)
    w = vb.pp("encoder").pp("layer.0").get((384, 384), "attention.self.query.weight")

A missing or mis-shaped tensor raises an error that names its full path and the file
it was looked up in, so a wrong config or checkpoint is found at load time, not as a
shape error deep inside forward.
"""

import os

from .. import dtype as dt
from ..errors import FormatError, ShapeMismatch, fmt_shape
from .sources import DictSource, SafetensorsSource, sharded_source, source_for_dir


class VarBuilder:
    def __init__(self, source, prefix="", dtype=None, device=None):
        self.source = source
        self.prefix = prefix
        self.dtype = dt.as_dtype(dtype) if dtype is not None else None
        self.device = device

    # --- constructors ------------------------------------------------------------------------
    @classmethod
    def from_tensors(cls, tensors, dtype=None, device=None, label="a dict of tensors"):
        """Backed by a dict of name -> Tensor (or numpy array)."""
        return cls(DictSource(tensors, label), dtype=dtype, device=device)

    @classmethod
    def from_safetensors(cls, paths, dtype=None, device=None):
        """One file, a list of files, or a `model.safetensors.index.json`."""
        if isinstance(paths, (str, os.PathLike)) and os.fspath(paths).endswith(".index.json"):
            return cls(sharded_source(os.fspath(paths)), dtype=dtype, device=device)
        return cls(SafetensorsSource(paths), dtype=dtype, device=device)

    @classmethod
    def from_dir(cls, path, dtype=None, device=None):
        """A model directory: sharded index, model.safetensors or *.safetensors."""
        return cls(source_for_dir(os.fspath(path)), dtype=dtype, device=device)

    # --- prefixes ----------------------------------------------------------------------------
    def pp(self, name):
        """The builder one level down: vb.pp("encoder").get(..., "w") reads "encoder.w"."""
        name = str(name)
        return VarBuilder(
            self.source, self.path(name) if name else self.prefix, self.dtype, self.device
        )

    push_prefix = pp

    def path(self, name):
        return f"{self.prefix}.{name}" if self.prefix else str(name)

    def with_dtype(self, dtype):
        return VarBuilder(self.source, self.prefix, dtype, self.device)

    def with_device(self, device):
        return VarBuilder(self.source, self.prefix, self.dtype, device)

    # --- lookups -------------------------------------------------------------------------------
    def contains(self, name):
        return self.path(name) in self.source

    __contains__ = contains

    def keys(self):
        """Names under this prefix, relative to it."""
        if not self.prefix:
            return sorted(self.source.keys())
        head = self.prefix + "."
        names = self.source.keys()  # a weight source declares keys(), not iteration
        return sorted(k[len(head) :] for k in names if k.startswith(head))

    def shape(self, name):
        full = self.path(name)
        self._require(full)
        return self.source.shape(full)

    def get(self, shape, name, dtype=None):
        """The tensor `name` under this prefix; `shape` (or None to skip the check) must
        equal the stored shape. Cast to the builder's dtype (or `dtype`), placed on its
        device."""
        full = self.path(name)
        self._require(full)
        if shape is not None:
            stored = self.source.shape(full)
            if tuple(stored) != tuple(int(d) for d in shape):
                raise ShapeMismatch(
                    f"VarBuilder: tensor '{full}' in {self.source.where(full)} has shape "
                    f"{fmt_shape(stored)}, expected {fmt_shape(shape)} (check config.json "
                    "against the checkpoint)",
                    op="VarBuilder.get",
                    name=full,
                    shapes=(tuple(stored), tuple(shape)),
                    path=self.source.where(full),
                )
        want = dt.as_dtype(dtype) if dtype is not None else self.dtype
        return self.source.load(full, device=self.device, dtype=want)

    def get_unchecked(self, name, dtype=None):
        return self.get(None, name, dtype)

    def _require(self, full):
        if full in self.source:
            return
        import difflib

        names = list(self.source.keys())
        close = difflib.get_close_matches(full, names, n=3, cutoff=0.6)
        hint = f"; close names: {', '.join(close)}" if close else ""
        under = sum(1 for k in names if self.prefix and k.startswith(self.prefix + "."))
        scope = f" ({under} names under prefix '{self.prefix}')" if self.prefix else ""
        raise FormatError(
            f"VarBuilder: tensor '{full}' not found in {self.source.where()}"
            f"{scope}, {len(names)} tensors in all{hint}",
            path=self.source.where(),
            field=full,
        )

    def __repr__(self):
        return (
            f"VarBuilder(prefix={self.prefix!r}, source={self.source.where()}, "
            f"dtype={self.dtype.name if self.dtype else None}, device={self.device})"
        )
