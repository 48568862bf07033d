"""Writing safetensors files one tensor at a time, split into shards above a size.

The header lists every tensor before any data, and each tensor's dtype and shape are
known up front, so each tensor's bytes are produced (read, converted) only when written:
peak memory is about one tensor. Above `max_shard_bytes` the tensors go to
`<stem>-00001-of-0000N.safetensors` beside the requested path, with the index
`<path>.index.json` naming which shard holds which tensor (Hugging Face's layout).
"""

import json
import os
import struct
from dataclasses import dataclass

from ..errors import FormatError
from .safetensors import ALIGNMENT, FILE_DTYPE_BITS


@dataclass
class PlannedTensor:
    name: str
    dtype: str  # safetensors dtype name
    shape: tuple
    produce: object  # () -> bytes-like of exactly nbytes
    written: object = None  # called once the bytes are in the file (to drop input pages)

    @property
    def nbytes(self):
        n = 1
        for d in self.shape:
            n *= int(d)
        return n * FILE_DTYPE_BITS[self.dtype] // 8


def _shards(tensors, max_bytes):
    shards, current, size = [], [], 0
    for t in tensors:
        if current and size + t.nbytes > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(t)
        size += t.nbytes
    return shards + [current]


def shard_paths(path, tensors, max_bytes):
    """[(path, tensors)] the plan writes, and the index path (None when unsharded)."""
    groups = _shards(tensors, max_bytes)
    if len(groups) == 1:
        return [(os.fspath(path), groups[0])], None
    stem = os.fspath(path)
    stem = stem.removesuffix(".safetensors")
    n = len(groups)
    return [
        (f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors", g) for i, g in enumerate(groups)
    ], os.fspath(path) + ".index.json"


def _write_one(fh, tensors, metadata, progress, done):
    # larger items first: with the 8-byte aligned data section every tensor is aligned
    order = sorted(tensors, key=lambda t: -FILE_DTYPE_BITS[t.dtype])
    header = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for t in order:
        header[t.name] = {
            "dtype": t.dtype,
            "shape": [int(d) for d in t.shape],
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-(8 + len(text)) % ALIGNMENT)
    fh.write(struct.pack("<Q", len(text)) + text)
    for t in order:
        if progress is not None:
            progress(done, t)
        done += 1
        data = memoryview(t.produce()).cast("B")
        if data.nbytes != t.nbytes:
            raise FormatError(
                f"safetensors output: tensor {t.name!r} produced {data.nbytes} "
                f"bytes, expected {t.nbytes}",
                tensor=t.name,
            )
        fh.write(data)
        del data
        if t.written is not None:
            t.written()
    return done


def write_safetensors(outputs, path, tensors, metadata=None, max_shard_bytes=None, progress=None):
    """Write `tensors` (PlannedTensor list) through `outputs` (a StagedOutputs); returns
    the paths written."""
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise FormatError(f"safetensors output: tensor names repeat: {dup[:4]}")
    plan, index = shard_paths(path, tensors, max_shard_bytes or float("inf"))
    handles = [(outputs.open(p), group) for p, group in plan]  # refuse before any work
    index_fh = outputs.open(index) if index else None
    done = 0
    for fh, group in handles:
        done = _write_one(fh, group, metadata, progress, done)
    if index_fh is not None:
        weight_map = {t.name: os.path.basename(p) for p, group in plan for t in group}
        json.dump(
            {
                "metadata": {"total_size": sum(t.nbytes for t in tensors)},
                "weight_map": dict(sorted(weight_map.items())),
            },
            _Text(index_fh),
            indent=2,
        )
    return [p for p, _ in plan] + ([index] if index else [])


class _Text:
    """A binary file seen as text by json.dump."""

    def __init__(self, fh):
        self.fh = fh

    def write(self, s):
        self.fh.write(s.encode("utf-8"))


__all__ = ["PlannedTensor", "shard_paths", "write_safetensors"]
