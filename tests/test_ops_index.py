"""index_select, gather, scatter_add, embedding, cat, stack and pad on every device."""
import numpy as np
import pytest

import ember
from helpers import require
from strided import ALL, VARIANTS, check, on_device, rng_for, sample, variant

SHAPE = (4, 5, 3)
INDEX_DTYPES = ("i64", "i32", "u32")


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_index_select(device, dtype_name, kind, dim, index_dtype):
    rng = rng_for("index_select", dtype_name, kind, dim, index_dtype)
    t, x = variant(kind, SHAPE, dtype_name, device, rng)
    ids = rng.integers(0, SHAPE[dim], size=7)
    out = t.index_select(dim, on_device(ids, index_dtype, device))
    check(out, np.take(x, ids, axis=dim), dtype_name)
    # A strided index tensor and a 2-D one.
    big = np.stack([ids, ids[::-1]], axis=1)
    tids = on_device(big, index_dtype, device)[:, 1]
    check(t.index_select(dim, tids), np.take(x, big[:, 1], axis=dim), dtype_name)
    ids2 = rng.integers(0, SHAPE[dim], size=(2, 3))
    check(t.index_select(dim, on_device(ids2, index_dtype, device)),
          np.take(x, ids2, axis=dim), dtype_name)


def test_index_select_empty_and_list_index(device):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = on_device(x, "f32", device)
    check(t.index_select(0, on_device(np.zeros(0, np.int64), "i64", device)), x[[]], "f32")
    check(t[[2, 0]], x[[2, 0]], "f32")
    check(t[:, [3, 3, 1]], x[:, [3, 3, 1]], "f32")
    empty = on_device(np.zeros((0, 4), np.float32), "f32", device)
    check(empty.index_select(1, on_device(np.array([1, 2]), "i64", device)),
          np.zeros((0, 2), np.float32), "f32")


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_gather(device, dtype_name, kind, dim):
    torch = require("torch")
    rng = rng_for("gather", dtype_name, kind, dim)
    t, x = variant(kind, SHAPE, dtype_name, device, rng)
    # torch.gather allows an index smaller than the input in every dim.
    ishape = [3, 4, 2]
    ishape[dim] = 6
    ids = rng.integers(0, SHAPE[dim], size=ishape)
    expected = torch.gather(torch.from_numpy(np.array(x, np.float64)), dim,
                            torch.from_numpy(ids)).numpy()
    check(t.gather(dim, on_device(ids, "i64", device)), expected.astype(x.dtype), dtype_name)
    # Strided index: a transposed index tensor.
    tids = on_device(np.ascontiguousarray(ids.swapaxes(0, 1)), "i64", device).transpose(0, 1)
    check(t.gather(dim, tids), expected.astype(x.dtype), dtype_name)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_scatter_add(device, dtype_name, kind, dim):
    torch = require("torch")
    rng = rng_for("scatter_add", dtype_name, kind, dim)
    t, x = variant(kind, SHAPE, dtype_name, device, rng, 0, 4)
    ishape = [3, 4, 2]
    ishape[dim] = 6  # more indices than the dim: repeated targets must accumulate
    ids = rng.integers(0, SHAPE[dim], size=ishape)
    src_shape = [4, 5, 3]
    src = sample(tuple(src_shape), dtype_name, rng, 0, 4) if ishape[dim] <= SHAPE[dim] else \
        sample(tuple(max(a, b) for a, b in zip(src_shape, ishape, strict=True)), dtype_name, rng, 0, 4)
    expected = torch.from_numpy(np.array(x, np.float64)).scatter_add(
        dim, torch.from_numpy(ids), torch.from_numpy(np.array(src, np.float64))).numpy()
    s = on_device(src, dtype_name, device)
    out = t.scatter_add(dim, on_device(ids, "i64", device), s)
    check(out, expected.astype(x.dtype), dtype_name)
    check(t, x, dtype_name)  # the input is unchanged


def test_scatter_add_empty_index(device):
    x = np.ones((2, 3), np.float32)
    t = on_device(x, "f32", device)
    out = t.scatter_add(0, on_device(np.zeros((0, 3), np.int64), "i64", device),
                        on_device(np.zeros((0, 3), np.float32), "f32", device))
    check(out, x, "f32")


