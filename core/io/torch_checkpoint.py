"""PyTorch checkpoints (`torch.save` files: .pth, .pt, .bin) read without torch and
without running anything the file says.

A checkpoint is a pickle, and unpickling calls whatever functions the pickle names, so
loading one with `pickle`/`torch.load(weights_only=False)` lets its author run any
command. Here the unpickler admits only the few names a tensor checkpoint needs, each
mapped onto a harmless stand-in defined below (torch is never imported):
`torch._utils._rebuild_tensor_v2` and `_rebuild_parameter` (they describe a tensor as a
view of a storage), the typed storage classes (`torch.FloatStorage`, ...: only their
dtype is used) and `collections.OrderedDict`. Any other global is refused with a
FormatError naming it, before anything is called.

`TorchCheckpoint(path, inert_objects=True)` reads files that pickle whole objects
(an Ultralytics .pt holds its nn.Module tree): every other global becomes an inert
record class, a fresh subclass of InertObject that only keeps the arguments and the
state the pickle hands it. Nothing named by the file is imported or called; the
pickle machine only ever calls ember's own stand-ins (InertObject.__new__ and
__setstate__ store data, nothing else), so such a file still cannot run code. Module
records (state holding `_parameters`/`_buffers`/`_modules`) are flattened with
torch's state-dict names; `root` is the whole object tree, `ref_array` reads a tensor
met anywhere in it (an attribute such as a model's `stride`).

Two container layouts:
- zip (torch >= 1.6): `<name>/data.pkl` with persistent ids ('storage', type, key,
  location, numel) whose bytes are the member `<name>/data/<key>`;
- legacy: five pickles in a row (magic number, protocol, system info, the object, the
  storage keys), then each storage as an 8-byte element count and its bytes.

Storage bytes are memory-mapped; a tensor is read (and made contiguous) only when asked.
"""

import collections
import contextlib
import io
import mmap
import os
import pickle
import struct
import zipfile
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, fmt_shape

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

# torch storage class -> (safetensors dtype name, numpy dtype of its elements)
STORAGE_DTYPES = {
    "FloatStorage": ("F32", "<f4"),
    "DoubleStorage": ("F64", "<f8"),
    "HalfStorage": ("F16", "<f2"),
    "BFloat16Storage": ("BF16", "<u2"),
    "LongStorage": ("I64", "<i8"),
    "IntStorage": ("I32", "<i4"),
    "ShortStorage": ("I16", "<i2"),
    "CharStorage": ("I8", "i1"),
    "ByteStorage": ("U8", "u1"),
    "BoolStorage": ("BOOL", "u1"),
}


class UnsafeCheckpoint(FormatError):
    """A checkpoint whose pickle names a global other than a tensor rebuild or container."""


@dataclass(frozen=True)
class _StorageType:
    name: str


@dataclass(frozen=True)
class _Storage:
    key: str
    dtype: str  # safetensors name
    numpy_dtype: str
    numel: int


@dataclass(frozen=True)
class TorchTensorInfo:
    """One tensor of a checkpoint: a strided view of a storage."""

    name: str
    dtype: str  # safetensors name: F32, BF16, I64, ...
    shape: tuple
    stride: tuple
    storage: _Storage
    storage_offset: int

    @property
    def nbytes(self):
        n = 1
        for d in self.shape:
            n *= d
        return n * np.dtype(self.storage.numpy_dtype).itemsize


@dataclass(frozen=True)
class _TensorRef:
    storage: _Storage
    offset: int
    shape: tuple
    stride: tuple


def _rebuild_tensor(storage, storage_offset, size, stride, *_ignored):
    if not isinstance(storage, _Storage):
        raise TypeError("the first argument is not a storage")
    return _TensorRef(
        storage, int(storage_offset), tuple(int(d) for d in size), tuple(int(s) for s in stride)
    )


def _rebuild_parameter(data, *_ignored):
    return data


_ADMITTED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
}
_ADMITTED.update({("torch", name): _StorageType(name) for name in STORAGE_DTYPES})


class InertObject:
    """An object of a class ember does not import: `module`, `qualname`, the pickle's
    constructor arguments (`args`) and its BUILD state (`state`), kept as plain data."""

    module = ""
    qualname = ""

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args, obj.kwargs, obj.state = args, kwargs, None
        return obj

    def __setstate__(self, state):
        self.state = state

    def __repr__(self):
        return f"<inert {self.module}.{self.qualname}>"


