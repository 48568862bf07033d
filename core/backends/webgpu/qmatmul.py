"""ggml-quantized weights on WebGPU: raw blocks in a buffer, dequantized inside the matmul.

`upload(be, raw, ggml_type, shape)` puts a weight's GGUF block bytes on the device as they
are (an exactly sized buffer, counted in the pool's bytes in use, not rounded to a size
class); `qmatmul(be, x, lx, qw, dtype)` computes x @ dequantize(W).T in f32 with
shaders/qmatmul.wgsl, which decodes the blocks inside its dot products.

Types with a kernel: the ten common GGUF types, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
Q4_K, Q5_K and Q6_K. Any other type has none here: `supports(t)` is False for it and
Backend.place_quantized dequantizes it to a dense f32 weight at load time.

The blocks are not re-packed: the device buffer holds the file's bytes as they are (plus at
most 7 bytes of padding), and the shader reads fields at byte offsets into an array<u32>.
Most block sizes (18, 22, 34, 110, 210 bytes) are not multiples of 4, so an aligned re-pack
would pad every block (Q4_0 to 20 bytes: +11%) or reorder fields on the host at load, which
the page must do in pure Python; reading a field that straddles two words costs two loads
and a shift instead.

Few rows of x (decoding): one invocation per output column and tile of up to 8 rows,
reading the weight once per tile. On GPU adapters (the runtime's kernel set "gpu") up to
4 rows run in the shader's gemv mode instead: one invocation per column leaves a GPU too
few to hide memory latency (a 4096-column weight is 4096 invocations), so up to 64 share
a column, each decoding part of the row's blocks, their sums added through workgroup
memory. From 8 rows (a prompt) the weight is dequantized a chunk of rows at a time (at
most 16 MiB of f32) into a pooled scratch buffer by the same shader in dequant mode, and
each chunk runs through the f32 matmul kernels (matmul.py), which are much faster than
re-decoding per tile of rows. Splits: a weight over the
storage binding limit by ranges of output rows (whole block rows), x and the output by
ranges of x's rows, and K in parts of whole blocks accumulated into the output, so no
invocation loops more than ~60,000 times in all (lavapipe's cap is 65,535).
"""

from ... import dtype as dt
from ...errors import ShapeMismatch, UnsupportedOp
from ...intmath import ceil_div
from ...layout import Layout
from . import loopcap

# ggml type number -> (shader name, weights per block, bytes per block, loop iterations
# per block for a tile of `tm` rows: the block's own loops plus add_rows' row loop)
_TYPES = {
    2: ("q4_0", 32, 18, lambda tm: 1 + 4 + 8 * tm),
    3: ("q4_1", 32, 20, lambda tm: 1 + 4 + 8 * tm),
    6: ("q5_0", 32, 22, lambda tm: 1 + 4 + 8 * tm),
    7: ("q5_1", 32, 24, lambda tm: 1 + 4 + 8 * tm),
    8: ("q8_0", 32, 34, lambda tm: 1 + 8 + 8 * tm),
    10: ("q2_k", 256, 84, lambda tm: 1 + 16 + 64 + 64 * tm),
    11: ("q3_k", 256, 110, lambda tm: 1 + 16 + 64 + 64 * tm),
    12: ("q4_k", 256, 144, lambda tm: 1 + 4 + 32 + 64 * tm),
    13: ("q5_k", 256, 176, lambda tm: 1 + 4 + 32 + 64 * tm),
    14: ("q6_k", 256, 210, lambda tm: 1 + 2 + 8 + 64 + 64 * tm),
}
_WG = 64
_MAX_TM = 8
# From this many rows of x (a prompt) W is dequantized in chunks of rows into a pooled f32
# scratch buffer of at most _SCRATCH_BYTES and multiplied by the f32 matmul kernels.
# Measured on lavapipe, 2048 x 2048 (tiled / dequantized, ms): Q4_K 4 rows 4.9 / 7.3,
# 8 rows 11.0 / 9.0, 32 rows 32.5 / 14.4; Q6_K 8 rows 11.5 / 10.2; 128 rows of Q4_K 41 ms
# against 37 for the dense f32 weight.
_DEQUANT_ROWS = 8
_SCRATCH_BYTES = 16 << 20
# GPU adapters: up to this many rows of x (decoding; the registers hold a vec4 per lane)
# run the gemv mode, each output column shared by up to _WG lanes.
_GEMV_ROWS = 4


def supports(ggml_type):
    return int(ggml_type) in _TYPES


class QWeight:
    """A quantized (out_features, in_features) weight resident on a WebGPU device."""

    __slots__ = ("storage", "ggml_type", "shape", "row_bytes", "nbytes")

    def __init__(self, storage, ggml_type, shape, row_bytes, nbytes):
        self.storage, self.ggml_type, self.shape = storage, int(ggml_type), tuple(shape)
        self.row_bytes, self.nbytes = row_bytes, nbytes

    def __repr__(self):
        return f"QWeight(type {self.ggml_type}, shape {self.shape}, {self.nbytes} bytes)"