@pytest.mark.parametrize("dtype_name", ["f32", "f16", "bf16", "f64", "i32"])
@pytest.mark.parametrize("ids_shape", [(5,), (2, 3), (), (0,)], ids=str)
def test_embedding(device, dtype_name, ids_shape):
    rng = rng_for("embedding", dtype_name, ids_shape)
    w = sample((10, 4), dtype_name, rng)
    ids = rng.integers(0, 10, size=ids_shape)
    tw = on_device(w, dtype_name, device)
    check(ember.embedding(on_device(ids, "i64", device), tw), w[ids], dtype_name)
    # A strided (transposed) weight table.
    tw2 = on_device(np.ascontiguousarray(w.T), dtype_name, device).t()
    check(ember.embedding(on_device(ids, "i32", device), tw2), w[ids], dtype_name)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_cat(device, dtype_name, kind, dim):
    rng = rng_for("cat", dtype_name, kind, dim)
    a, x = variant(kind, SHAPE, dtype_name, device, rng)
    other = list(SHAPE)
    other[dim] = 2
    y = sample(tuple(other), dtype_name, rng)
    empty_shape = list(SHAPE)
    empty_shape[dim] = 0
    e = np.zeros(empty_shape, x.dtype)
    parts = [a, on_device(y, dtype_name, device), on_device(e, dtype_name, device), a]
    check(ember.cat(parts, dim), np.concatenate([x, y, e, x], axis=dim), dtype_name)
    check(ember.cat([a], dim), x, dtype_name)


@pytest.mark.parametrize("dim", [0, 1, 3, -1])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_stack(device, dtype_name, kind, dim):
    rng = rng_for("stack", dtype_name, kind, dim)
    a, x = variant(kind, SHAPE, dtype_name, device, rng)
    b, y = variant("contiguous", SHAPE, dtype_name, device, rng)
    check(ember.stack([a, b, a], dim), np.stack([x, y, x], axis=dim), dtype_name)


def test_stack_0d_and_empty(device):
    s = [on_device(np.float32(v), "f32", device) for v in (1.0, 2.0)]
    check(ember.stack(s), np.array([1.0, 2.0], np.float32), "f32")
    e = on_device(np.zeros((0, 2), np.float32), "f32", device)
    check(ember.stack([e, e], 1), np.zeros((0, 2, 2), np.float32), "f32")
    check(ember.cat([e, e], 0), np.zeros((0, 2), np.float32), "f32")


PADS = [(1, 2), (0, 0, 2, 1), (1, 1, 0, 2, 1, 0), (-1, 2), (2, -1, -1, 0)]


@pytest.mark.parametrize("mode,pad", [("constant", p) for p in PADS] + [
    ("replicate", p) for p in PADS if min(p) >= 0], ids=str)
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", ALL)
def test_pad(device, dtype_name, kind, pad, mode):
    torch = require("torch")
    rng = rng_for("pad", dtype_name, kind, pad, mode)
    t, x = variant(kind, SHAPE, dtype_name, device, rng)
    tx = torch.from_numpy(np.array(x, np.float64))
    if mode == "constant":
        expected = torch.nn.functional.pad(tx, pad, value=3.0).numpy()
        out = ember.pad(t, pad, value=3)
    else:
        # numpy's "edge" mode is replicate; pairs run from the last dim backwards.
        widths = [(0, 0)] * x.ndim
        for i in range(len(pad) // 2):
            widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
        expected = np.pad(x, widths, mode="edge")
        out = t.pad(pad, mode="replicate")
    check(out, expected.astype(x.dtype), dtype_name)


def test_pad_0d_and_empty(device):
    t = on_device(np.zeros((0, 3), np.float32), "f32", device)
    check(ember.pad(t, (1, 1)), np.zeros((0, 5), np.float32), "f32")
    check(ember.pad(t, (0, 0, 1, 0), value=2.0), np.array([[2.0, 2.0, 2.0]], np.float32), "f32")
    s = on_device(np.float32(4.0), "f32", device)
    check(ember.pad(s, ()), np.float32(4.0), "f32")


def test_gather_0d_and_empty(device):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = on_device(x, "f32", device)
    ids = np.zeros((0, 3), np.int64)
    check(t.gather(0, on_device(ids, "i64", device)), np.zeros((0, 3), np.float32), "f32")
    s = on_device(np.float32(5.0), "f32", device)
    check(s.gather(0, on_device(np.int64(0), "i64", device)), np.float32(5.0), "f32")
    ones = on_device(np.float32(1.5), "f32", device)
    check(s.scatter_add(0, on_device(np.int64(0), "i64", device), ones), np.float32(6.5), "f32")