# the harmless builtins an object pickle needs besides containers (protocol 2 spells
# the module __builtin__); torch.Size is a tuple
_ADMITTED_INERT = {
    ("builtins", "set"): set,
    ("__builtin__", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("__builtin__", "frozenset"): frozenset,
    ("torch", "Size"): tuple,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, fh, path, storages, inert=False):
        super().__init__(fh)
        self._path = path
        self._storages = storages  # key -> _Storage, filled as ids are met
        self._inert = {} if inert else None  # (module, name) -> its InertObject subclass

    def find_class(self, module, name):
        found = _ADMITTED.get((module, name))
        if found is None and self._inert is not None:
            found = _ADMITTED_INERT.get((module, name))
            if found is None:
                found = self._inert.get((module, name))
            if found is None:  # a data-only class; the names are strings, never resolved
                found = type(
                    "InertObject", (InertObject,), {"module": str(module), "qualname": str(name)}
                )
                self._inert[(module, name)] = found
        if found is None:
            raise UnsafeCheckpoint(
                f"{self._path}: the checkpoint's pickle names {module}.{name}, which ember "
                "refuses to import or call (only tensor storages, tensor rebuilds and plain "
                "containers are admitted, so an untrusted file cannot run code)",
                path=self._path,
                field=f"{module}.{name}",
            )
        return found

    def persistent_load(self, pid):
        if not (
            isinstance(pid, tuple)
            and len(pid) >= 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)
        ):
            raise FormatError(
                f"{self._path}: unexpected persistent id {pid!r:.80}",
                path=self._path,
                field="persistent_id",
            )
        if len(pid) > 5 and pid[5] is not None:
            raise FormatError(
                f"{self._path}: storage views (legacy view metadata) are not supported",
                path=self._path,
                field="persistent_id",
            )
        key, numel = str(pid[2]), pid[4]
        if not isinstance(numel, int) or numel < 0:
            raise FormatError(
                f"{self._path}: storage {key!r} has element count {numel!r}",
                path=self._path,
                field="persistent_id",
            )
        dtype, np_dtype = STORAGE_DTYPES[pid[1].name]
        storage = _Storage(key, dtype, np_dtype, numel)
        if self._storages.setdefault(key, storage) != storage:
            raise FormatError(
                f"{self._path}: storage {key!r} is described twice differently",
                path=self._path,
                field="persistent_id",
            )
        return storage


# what a malformed pickle makes the unpickler raise
_PICKLE_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    TypeError,
    ValueError,
    AttributeError,
    IndexError,
    KeyError,
    struct.error,
    RecursionError,
    MemoryError,
)


def _unpickle(fh, path, storages, inert=False):
    try:
        return _RestrictedUnpickler(fh, path, storages, inert).load()
    except FormatError:
        raise
    except _PICKLE_ERRORS as exc:
        raise FormatError(
            f"{path}: the checkpoint's pickle is malformed or truncated "
            f"({type(exc).__name__}: {exc})",
            path=path,
            field="pickle",
        ) from None


def _module_state(obj):
    """The `__dict__` of a pickled torch module record, or None for any other object."""
    st = obj.state
    if isinstance(st, tuple) and len(st) == 2 and isinstance(st[0], dict):
        st = st[0]  # (dict state, slot state)
    if isinstance(st, dict) and isinstance(st.get("_modules"), dict):
        return st
    return None


def _flatten(obj, prefix, out, path):
    if isinstance(obj, _TensorRef):
        out[prefix] = obj
    elif isinstance(obj, InertObject):
        st = _module_state(obj)
        if st is None:
            return  # not a module: its tensors, if any, are reached through `root`
        skip = st.get("_non_persistent_buffers_set") or ()
        for group in ("_parameters", "_buffers", "_modules"):
            items = st.get(group)
            for k, v in items.items() if isinstance(items, dict) else ():
                if v is not None and k not in skip:
                    _flatten(v, f"{prefix}.{k}" if prefix else str(k), out, path)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out, path)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out, path)
    # other leaves (ints, strings: epochs, names) carry no tensor


