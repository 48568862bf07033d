"""ember.io.gguf and ember.io.quant against the `gguf` reference package.

Reference checks need `gguf` (and `hypothesis` for the property test): under
CI=true a missing one fails the test, elsewhere the test is skipped.
"""

import contextlib
import importlib
import os
import signal
import struct

import numpy as np
import pytest

from ember.errors import DTypeMismatch, FormatError, ShapeMismatch, UnsupportedDType
from ember.io import quant
from ember.io.gguf import GGUFFile, GGUFTensorInfo, GGUFValueType
from ember.io.quant import BLOCK_SIZES, GGMLType, QTensor, qmatmul


def require(modname):
    """Import a reference library: a failure under CI=true, a skip elsewhere."""
    try:
        return importlib.import_module(modname)
    except ImportError as e:
        if os.environ.get("CI", "").strip().lower() == "true":
            pytest.fail(f"{modname} is required when CI=true but cannot be imported: {e}", pytrace=False)
        pytest.skip(f"reference library {modname!r} is not installed ({e})")


@pytest.fixture(scope="module")
def gg():
    return require("gguf")


def ref_type(gg, t):
    return gg.GGMLQuantizationType(int(t))


QUANT_TYPES = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0,
               GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]
REF_QUANTIZABLE = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.BF16]


def assert_same_bits(got, want):
    """Bit-for-bit float32 equality; NaNs must sit at the same places (payloads aside)."""
    assert got.dtype == np.float32 and want.dtype == np.float32
    assert got.shape == want.shape
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    assert np.array_equal(nan_g, nan_w), "NaNs at different places"
    ok = ~nan_g
    gb, wb = got.view(np.uint32)[ok], want.view(np.uint32)[ok]
    if not np.array_equal(gb, wb):
        bad = np.flatnonzero(gb != wb)
        raise AssertionError(f"{bad.size} of {gb.size} values differ, first at {bad[0]}: "
                             f"{got[ok][bad[0]]!r} != {want[ok][bad[0]]!r}")


# f16 values for the scale fields of random blocks: finite, with zeros,
# subnormals, extremes and both signs, so rounding paths get exercised
_F16_SPECIAL = np.array([0.0, -0.0, 6e-8, -6e-8, 1e-5, 65504.0, -65504.0, 1.0, -1.0, 0.5],
                        dtype=np.float16)


def random_f16(rng, n):
    v = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 8, n))).astype(np.float16)
    pick = rng.random(n) < 0.1
    v[pick] = rng.choice(_F16_SPECIAL, pick.sum())
    v[~np.isfinite(v)] = np.float16(1.0)
    return v


def random_blocks(rng, t, n):
    """n random valid blocks of type t as (n, type_size) uint8: random bytes, finite f16 fields."""
    raw = rng.integers(0, 256, size=(n, BLOCK_SIZES[t][1]), dtype=np.uint8)
    layout = quant._LAYOUTS[t]
    view = raw.view(layout).reshape(-1)
    for name in layout.names:
        if layout[name] == np.dtype("<f2"):
            view[name] = random_f16(rng, n)
    return raw


def test_block_sizes_match_reference(gg):
    for t, (block, size) in BLOCK_SIZES.items():
        ref = gg.GGML_QUANT_SIZES.get(ref_type(gg, t))
        assert ref == (block, size), t.name


@pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
def test_dequantize_random_blocks_bit_exact(gg, t):
    rng = np.random.default_rng(int(t))
    block = BLOCK_SIZES[t][0]
    raw = random_blocks(rng, t, 96).reshape(6, -1)           # 6 rows of 16 blocks
    want = gg.quants.dequantize(raw, ref_type(gg, t))
    got = quant.dequantize(raw, t, (6, 16 * block))
    assert want.shape == got.shape == (6, 16 * block)
    assert_same_bits(got, want)


@pytest.mark.parametrize("t", REF_QUANTIZABLE, ids=lambda t: t.name)
def test_dequantize_reference_quantized_bit_exact(gg, t):
    rng = np.random.default_rng(100 + int(t))
    block = BLOCK_SIZES[t][0]
    data = rng.standard_normal((5, 8 * max(block, 32))).astype(np.float32)
    data *= np.exp2(rng.integers(-12, 12, size=(5, 1))).astype(np.float32)
    data[0, :block] = 0.0                                        # an all-zero block
    q = gg.quants.quantize(data, ref_type(gg, t))
    want = gg.quants.dequantize(q, ref_type(gg, t))
    got = quant.dequantize(q, t, data.shape)
    assert_same_bits(got, want)
    assert np.abs(got - data).max() <= np.abs(data).max()       # sane, not garbage


