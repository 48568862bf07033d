"""Host <-> device on WebGPU: uploads, fills and readback.

Dtypes the device holds widened (bf16, f16 without shader-f16, u8, i64: dtypes.py) are
uploaded as the host's words and widened by the unpack kernel, and packed back by the
pack kernel before readback; both run by ranges that fit one storage binding.
"""

from ... import dtype as dt
from ...errors import ShapeMismatch, UnsupportedDType, fmt_shape
from ...intmath import ceil_div
from .dtypes import host_words
from .elementwise import EPT, WG
from .scalars import I32_MAX, I32_MIN, host_round, int_range, param_bits


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def upload_js_view(be, view, dtype, shape):
    """A storage of `shape` from a page's JS Uint8Array (a slice of a fetched file) of
    exactly its size: for dtypes held as they are (f32, f16 with shader-f16) the browser
    driver queues the view straight into the GPU buffer without its bytes entering
    Python; others are widened or range-checked through `from_host` (one host copy)."""
    t = be.runtime.type_of(dtype, "tensor_from_js")
    n = _numel(shape)
    if t.packed or not dtype.is_float or n == 0 or int(view.byteLength) % 4:
        return be.from_host(view.to_bytes(), dtype, shape)
    with be.runtime.lock:
        out = be.runtime.alloc(n, dtype, "tensor_from_js")
        be.runtime.write(out.buf, view)
    return out