def upload(be, raw, ggml_type, shape):
    """The raw block bytes of a 2-D weight (a bytes-like object) as a QWeight on `be`."""
    t = int(ggml_type)
    if t not in _TYPES:
        raise UnsupportedOp(
            f"qmatmul: ggml type {t} has no WebGPU kernel (supported: "
            f"{', '.join(v[0].upper() for v in _TYPES.values())})",
            op="qmatmul",
        )
    name, qk, ts, _ = _TYPES[t]
    if len(shape) != 2:
        raise ShapeMismatch(
            f"qmatmul: weight must be 2-D, got shape {tuple(shape)}",
            op="qmatmul",
            shape=tuple(shape),
        )
    n, k = int(shape[0]), int(shape[1])
    if k % qk:
        raise ShapeMismatch(
            f"qmatmul: {name} rows of {k} weights are not whole blocks of {qk}",
            op="qmatmul",
            shape=(n, k),
        )
    row_bytes = k // qk * ts
    mv = memoryview(raw).cast("B")
    if mv.nbytes != n * row_bytes:
        raise ShapeMismatch(
            f"qmatmul: {name} weight ({n}, {k}) needs {n * row_bytes} bytes, got {mv.nbytes}",
            op="qmatmul",
            shape=(n, k),
        )
    # 4 bytes of padding: the shader reads a whole word past a block's last byte.
    size = (mv.nbytes + 4 + 3) // 4 * 4
    rt = be.runtime
    if size > rt.pool.max_buffer:
        raise UnsupportedOp(
            f"qmatmul: a weight of {size} bytes exceeds the adapter's maximum "
            f"buffer size of {rt.pool.max_buffer} bytes",
            op="qmatmul",
        )
    # An exactly sized buffer (the pool's size classes would round a weight up to 2x);
    # returned to the pool when the weight dies, it is reused only at that exact size.
    storage = rt.exact_storage(size, "u32")
    rt.write(storage.buf, bytes(mv) + b"\0" * (size - mv.nbytes))
    return QWeight(storage, t, (n, k), row_bytes, mv.nbytes)