@pytest.mark.parametrize("t", [GGMLType.F16, GGMLType.BF16, GGMLType.F32], ids=lambda t: t.name)
def test_dequantize_float_types_all_bit_patterns(gg, t):
    size = BLOCK_SIZES[t][1]
    if size == 2:
        raw = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)   # every f16/bf16, NaN and inf too
    else:
        rng = np.random.default_rng(3)
        raw = rng.integers(0, 1 << 32, size=4096, dtype=np.uint32).view(np.uint8)
    n = raw.size // size
    want = np.asarray(gg.quants.dequantize(raw.reshape(8, -1), ref_type(gg, t)), dtype=np.float32)
    got = quant.dequantize(raw, t, (8, n // 8))
    assert_same_bits(got, want.reshape(8, n // 8))


def test_f16_exact_when_subnormals_are_flushed(monkeypatch):
    # the fast f16 path relies on float32 subnormal arithmetic; with FTZ/DAZ it falls back
    raw = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
    want = raw.view(np.float16).astype(np.float32)
    assert not quant._subnormals_flushed()
    assert_same_bits(quant.dequantize(raw, GGMLType.F16, (1 << 16,)), want)
    monkeypatch.setattr(quant, "_subnormals_flushed", lambda: True)
    assert_same_bits(quant.dequantize(raw, GGMLType.F16, (1 << 16,)), want)


@pytest.mark.parametrize("t,dt", [(GGMLType.F64, "<f8"), (GGMLType.I8, "i1"), (GGMLType.I16, "<i2"),
                                  (GGMLType.I32, "<i4"), (GGMLType.I64, "<i8")], ids=lambda v: str(v))
def test_dequantize_plain_types(t, dt):
    rng = np.random.default_rng(7)
    vals = (rng.standard_normal(24) * 1000).astype(dt)
    got = quant.dequantize(vals.view(np.uint8), t, (4, 6))
    assert got.dtype == np.float32
    assert np.array_equal(got, vals.astype(np.float32).reshape(4, 6))


def test_dequantize_hypothesis_random_blocks(gg):
    hyp = require("hypothesis")
    st = require("hypothesis.strategies")

    @hyp.settings(max_examples=40, deadline=None, derandomize=True, database=None)
    @hyp.given(t=st.sampled_from(QUANT_TYPES), rows=st.integers(1, 3), blocks=st.integers(1, 5),
               seed=st.integers(0, 2**32 - 1))
    def check(t, rows, blocks, seed):
        rng = np.random.default_rng(seed)
        raw = random_blocks(rng, t, rows * blocks).reshape(rows, -1)
        want = gg.quants.dequantize(raw, ref_type(gg, t))
        got = quant.dequantize(raw, t, (rows, blocks * BLOCK_SIZES[t][0]))
        assert_same_bits(got, want)

    check()


def test_dequantize_large_tensor_spans_many_steps(gg):
    # more blocks than one internal step handles, and a 3-D shape
    rng = np.random.default_rng(11)
    t = GGMLType.Q4_K
    raw = random_blocks(rng, t, 3 * 4 * 200)
    got = quant.dequantize(raw, t, (3, 4, 200 * 256))
    want = gg.quants.dequantize(raw.reshape(12, -1), ref_type(gg, t)).reshape(3, 4, -1)
    assert_same_bits(got, want)


def test_dequantize_rejects_bad_sizes_and_types():
    raw = np.zeros(144, np.uint8)
    with pytest.raises(ShapeMismatch, match="needs 144 bytes"):
        quant.dequantize(raw[:100], GGMLType.Q4_K, (256,))
    with pytest.raises(ShapeMismatch, match="block size 256"):
        quant.dequantize(raw, GGMLType.Q4_K, (2, 128))
    with pytest.raises(UnsupportedDType, match="IQ2_XXS is not supported"):
        quant.dequantize(np.zeros(66, np.uint8), GGMLType.IQ2_XXS, (256,))
    with pytest.raises(UnsupportedDType, match="not a known ggml type"):
        quant.dequantize(raw, 4, (256,))
    assert quant.as_ggml_type("q4_k") is GGMLType.Q4_K and quant.as_ggml_type(12) is GGMLType.Q4_K


# --- QTensor and qmatmul ---------------------------------------------------

def make_qtensor(rng, t, n_out, n_in):
    if t in quant._LAYOUTS:
        raw = random_blocks(rng, t, n_out * n_in // BLOCK_SIZES[t][0])
        raw.reshape(-1, BLOCK_SIZES[t][1]).view(quant._LAYOUTS[t])  # a valid layout view
        # keep magnitudes moderate so sums do not overflow float32 relative checks
        v = raw.view(quant._LAYOUTS[t]).reshape(-1)
        for name in quant._LAYOUTS[t].names:
            if quant._LAYOUTS[t][name] == np.dtype("<f2"):
                v[name] = (rng.standard_normal(v.size) * 0.01).astype(np.float16)
    elif t == GGMLType.BF16:
        raw = (rng.standard_normal(n_out * n_in).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    else:
        raw = rng.standard_normal(n_out * n_in).astype(quant._PLAIN[t])
    return QTensor(raw.view(np.uint8).reshape(-1), t, (n_out, n_in))


def assert_matmul_close(got, x, w):
    ref = x @ w.T
    bound = 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T) + 1e-30
    assert got.shape == ref.shape and got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound).all(), float((err / bound).max())


@pytest.mark.parametrize("t", [GGMLType.Q4_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.Q3_K, GGMLType.Q4_K,
                               GGMLType.Q6_K, GGMLType.F16, GGMLType.BF16, GGMLType.F32], ids=lambda t: t.name)
@pytest.mark.parametrize("lead", [(1,), (5,), (2, 3), ()], ids=str)
def test_qmatmul_equals_dequantize_then_matmul(t, lead):
    rng = np.random.default_rng(int(t) * 10 + len(lead))
    qw = make_qtensor(rng, t, 300, 512)
    w = qw.dequantize()
    x = rng.standard_normal((*lead, 512)).astype(np.float32)
    for chunk in (None, 7, 64, 1000):
        got = qmatmul(x, qw, chunk_rows=chunk)
        assert got.shape == (*lead, 300)
        assert_matmul_close(got.reshape(-1, 300), x.reshape(-1, 512), w)


def test_qmatmul_dequantizes_in_bounded_chunks(monkeypatch):
    rng = np.random.default_rng(5)
    qw = make_qtensor(rng, GGMLType.Q4_K, 1000, 512)
    w = qw.dequantize()
    seen = []
    real = quant._dequantize_into

    def spy(raw, t, out):
        seen.append(out.shape)
        return real(raw, t, out)

    monkeypatch.setattr(quant, "_dequantize_into", spy)
    monkeypatch.setattr(QTensor, "dequantize", lambda self: pytest.fail("qmatmul dequantized the whole weight"))
    x = rng.standard_normal((3, 512)).astype(np.float32)
    got = qmatmul(x, qw, chunk_rows=256)
    assert seen == [(256, 512), (256, 512), (256, 512), (232, 512)]
    assert_matmul_close(got, x, w)
    seen.clear()
    qmatmul(x, qw)                                               # default chunk: about 1 MiB of f32
    assert max(s[0] for s in seen) * 512 * 4 <= (1 << 20) and sum(s[0] for s in seen) == 1000


def test_qmatmul_checks_operands():
    rng = np.random.default_rng(6)
    qw = make_qtensor(rng, GGMLType.Q8_0, 8, 64)
    with pytest.raises(DTypeMismatch, match="float32"):
        qmatmul(np.ones((1, 64)), qw)
    with pytest.raises(ShapeMismatch, match="last dim 64"):
        qmatmul(np.ones((1, 32), np.float32), qw)
    with pytest.raises(ShapeMismatch, match="needs 544 bytes"):
        QTensor(qw.raw[:-1], GGMLType.Q8_0, (8, 64))
    assert qw.nbytes == 544 and qw.shape == (8, 64) and "Q8_0" in repr(qw)
    assert np.shares_memory(qw.raw, qw.raw[:10])


# --- GGUF files written by the reference writer ---------------------------

def write_reference_file(gg, path, rng, alignment=None):
    V = gg.GGUFValueType
    Q = gg.GGMLQuantizationType
    w = gg.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -32000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool", True)
    w.add_bool("t.bool0", False)
    w.add_string("t.str", "héllo wörld ✓")
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", 1e300)
    w.add_array("t.strs", ["a", "", "日本語", "x" * 300])
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, -1.25])
    w.add_array("t.bools", [True, False, True])
    w.add_key_value("t.nested", [[1, 2], [3], [4, 5, 6]], V.ARRAY)
    w.add_key_value("t.nested_strs", [["p", "q"], ["r"]], V.ARRAY)
    w.add_key_value("t.u8s", [0, 255, 7], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("t.f64s", [1.5, -2.5], V.ARRAY, sub_type=V.FLOAT64)

    tensors = {}
    a = rng.standard_normal((2, 3, 64)).astype(np.float32)
    w.add_tensor("f32.3d", a)
    tensors["f32.3d"] = (a, GGMLType.F32, a.shape)
    b = rng.standard_normal((96,)).astype(np.float16)
    w.add_tensor("f16.1d", b)
    tensors["f16.1d"] = (b, GGMLType.F16, b.shape)
    c = gg.quants.quantize(rng.standard_normal((16, 128)).astype(np.float32), Q.Q8_0)
    w.add_tensor("q8_0", c, raw_dtype=Q.Q8_0)
    tensors["q8_0"] = (c, GGMLType.Q8_0, (16, 128))
    d = random_blocks(rng, GGMLType.Q4_K, 12).reshape(4, 3 * 144)
    w.add_tensor("q4_k", d, raw_dtype=Q.Q4_K)
    tensors["q4_k"] = (d, GGMLType.Q4_K, (4, 768))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


EXPECTED_METADATA = {
    "general.architecture": "llama",
    "t.u8": 250, "t.i8": -100, "t.u16": 65000, "t.i16": -32000, "t.u32": 4_000_000_000,
    "t.i32": -2_000_000_000, "t.f32": float(np.float32(0.1)), "t.bool": True, "t.bool0": False,
    "t.str": "héllo wörld ✓", "t.u64": 2**64 - 1, "t.i64": -(2**63), "t.f64": 1e300,
    "t.strs": ["a", "", "日本語", "x" * 300], "t.ints": [1, 2, 3], "t.floats": [0.5, -1.25],
    "t.bools": [True, False, True], "t.nested": [[1, 2], [3], [4, 5, 6]],
    "t.nested_strs": [["p", "q"], ["r"]], "t.u8s": [0, 255, 7], "t.f64s": [1.5, -2.5],
}


@pytest.mark.parametrize("alignment", [None, 64])
def test_read_reference_written_file(gg, tmp_path, alignment):
    path = tmp_path / "model.gguf"
    written = write_reference_file(gg, path, np.random.default_rng(1), alignment)
    ref = gg.GGUFReader(str(path))
    with GGUFFile(path) as g:
        assert g.version == 3
        meta = dict(g.metadata)
        if alignment is not None:
            assert meta.pop("general.alignment") == alignment
            assert g.alignment == alignment
        else:
            assert g.alignment == 32
        assert meta == EXPECTED_METADATA
        for k, v in meta.items():
            assert type(v) is type(EXPECTED_METADATA[k]), k
        assert g.metadata_types["t.i16"] == GGUFValueType.INT16
        assert g.metadata_types["t.strs"] == GGUFValueType.ARRAY
        assert list(g.tensors) == [t.name for t in ref.tensors]
        for rt in ref.tensors:
            info = g.tensors[rt.name]
            assert isinstance(info, GGUFTensorInfo)
            data, t, shape = written[rt.name]
            # the reference reports ggml's ne order; ember reports numpy order
            assert info.shape == tuple(int(d) for d in reversed(rt.shape.tolist())) == shape
            assert info.ggml_type == t and int(info.ggml_type) == int(rt.tensor_type)
            assert info.offset == rt.data_offset and info.offset % g.alignment == 0
            assert info.nbytes == rt.n_bytes and info.n_elements == rt.n_elements
            raw = g.raw(rt.name)
            assert raw.dtype == np.uint8 and raw.shape == (info.nbytes,) and not raw.flags.writeable
            assert raw.tobytes() == np.ascontiguousarray(data).tobytes() == rt.data.tobytes()
            got = g.dequantize(rt.name)
            assert got.shape == shape and got.dtype == np.float32
            want = np.asarray(gg.quants.dequantize(rt.data, rt.tensor_type), dtype=np.float32).reshape(shape)
            assert_same_bits(got, want)
            if t in (GGMLType.F32, GGMLType.F16):
                assert np.array_equal(got, data.astype(np.float32))


def test_raw_is_a_zero_copy_view_and_close(gg, tmp_path):
    path = tmp_path / "m.gguf"
    write_reference_file(gg, path, np.random.default_rng(2))
    g = GGUFFile(path)
    a, b = g.raw("q4_k"), g.raw("q4_k")
    assert np.shares_memory(a, b)                                # both view the same mapped pages
    qt = g.qtensor("q4_k")
    assert np.shares_memory(qt.raw, a) and qt.shape == (4, 768)
    x = np.random.default_rng(0).standard_normal((2, 768)).astype(np.float32)
    assert_matmul_close(qmatmul(x, qt), x, g.dequantize("q4_k"))
    keep = a.copy()
    g.close()
    g.close()                                                    # idempotent
    assert g.closed
    assert np.array_equal(a, keep)                               # live views stay valid
    with pytest.raises(ValueError, match="closed"):
        g.raw("q4_k")
    with GGUFFile(path) as g2:
        with pytest.raises(KeyError, match="nope"):
            g2.raw("nope")
    assert g2.closed


# --- malformed files ------------------------------------------------------

_SCALAR_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}


def _enc_value(vtype, value):
    if vtype in _SCALAR_FMT:
        return struct.pack("<" + _SCALAR_FMT[vtype], value)
    if vtype == 8:
        b = value.encode() if isinstance(value, str) else value
        return struct.pack("<Q", len(b)) + b
    etype, items = value
    return struct.pack("<IQ", etype, len(items)) + b"".join(_enc_value(etype, v) for v in items)


class Builder:
    """A small GGUF writer for tests, remembering where each field went."""

    def __init__(self, version=3, alignment=32):
        self.version, self.alignment = version, alignment
        self.kvs, self.tensors = [], []

    def kv(self, key, vtype, value):
        self.kvs.append((key, vtype, value))
        return self

    def tensor(self, name, ne, ggml_type, data):
        self.tensors.append((name, list(ne), int(ggml_type), bytes(data)))
        return self

    def build(self):
        at = {}
        out = bytearray(b"GGUF")
        at["version"] = len(out)
        out += struct.pack("<I", self.version)
        at["tensor_count"] = len(out)
        out += struct.pack("<Q", len(self.tensors))
        at["kv_count"] = len(out)
        out += struct.pack("<Q", len(self.kvs))
        for i, (key, vtype, value) in enumerate(self.kvs):
            at[f"kv{i}.key"] = len(out)
            out += _enc_value(8, key)
            at[f"kv{i}.type"] = len(out)
            out += struct.pack("<I", vtype)
            at[f"kv{i}.value"] = len(out)
            out += _enc_value(vtype, value)
        offs, pos = [], 0
        for _, _, _, data in self.tensors:
            offs.append(pos)
            pos += -(-len(data) // self.alignment) * self.alignment
        for i, ((name, ne, t, _), off) in enumerate(zip(self.tensors, offs, strict=True)):
            at[f"t{i}.name"] = len(out)
            out += _enc_value(8, name)
            at[f"t{i}.n_dims"] = len(out)
            out += struct.pack("<I", len(ne))
            at[f"t{i}.dims"] = len(out)
            out += struct.pack(f"<{len(ne)}Q", *ne)
            at[f"t{i}.type"] = len(out)
            out += struct.pack("<I", t)
            at[f"t{i}.offset"] = len(out)
            out += struct.pack("<Q", off)
        out += bytes(-len(out) % self.alignment)
        at["data"] = len(out)
        for i, (_, _, _, data) in enumerate(self.tensors):
            out += data
            if i + 1 < len(self.tensors):
                out += bytes(-len(data) % self.alignment)
        return bytes(out), at


def small_file(rng=None):
    rng = rng or np.random.default_rng(0)
    b = Builder()
    b.kv("general.architecture", 8, "llama")
    b.kv("general.alignment", 4, 32)
    b.kv("a.toks", 9, (8, ["<s>", "</s>", "hi"]))
    b.kv("a.nest", 9, (9, [(5, [1, -2]), (6, [0.5])]))
    b.kv("a.f", 6, 1.5)
    b.tensor("w.q4k", [256, 2], GGMLType.Q4_K, random_blocks(rng, GGMLType.Q4_K, 2).tobytes())
    b.tensor("w.f32", [8, 3], GGMLType.F32, rng.standard_normal(24).astype(np.float32).tobytes())
    b.tensor("w.q8", [64], GGMLType.Q8_0, random_blocks(rng, GGMLType.Q8_0, 2).tobytes())
    return b


@contextlib.contextmanager
def time_limit(seconds):
    """Fail instead of hanging: SIGALRM where available."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        raise TimeoutError(f"took longer than {seconds}s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def open_bytes(path, data):
    path.write_bytes(data)
    with time_limit(5):
        return GGUFFile(path)


def test_builder_file_is_valid(tmp_path, gg):
    data, _ = small_file().build()
    path = tmp_path / "ok.gguf"
    path.write_bytes(data)
    with GGUFFile(path) as g:
        assert g.metadata["a.toks"] == ["<s>", "</s>", "hi"]
        assert g.metadata["a.nest"] == [[1, -2], [0.5]]
        assert g.tensors["w.q4k"].shape == (2, 256) and g.tensors["w.q8"].shape == (64,)
        assert g.tensors["w.f32"].shape == (3, 8)
        for name in g.tensors:
            g.dequantize(name)
    ref = gg.GGUFReader(str(path))                               # the reference accepts it too
    assert [t.name for t in ref.tensors] == ["w.q4k", "w.f32", "w.q8"]


def corrupt(data, at, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt if fmt[0] in "<>" else "<" + fmt, b, at, value)
    return bytes(b)


def _cases():
    data, at = small_file().build()
    n = len(data)
    c = []

    def add(name, blob, *needles):
        c.append(pytest.param(blob, needles, id=name))

    add("magic", b"GGUX" + data[4:], "header.magic", "not a GGUF file")
    add("empty", b"", "header.magic", "truncated")
    add("version1", corrupt(data, at["version"], "I", 1), "header.version", "unsupported version 1")
    add("version99", corrupt(data, at["version"], "I", 99), "header.version", "unsupported version 99")
    add("bigendian", corrupt(data, at["version"], ">I", 3), "header.version", "big-endian")
    add("tensor_count", corrupt(data, at["tensor_count"], "Q", 2**63), "header.tensor_count", "impossible")
    add("tensor_count_small", corrupt(data, at["tensor_count"], "Q", n // 24 + 1), "tensor_count")
    add("kv_count", corrupt(data, at["kv_count"], "Q", 2**64 - 1), "header.metadata_kv_count", "impossible")
    add("kv_count+1", corrupt(data, at["kv_count"], "Q", 6))
    add("key_len", corrupt(data, at["kv0.key"], "Q", 2**40), "metadata[0].key", "string length")
    add("key_len_max", corrupt(data, at["kv0.key"], "Q", 2**64 - 1), "metadata[0].key", "string length")
    add("key_utf8", corrupt(data, at["kv0.key"] + 8, "B", 0xFF), "metadata[0].key", "UTF-8")
    add("value_type", corrupt(data, at["kv0.type"], "I", 13), "value_type", "unknown value type 13")
    add("value_type_max", corrupt(data, at["kv0.type"], "I", 2**32 - 1), "value_type", "unknown value type")
    add("str_len", corrupt(data, at["kv0.value"], "Q", n), "general.architecture", "string length")
    add("elem_type", corrupt(data, at["kv2.value"], "I", 77), "a.toks", "element type", "unknown value type 77")
    add("array_count", corrupt(data, at["kv2.value"] + 4, "Q", 2**62), "a.toks", "count", "impossible")
    add("array_elem_len", corrupt(data, at["kv2.value"] + 12, "Q", 2**50), "a.toks", "[0]", "string length")
    add("nested_count", corrupt(data, at["kv3.value"] + 4, "Q", 10**15), "a.nest", "count", "impossible")
    add("nested_inner_count", corrupt(data, at["kv3.value"] + 16, "Q", 10**12), "a.nest", "[0]", "impossible")
    add("alignment0", corrupt(data, at["kv1.value"], "I", 0), "general.alignment", "power of two")
    add("alignment3", corrupt(data, at["kv1.value"], "I", 48), "general.alignment", "power of two")
    add("alignment_type", corrupt(data, at["kv1.type"], "I", 5), "general.alignment", "UINT32")
    add("dup_key", corrupt(data, at["kv3.key"] + 8, "6s", b"a.toks"), "metadata[3].key", "duplicate key 'a.toks'")
    add("name_len", corrupt(data, at["t0.name"], "Q", 2**33), "tensor_infos[0].name", "string length")
    add("n_dims", corrupt(data, at["t0.n_dims"], "I", 5), "w.q4k", "n_dims", "exceeds")
    add("n_dims_max", corrupt(data, at["t0.n_dims"], "I", 2**32 - 1), "w.q4k", "n_dims")
    add("dim_huge", corrupt(data, at["t0.dims"] + 8, "Q", 2**40), "w.q4k", ".offset", "outside the file")
    add("dim_range", corrupt(data, at["t0.dims"] + 8, "Q", 2**64 - 1), "w.q4k", "dims[1]", "out of range")
    add("dim_block", corrupt(data, at["t0.dims"], "Q", 100), "w.q4k", "dims[0]", "block size")
    add("ggml_type", corrupt(data, at["t0.type"], "I", 4), "w.q4k", "ggml_type", "unknown ggml type 4")
    add("ggml_type_max", corrupt(data, at["t1.type"], "I", 2**32 - 1), "w.f32", "ggml_type", "unknown ggml type")
    add("offset_misaligned", corrupt(data, at["t1.offset"], "Q", 33), "w.f32", ".offset", "multiple of")
    add("offset_outside", corrupt(data, at["t2.offset"], "Q", 2**20), "w.q8", ".offset", "outside the file")
    add("offset_overflow", corrupt(data, at["t2.offset"], "Q", 2**64 - 32), "w.q8", ".offset", "outside the file")
    add("dup_tensor", corrupt(data, at["t1.name"] + 8, "5s", b"w.q4k"), "tensors['w.q4k'].name", "duplicate")
    add("data_truncated", data[:-1], "w.q8", "outside the file")
    return c


@pytest.mark.parametrize("blob,needles", _cases())
def test_malformed_file_names_file_and_field(tmp_path, blob, needles):
    path = tmp_path / "bad.gguf"
    with pytest.raises(FormatError) as ei:
        open_bytes(path, blob)
    msg = str(ei.value)
    assert str(path) in msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    assert ei.value.path == str(path) and ei.value.field


def test_deep_nesting_is_bounded(tmp_path):
    # 10000 levels of arrays of one array: a FormatError, not a RecursionError
    depth = 10000
    value = struct.pack("<IQ", 9, 1) * depth + struct.pack("<IQ", 4, 0)
    blob = (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _enc_value(8, "deep") + struct.pack("<I", 9) + value)
    with pytest.raises(FormatError, match="nested deeper"):
        open_bytes(tmp_path / "deep.gguf", blob)


def test_every_truncation_raises_format_error(tmp_path):
    data, at = small_file().build()
    path = tmp_path / "trunc.gguf"
    for cut in range(len(data)):
        with pytest.raises(FormatError) as ei:
            open_bytes(path, data[:cut])
        msg = str(ei.value)
        assert str(path) in msg and "GGUF " in msg, msg
        if cut < at["data"] - 32:                                # within the header, metadata or infos
            assert "truncated" in msg or "impossible" in msg or "past the end" in msg, msg


def test_random_corruption_never_crashes_or_hangs(tmp_path):
    data, at = small_file().build()
    head = at["data"]                                            # corrupt the parsed part
    rng = np.random.default_rng(1234)
    path = tmp_path / "fuzz.gguf"
    outcomes = {"ok": 0, "format": 0}
    for _ in range(400):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 5))):
            pos = int(rng.integers(0, head))
            if rng.random() < 0.5:
                b[pos] = int(rng.integers(0, 256))
            else:
                b[pos] ^= 1 << int(rng.integers(0, 8))
        if rng.random() < 0.2:
            b = b[:int(rng.integers(0, len(b)))]
        try:
            g = open_bytes(path, bytes(b))
        except FormatError as e:
            assert str(path) in str(e)
            outcomes["format"] += 1
            continue
        with g, np.errstate(all="ignore"), time_limit(5):
            outcomes["ok"] += 1
            for name, info in g.tensors.items():
                assert g.raw(name).size == info.nbytes
                try:
                    out = g.dequantize(name)
                except UnsupportedDType:                        # a flip to a known type we cannot decode
                    continue
                assert out.shape == info.shape and out.dtype == np.float32
    assert outcomes["format"] > 100 and outcomes["ok"] > 10, outcomes


def test_require_fails_under_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required when CI=true"):
        require("ember_no_such_module_xyz")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        require("ember_no_such_module_xyz")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        require("ember_no_such_module_xyz")
    assert require("struct") is struct