class TorchCheckpoint:
    """A PyTorch checkpoint opened read-only: `tensors` (name -> TorchTensorInfo, nested
    dicts flattened with '.'), `format` ("zip" or "legacy"), `array(name)`.

    `inert_objects=True` admits pickled objects as InertObject records (see the module
    docstring); `root` is then the unpickled tree."""

    def __init__(self, path, inert_objects=False):
        self.path = os.fspath(path)
        self._inert = bool(inert_objects)
        with open(self.path, "rb") as fh:
            self.size = os.fstat(fh.fileno()).st_size
            if self.size == 0:
                raise FormatError(f"{self.path}: the file is empty", path=self.path)
            self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._starts = {}  # storage key -> byte offset of its data in the file
            self._zip_members = {}
            if zipfile.is_zipfile(self.path):
                self.format = "zip"
                obj = self._open_zip()
            else:
                self.format = "legacy"
                obj = self._open_legacy()
            refs = {}
            try:
                _flatten(obj, "", refs, self.path)
            except RecursionError:  # a container nested without end, or holding itself
                raise FormatError(
                    f"{self.path}: the checkpoint's containers nest too deeply "
                    "(or contain themselves)",
                    path=self.path,
                ) from None
            self.tensors = {name: self._info(name, ref) for name, ref in refs.items()}
            self.root = obj if self._inert else None
        except BaseException:
            self._mm.close()
            raise

    # --- containers ---------------------------------------------------------------------
    def _open_zip(self):
        try:
            zf = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise FormatError(
                f"{self.path}: not a readable zip archive ({exc})", path=self.path
            ) from None
        with zf:
            names = zf.namelist()
            pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
            if len(pkl) != 1:
                raise FormatError(
                    f"{self.path}: a zip checkpoint holds one <name>/data.pkl; "
                    f"found {len(pkl)} (is this a PyTorch file?)",
                    path=self.path,
                    field="data.pkl",
                )
            root = pkl[0][: -len("data.pkl")]
            order = root + "byteorder"
            if order in names and zf.read(order).strip() not in (b"little", b""):
                raise FormatError(
                    f"{self.path}: big-endian checkpoints are not supported",
                    path=self.path,
                    field="byteorder",
                )
            storages = {}
            with zf.open(pkl[0]) as fh:
                obj = _unpickle(io.BytesIO(fh.read()), self.path, storages, self._inert)
            for key, st in storages.items():
                member = f"{root}data/{key}"
                try:
                    zi = zf.getinfo(member)
                except KeyError:
                    raise FormatError(
                        f"{self.path}: storage {key!r} has no member {member}",
                        path=self.path,
                        field=member,
                    ) from None
                need = st.numel * np.dtype(st.numpy_dtype).itemsize
                if zi.file_size < need:
                    raise FormatError(
                        f"{self.path}: member {member} holds {zi.file_size} "
                        f"bytes; storage {key!r} needs {need}",
                        path=self.path,
                        field=member,
                    )
                if zi.compress_type == zipfile.ZIP_STORED:
                    self._starts[key] = self._stored_offset(zi, member, need)
                else:
                    self._zip_members[key] = member
        return obj

    def _stored_offset(self, zi, member, need):
        head = zi.header_offset
        if head + 30 > self.size or bytes(self._mm[head : head + 4]) != b"PK\x03\x04":
            raise FormatError(
                f"{self.path}: member {member} has no local header", path=self.path, field=member
            )
        n_name, n_extra = struct.unpack_from("<HH", self._mm, head + 26)
        start = head + 30 + n_name + n_extra
        if start + need > self.size:
            raise FormatError(
                f"{self.path}: member {member} runs past the end of the file (truncated?)",
                path=self.path,
                field=member,
            )
        return start

    def _open_legacy(self):
        with open(self.path, "rb") as fh:  # the pickles are read in order; the data is mapped
            return self._read_legacy(fh)

    def _read_legacy(self, fh):
        head = []
        for what in ("magic number", "protocol version", "system info"):
            try:
                head.append(_RestrictedUnpickler(fh, self.path, {}).load())
            except FormatError:
                raise
            except _PICKLE_ERRORS:
                raise FormatError(
                    f"{self.path}: not a PyTorch checkpoint (no {what} pickle: "
                    "neither a zip archive nor the legacy format)",
                    path=self.path,
                    field=what,
                ) from None
        if head[0] != LEGACY_MAGIC or head[1] != LEGACY_PROTOCOL:
            raise FormatError(
                f"{self.path}: not a PyTorch checkpoint (magic {head[0]!r:.40}, "
                f"protocol {head[1]!r:.40})",
                path=self.path,
                field="magic",
            )
        info = head[2] if isinstance(head[2], dict) else {}
        if info.get("little_endian") is False:
            raise FormatError(
                f"{self.path}: big-endian checkpoints are not supported",
                path=self.path,
                field="little_endian",
            )
        storages = {}
        obj = _unpickle(fh, self.path, storages, self._inert)
        keys = _unpickle(fh, self.path, {})
        if not isinstance(keys, list):
            raise FormatError(
                f"{self.path}: the storage key list is missing",
                path=self.path,
                field="storage keys",
            )
        pos = fh.tell()
        for key in keys:
            key = str(key)
            st = storages.get(key)
            if st is None:
                raise FormatError(
                    f"{self.path}: storage key {key!r} is listed but never used",
                    path=self.path,
                    field="storage keys",
                )
            if pos + 8 > self.size:
                raise FormatError(
                    f"{self.path}: storage {key!r} is missing (file truncated)",
                    path=self.path,
                    field=f"storage {key}",
                )
            (numel,) = struct.unpack_from("<q", self._mm, pos)
            nbytes = st.numel * np.dtype(st.numpy_dtype).itemsize
            if numel != st.numel or pos + 8 + nbytes > self.size:
                raise FormatError(
                    f"{self.path}: storage {key!r} ({st.numel} elements) is "
                    "truncated or inconsistent",
                    path=self.path,
                    field=f"storage {key}",
                )
            self._starts[key] = pos + 8
            pos += 8 + nbytes
        missing = set(storages) - set(self._starts)
        if missing:
            raise FormatError(
                f"{self.path}: storages {sorted(missing)[:4]} have no data",
                path=self.path,
                field="storage keys",
            )
        return obj

    def _info(self, name, ref):
        st = ref.storage
        if (
            len(ref.shape) != len(ref.stride)
            or any(d < 0 for d in ref.shape)
            or any(s < 0 for s in ref.stride)
        ):
            raise FormatError(
                f"{self.path}: tensor {name!r} has shape {fmt_shape(ref.shape)} "
                f"and strides {list(ref.stride)}",
                path=self.path,
                tensor=name,
            )
        last = ref.offset + sum(
            (d - 1) * s for d, s in zip(ref.shape, ref.stride, strict=True) if d > 0
        )
        if ref.offset < 0 or (all(d > 0 for d in ref.shape) and last >= st.numel):
            raise FormatError(
                f"{self.path}: tensor {name!r} reaches element {last} of a storage of {st.numel}",
                path=self.path,
                tensor=name,
            )
        return TorchTensorInfo(name, st.dtype, ref.shape, ref.stride, st, ref.offset)

    # --- access -------------------------------------------------------------------------
    def _storage_array(self, st):
        dtype = np.dtype(st.numpy_dtype)
        if st.key in self._starts:
            return np.frombuffer(self._mm, dtype=dtype, count=st.numel, offset=self._starts[st.key])
        with zipfile.ZipFile(self.path) as zf:  # a compressed member: one storage in memory
            data = zf.read(self._zip_members[st.key])
        return np.frombuffer(data, dtype=dtype, count=st.numel)

    def array(self, name):
        """The tensor as a contiguous numpy array (BF16 as its uint16 bits)."""
        return self._array(self.tensors[name])

    def ref_array(self, ref, name="tensor"):
        """A tensor met in `root` (not only in `tensors`) as a numpy array; a leaf that is
        not a tensor is refused, naming `name`."""
        if not isinstance(ref, _TensorRef):
            raise FormatError(
                f"{self.path}: {name} is {type(ref).__name__}, not a tensor",
                path=self.path,
                tensor=name,
            )
        return self._array(self._info(name, ref))

    def _array(self, info):
        base = self._storage_array(info.storage)
        if 0 in info.shape:
            return np.empty(info.shape, base.dtype)
        item = base.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            base[info.storage_offset :],
            shape=info.shape,
            strides=tuple(s * item for s in info.stride),
            writeable=False,
        )
        return np.ascontiguousarray(view)

    def release(self, name):
        """Hand the mapped pages of tensor `name`'s storage back to the OS."""
        from .ctranslate2 import _drop_pages

        st = self.tensors[name].storage
        if st.key in self._starts:
            begin = self._starts[st.key]
            _drop_pages(self._mm, begin, begin + st.numel * np.dtype(st.numpy_dtype).itemsize)

    def close(self):
        # arrays may still view the map; it goes when they do
        with contextlib.suppress(BufferError):
            self._mm.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


__all__ = ["InertObject", "TorchCheckpoint", "TorchTensorInfo", "UnsafeCheckpoint"]