def qmatmul(be, x, lx, qw, dtype=dt.f32):
    """x @ dequantize(qw).T: x an f32 storage of layout [..., K]; returns (storage, shape)
    of the f32 result [..., N]."""
    if dtype is not dt.f32:
        raise UnsupportedOp(f"qmatmul: x must be f32 on the device, got {dtype.name}", op="qmatmul")
    n, k = qw.shape
    if not lx.shape or lx.shape[-1] != k:
        raise ShapeMismatch(
            f"qmatmul: x of shape {tuple(lx.shape)} does not match weight "
            f"{qw.shape} (needs last dim {k})",
            op="qmatmul",
            shapes=(tuple(lx.shape), qw.shape),
        )
    lead = tuple(lx.shape[:-1])
    m = 1
    for d in lead:
        m *= d
    if not lx.is_contiguous() or lx.offset % 4:
        x = be.copy_strided(x, lx, dtype)
        lx = Layout(lx.shape)
    if k == 0:  # an empty sum
        return be.full(lead + (n,), 0, dt.f32), lead + (n,)
    out = be.runtime.alloc(m * n, dt.f32, "qmatmul")
    if m * n == 0:
        return out, lead + (n,)
    name, qk, ts, per_block = _TYPES[qw.ggml_type]
    if m >= _DEQUANT_ROWS and 4 * k <= be.runtime.split_limit:
        _dequantized_matmul(be, x, lx, qw, out, m)
        return out, lead + (n,)
    tm = min(_MAX_TM, 1 << (m - 1).bit_length())
    blocks = k // qk
    # Blocks per K part: as many as one invocation may loop over (loopcap.py). A gemv lane
    # decodes only 1/lanes of them, but the parts are kept the same: only rows of some
    # 100,000 weights are split, alike on either kernel set.
    part = max(1, (loopcap.BUDGET - 4 * tm) // per_block(tm))
    gemv = m <= _GEMV_ROWS and be.runtime.kernel_set == "gpu"
    lanes = min(_WG, 1 << (min(blocks, part) - 1).bit_length()) if gemv else 1
    cols = _WG // lanes if gemv else _WG  # output columns per workgroup
    limit = be.runtime.split_limit - 8
    rows_w = limit // qw.row_bytes  # weight rows per binding
    rows_x = limit // (4 * max(k, n))  # x / out rows per binding
    if rows_w < 1 or rows_x < 1:
        raise UnsupportedOp(
            f"qmatmul: one row of the weight ({qw.row_bytes} bytes) or of x/out "
            f"({4 * max(k, n)} bytes) exceeds the adapter's maximum storage binding of "
            f"{be.runtime.max_binding} bytes",
            op="qmatmul",
        )
    rows_x = min(rows_x, be.runtime.max_groups * tm)
    rows_w = min(rows_w, be.runtime.max_groups * cols)
    spec = {
        "MODE": "gemv" if gemv else "matmul",
        "QTYPE": name,
        "TS": ts,
        "QK4": qk // 4,
        "TM": tm,
        "WG": _WG,
        "LANES": lanes,
    }
    pipe = be.runtime.pipeline("qmatmul", "f32", spec, "qmatmul", f16=False)
    wbuf = qw.storage.buf
    for m0 in range(0, m, rows_x):
        m1 = min(m, m0 + rows_x)
        for b0 in range(0, blocks, part):
            b1 = min(blocks, b0 + part)
            kw = (b1 - b0) * qk
            x0 = lx.offset + m0 * k + b0 * qk
            xr, xrel = be.runtime.bind(x, x0, x0 + (m1 - m0 - 1) * k + kw, 4, "qmatmul")
            for n0 in range(0, n, rows_w):
                n1 = min(n, n0 + rows_w)
                first = n0 * qw.row_bytes + b0 * ts
                last = (n1 - 1) * qw.row_bytes + b1 * ts  # one past the last byte
                wr, wrel = be.runtime.bind_words(wbuf, first // 4, ceil_div(last, 4) + 1)
                o0 = m0 * n + n0
                orng, orel = be.runtime.bind(
                    out, o0, o0 + (m1 - m0 - 1) * n + (n1 - n0), 4, "qmatmul"
                )
                params = {
                    "m": m1 - m0,
                    "n": n1 - n0,
                    "blocks": b1 - b0,
                    "x_off": xrel // 4,
                    "x_rs": k // 4,
                    "w_off": wrel * 4 + first % 4,
                    "w_row": qw.row_bytes,
                    "o_off": orel,
                    "o_rs": n,
                    "acc": int(b0 > 0),
                }
                groups = (ceil_div(n1 - n0, cols), ceil_div(m1 - m0, tm), 1)
                be.runtime.launch(pipe, params, [xr, wr, orng], groups)
    return out, lead + (n,)


def _dequantized_matmul(be, x, lx, qw, out, m):
    """A prompt: rows of W dequantized a chunk at a time into one pooled f32 scratch
    buffer (shaders/qmatmul.wgsl in dequant mode), each chunk through the f32 matmul
    kernels into its columns of `out`. Transient memory is the scratch, at most
    _SCRATCH_BYTES (or one row of W)."""
    from .matmul import _Operand, _split_or_launch

    n, k = qw.shape
    name, qk, ts, _ = _TYPES[qw.ggml_type]
    blocks = k // qk
    chunk = max(1, min(n, _SCRATCH_BYTES // (4 * k), be.runtime.split_limit // (4 * k)))
    scratch = be.runtime.alloc(chunk * k, dt.f32, "qmatmul")
    spec = {
        "MODE": "dequant",
        "QTYPE": name,
        "TS": ts,
        "QK4": qk // 4,
        "TM": 1,
        "WG": _WG,
        "LANES": 1,
    }
    pipe = be.runtime.pipeline("qmatmul", "f32", spec, "qmatmul", f16=False)
    t = be.runtime.type_of(dt.f32, "qmatmul")
    # x is not read by the dequant kernel, but its binding must hold a valid range
    xr, _ = be.runtime.bind(x, lx.offset, lx.offset + k, 4, "qmatmul")
    A = _Operand(x, lx.offset, [0], k, 1)
    for n0 in range(0, n, chunk):
        rows = min(n, n0 + chunk) - n0
        first, last = n0 * qw.row_bytes, (n0 + rows) * qw.row_bytes
        wr, wrel = be.runtime.bind_words(qw.storage.buf, first // 4, ceil_div(last, 4) + 1)
        orng, orel = be.runtime.bind(scratch, 0, rows * k, 4, "qmatmul")
        params = {
            "m": 0,
            "n": rows,
            "blocks": blocks,
            "x_off": 0,
            "x_rs": 0,
            "w_off": wrel * 4 + first % 4,
            "w_row": qw.row_bytes,
            "o_off": orel,
            "o_rs": k,
            "acc": 0,
        }
        be.runtime.launch(pipe, params, [xr, wr, orng], be.runtime.grid(rows * blocks, _WG))
        # out[:, n0:n0 + rows] = x @ scratch[:rows].T (scratch read along K: the nt kernels)
        _split_or_launch(
            be,
            t,
            dt.f32,
            A,
            _Operand(scratch, 0, [0], 1, k),
            _Operand(out, n0, [0], n, 1),
            m,
            rows,
            k,
            [1],
            False,
        )