def from_host(be, data, dtype, shape):
    op = "from_host"
    rt = be.runtime
    t = rt.type_of(dtype, op)
    n = _numel(shape)
    mv = memoryview(data)
    if mv.nbytes and not mv.c_contiguous:
        mv = memoryview(mv.tobytes())  # one C-order copy of a strided host view
    raw = mv.cast("B") if mv.nbytes and (mv.format != "B" or mv.ndim != 1) else mv
    if raw.nbytes != n * dtype.itemsize:
        raise ShapeMismatch(
            f"from_host: {raw.nbytes} bytes for shape {fmt_shape(shape)} of {dtype.name} "
            f"(expected {n * dtype.itemsize})",
            op=op,
            shapes=(tuple(shape),),
        )
    known = int_range(data, raw, dtype) if dtype.is_int and n else None
    if dtype is dt.i64 and known and (known[0] < I32_MIN or known[1] > I32_MAX):
        raise UnsupportedDType(
            f"from_host: i64 values {known[0]}..{known[1]} do not fit in 32 bits; the "
            f"WebGPU backend keeps i64 as i32 on the device (WGSL has no 64-bit "
            f"integers)",
            op=op,
            dtype=dtype,
        )
    out = rt.alloc(n, dtype, op)
    out.known_range = known
    if n == 0:
        return out
    if not t.packed:
        rt.write(out.buf, raw)
        return out
    # Converted dtypes: upload the host words as they are, widen them in a kernel.
    hs = dtype.itemsize
    tmp = rt.scratch(host_words(dtype, n) * 4, "upload")
    rt.write(tmp, raw)
    pipe = rt.kernel("unpack", t, {"SO": t.storage, "UNPACK": t.unpack, "WG": WG}, op)
    per = (rt.max_binding - 2 * rt.storage_align) // max(hs, t.size) // 4 * 4
    for s in range(0, n, per):
        e = min(n, s + per)
        wrng, wrel = rt.bind_words(tmp, s * hs // 4, ceil_div(e * hs, 4))
        orng, orel = rt.bind(out, s, e, t.size, op)
        rt.launch(
            pipe, {"n": e - s, "out_off": orel, "first_word": wrel}, [wrng, orng], rt.grid(e - s)
        )
    rt.give(tmp)  # reused only after this batch (see Runtime.write)
    return out


def empty(be, shape, dtype):
    return be.runtime.alloc(_numel(shape), dtype, "empty")


def full(be, shape, value, dtype):
    rt = be.runtime
    t = rt.type_of(dtype, "full")
    n = _numel(shape)
    bits = param_bits(host_round(value, dtype), t, dtype, "full")
    out = rt.alloc(n, dtype, "full")
    if n == 0:
        return out
    pipe = rt.kernel("fill", t, {"S": t.storage, "PARAM": t.param, "WG": WG, "EPT": EPT}, "full")
    per = (rt.max_binding - rt.storage_align) // t.size
    for s in range(0, n, per):
        e = min(n, s + per)
        rng, rel = rt.bind(out, s, e, t.size, "full")
        rt.launch(
            pipe, {"n": e - s, "value": bits, "out_off": rel}, [rng], rt.grid(ceil_div(e - s, EPT))
        )
    if dtype.is_int:
        out.known_range = (int(value), int(value))
    return out


def _read_plan(be, storage, layout, dtype, op):
    """(buffer, byte offset, byte length, host length, what to keep alive or the skip
    into the buffer) of the host form, after any copy/pack kernels are recorded."""
    rt = be.runtime
    t = rt.type_of(dtype, op)
    n = layout.numel
    if t.packed:
        if not layout.is_contiguous():
            storage = be.copy_strided(storage, layout, dtype)
            off = 0
        else:
            off = layout.offset
        words = host_words(dtype, n)
        out = rt.scratch(words * 4, "readback")
        pipe = rt.kernel("pack", t, {"SX": t.storage, "PACK": t.pack, "WG": WG}, op)
        # Ranges of 4 elements at a time: a whole number of words for every packing
        # (2 bf16/f16 or 4 u8 per word, 2 words per i64).
        per = (rt.split_limit // max(t.size, dtype.itemsize)) // 4 * 4
        for s in range(0, n, per):
            e = min(n, s + per)
            w0, w1 = s * dtype.itemsize // 4, host_words(dtype, e)
            rng, rel = rt.bind(storage, off + s, off + e, t.size, op)
            wrng, wrel = rt.bind_words(out, w0, w1)
            rt.launch(
                pipe,
                {"words": w1 - w0, "n": e - s, "out_off": wrel, "x_off": rel},
                [rng, wrng],
                rt.grid(w1 - w0),
            )
        return out, 0, words * 4, n * dtype.itemsize, storage
    if not layout.is_contiguous():
        storage = be.copy_strided(storage, layout, dtype)
        start = 0
    else:
        start = layout.offset * t.size
    begin = start // 4 * 4
    end = (start + n * t.size + 3) // 4 * 4
    return storage.buf, begin, end - begin, n * t.size, (storage, start - begin)


def to_bytes(be, storage, layout, dtype):
    if layout.numel == 0:
        return b""
    rt = be.runtime
    with rt.lock:
        buf, off, length, nbytes, keep = _read_plan(be, storage, layout, dtype, "to_bytes")
        data = rt.read(buf, off, length)
        return _finish_read(rt, buf, data, nbytes, keep)


async def to_bytes_async(be, storage, layout, dtype):
    if layout.numel == 0:
        return b""
    rt = be.runtime
    with rt.lock:
        buf, off, length, nbytes, keep = _read_plan(be, storage, layout, dtype, "to_bytes")
        data = await rt.read_async(buf, off, length)
        return _finish_read(rt, buf, data, nbytes, keep)


def _finish_read(rt, buf, data, nbytes, keep):
    skip = keep[1] if isinstance(keep, tuple) else 0
    if not isinstance(keep, tuple):
        rt.give(buf)  # the pack output is ours alone
    mv = memoryview(data).cast("B")
    return mv[skip : skip + nbytes].tobytes() if (skip or len(mv) != nbytes) else bytes(mv)


def to_numpy(be, storage, layout, dtype):
    import numpy

    raw = bytearray(to_bytes(be, storage, layout, dtype))
    arr = numpy.frombuffer(raw, dtype=dtype.numpy_name).reshape(layout.shape)
    if dtype is dt.bf16:
        arr = (arr.astype(numpy.uint32) << 16).view(numpy.float32)
    return arr
