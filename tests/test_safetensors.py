"""safetensors: round-trips with the reference library, zero-copy CPU loading, and
FormatErrors that name the file, tensor and field for every kind of malformed file."""
import json
import mmap
import os
import struct
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import ember
from ember.io import (SafetensorsFile, load_safetensors, load_safetensors_bytes, save_safetensors,
                      save_safetensors_bytes)
from ember.io.safetensors import UnsupportedFileDType
from helpers import missing, require

# numpy dtype -> ember dtype, for every dtype both numpy and ember have.
NUMPY_DTYPES = {
    "float32": ember.f32, "float16": ember.f16, "float64": ember.f64, "int64": ember.i64,
    "int32": ember.i32, "uint32": ember.u32, "uint8": ember.u8,
}


def sample(np_dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(np_dtype).kind == "f":
        return rng.standard_normal(shape).astype(np_dtype)
    # Within 32 bits: WebGPU keeps i64 as i32 (test_full_range_integers covers the rest).
    info = np.iinfo(np_dtype)
    high = (1 << 31) - 1 if info.min < 0 else (1 << 32) - 1
    return rng.integers(max(info.min, -(1 << 31)), min(info.max, high), size=shape,
                        dtype=np_dtype, endpoint=True)


def file_bytes(header, data=b"", raw_header=None):
    """A safetensors file written by hand, so malformed ones can be built."""
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def device_has(device, dtype):
    try:
        ember.zeros(1, dtype=dtype, device=device)
        return True
    except ember.UnsupportedDType:
        return False


def write(tmp_path, content, name="model.safetensors"):
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


# --- round-trips with the reference library -------------------------------------------------------
@pytest.mark.parametrize("np_dtype", sorted(NUMPY_DTYPES))
def test_reference_file_loads_into_ember(tmp_path, device, np_dtype):
    st = require("safetensors.numpy")
    arrays = {"w": sample(np_dtype, (3, 5)), "scalar": sample(np_dtype, (), 1),
              "empty": sample(np_dtype, (0, 4), 2), "v": sample(np_dtype, (7,), 3)}
    path = str(tmp_path / "ref.safetensors")
    st.save_file(arrays, path, metadata={"format": "np"})
    if not device_has(device, NUMPY_DTYPES[np_dtype]):
        # e.g. f64 on WebGPU: a clear error naming the tensor, or conversion on request.
        with pytest.raises(ember.UnsupportedDType, match=r"ref.safetensors.*tensor '\w+'.*dtype="):
            load_safetensors(path, device=device)
        loaded = load_safetensors(path, device=device, dtype=ember.f32)
        for name, expected in arrays.items():
            assert loaded[name].dtype is ember.f32 and loaded[name].device == device
            np.testing.assert_array_equal(loaded[name].to(ember.Device.cpu()).numpy(),
                                          expected.astype(np.float32))
        return
    loaded = load_safetensors(path, device=device)
    assert set(loaded) == set(arrays)
    for name, expected in arrays.items():
        t = loaded[name]
        assert t.dtype is NUMPY_DTYPES[np_dtype] and t.device == device
        assert t.shape == expected.shape
        np.testing.assert_array_equal(t.to(ember.Device.cpu()).numpy(), expected)


@pytest.mark.parametrize("np_dtype", sorted(NUMPY_DTYPES))
def test_ember_file_loads_into_reference(tmp_path, device, np_dtype):
    st = require("safetensors.numpy")
    if not device_has(device, NUMPY_DTYPES[np_dtype]):
        pytest.skip(f"{device} has no {np_dtype} tensors to save")
    base = sample(np_dtype, (6, 8))
    expected = {"plain": base, "transposed": base.T, "stepped": base[::2, 1::3],
                "broadcast": np.broadcast_to(base[:1], (4, 8)), "empty": base[:0]}
    tensors = {"plain": ember.tensor(base, device=device)}
    tensors["transposed"] = tensors["plain"].t()
    tensors["stepped"] = tensors["plain"][::2, 1::3]
    tensors["broadcast"] = tensors["plain"][:1].expand(4, 8)
    tensors["empty"] = tensors["plain"][:0]
    path = str(tmp_path / "ember.safetensors")
    save_safetensors(tensors, path, metadata={"made_by": "ember"})
    back = st.load_file(path)
    assert set(back) == set(expected)
    for name, want in expected.items():
        assert back[name].dtype == want.dtype
        np.testing.assert_array_equal(back[name], want)
    from safetensors import safe_open
    with safe_open(path, framework="numpy") as f:
        assert f.metadata() == {"made_by": "ember"}


def test_full_range_integers_round_trip_on_the_cpu(tmp_path):
    st = require("safetensors.numpy")
    arrays = {"i64": np.array([-(2 ** 63), -1, 0, 2 ** 63 - 1], np.int64),
              "u32": np.array([0, 2 ** 32 - 1], np.uint32),
              "i32": np.array([-(2 ** 31), 2 ** 31 - 1], np.int32)}
    path = str(tmp_path / "ints.safetensors")
    st.save_file(arrays, path)
    loaded = load_safetensors(path)
    out = str(tmp_path / "again.safetensors")
    save_safetensors(loaded, out)
    for name, back in st.load_file(out).items():
        np.testing.assert_array_equal(loaded[name].numpy(), arrays[name])
        np.testing.assert_array_equal(back, arrays[name])


def test_reference_bool_becomes_u8(tmp_path):
    st = require("safetensors.numpy")
    mask = np.array([[True, False, True], [False, False, True]])
    path = str(tmp_path / "bool.safetensors")
    st.save_file({"mask": mask}, path)
    t = load_safetensors(path)["mask"]
    assert t.dtype is ember.u8
    np.testing.assert_array_equal(t.numpy(), mask.astype(np.uint8))
    assert SafetensorsFile(path).info("mask").file_dtype == "BOOL"


def _bf16_reference(torch):
    values = torch.tensor([0.0, -0.0, 1.0, -2.5, 3.140625, 1e-40, 65504.0, 3.0e38,
                           float("inf"), float("-inf"), float("nan")], dtype=torch.float32)
    return torch.cat([values, torch.randn(64, generator=torch.Generator().manual_seed(0))]
                     ).to(torch.bfloat16).reshape(3, 25)


def test_bf16_from_torch_is_bit_exact(tmp_path, device):
    torch = require("torch")
    st = require("safetensors.torch")
    ref = _bf16_reference(torch)
    path = str(tmp_path / "bf16.safetensors")
    st.save_file({"w": ref}, path)
    expected_bits = ref.view(torch.int16).numpy().view(np.uint16)
    expected_f32 = ref.float().numpy()

    packed = load_safetensors(path, device=device)["w"]
    assert packed.dtype is ember.bf16
    widened = load_safetensors(path, device=device, dtype=ember.f32)["w"]
    assert widened.dtype is ember.f32
    got = widened.to(ember.Device.cpu()).numpy()
    np.testing.assert_array_equal(got.view(np.uint32), expected_f32.view(np.uint32))
    cpu_packed = packed.to(ember.Device.cpu())
    raw = np.frombuffer(cpu_packed.backend.to_bytes(cpu_packed.storage, cpu_packed.layout,
                                                    cpu_packed.dtype), dtype=np.uint16)
    np.testing.assert_array_equal(raw, expected_bits.reshape(-1))


def test_bf16_to_torch_is_bit_exact(tmp_path, device):
    torch = require("torch")
    st = require("safetensors.torch")
    ref = _bf16_reference(torch)
    path = str(tmp_path / "bf16.safetensors")
    st.save_file({"w": ref}, path)
    loaded = load_safetensors(path, device=device)["w"]
    out = str(tmp_path / "again.safetensors")
    save_safetensors({"w": loaded, "wt": loaded.t()}, out)
    back = st.load_file(out)
    assert back["w"].dtype == torch.bfloat16
    assert torch.equal(back["w"].view(torch.int16), ref.view(torch.int16))
    assert torch.equal(back["wt"].view(torch.int16), ref.t().contiguous().view(torch.int16))


def test_dtype_argument_converts_floats_only(tmp_path):
    st = require("safetensors.numpy")
    path = str(tmp_path / "mixed.safetensors")
    half = sample("float16", (4, 4))
    ids = np.arange(5, dtype=np.int64)
    st.save_file({"half": half, "ids": ids}, path)
    loaded = load_safetensors(path, dtype=ember.f32)
    assert loaded["half"].dtype is ember.f32 and loaded["ids"].dtype is ember.i64
    np.testing.assert_array_equal(loaded["half"].numpy(), half.astype(np.float32))
    np.testing.assert_array_equal(loaded["ids"].numpy(), ids)
    assert load_safetensors(path, dtype="float32")["half"].dtype is ember.f32


def test_saved_layout_is_aligned_and_tiled(tmp_path):
    tensors = {"a_u8": ember.tensor([1, 2, 3], dtype=ember.u8),
               "b_f64": ember.tensor([1.0], dtype=ember.f64),
               "c_f16": ember.tensor([1.0, 2.0, 3.0], dtype=ember.f16),
               "d_f32": ember.tensor([1.0, 2.0], dtype=ember.f32)}
    blob = save_safetensors_bytes(tensors, metadata={"x": "y"})
    (n,) = struct.unpack("<Q", blob[:8])
    assert (8 + n) % 8 == 0
    header = json.loads(blob[8:8 + n])
    assert header.pop("__metadata__") == {"x": "y"}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        assert begin % tensors[name].dtype.itemsize == 0, name
    spans = sorted(tuple(e["data_offsets"]) for e in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(blob) - 8 - n
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


# --- the lazy reader ------------------------------------------------------------------------------
def test_safetensors_file_api_matches_reference(tmp_path):
    st = require("safetensors.numpy")
    from safetensors import safe_open
    arrays = {"layer.1.w": sample("float32", (2, 3)), "layer.0.b": sample("int32", (4,)),
              "emb": sample("float16", (5, 2))}
    path = str(tmp_path / "m.safetensors")
    st.save_file(arrays, path, metadata={"k": "v"})
    (n,) = struct.unpack("<Q", open(path, "rb").read(8))
    header = json.loads(open(path, "rb").read()[8:8 + n])
    with safe_open(path, framework="numpy") as ref, SafetensorsFile(path) as f:
        assert list(f.keys()) == list(ref.keys())
        assert f.metadata == ref.metadata()
        assert len(f) == 3 and "emb" in f and "nope" not in f
        for name in f.keys():
            info = f.info(name)
            assert info.shape == tuple(ref.get_slice(name).get_shape())
            assert info.file_dtype == header[name]["dtype"]
            assert list(info.data_offsets) == header[name]["data_offsets"]
            assert info.file_offsets[0] == 8 + n + header[name]["data_offsets"][0]
            np.testing.assert_array_equal(f.get(name).numpy(), ref.get_tensor(name))
        with pytest.raises(KeyError, match="nope"):
            f.get("nope")
        kept = f.get("emb")
    # CPU tensors outlive the reader: the mapping goes when the last view dies.
    np.testing.assert_array_equal(kept.numpy(), arrays["emb"])
    with pytest.raises(ValueError, match="after close"):
        f.get("emb")
    f.close()  # a second close is harmless


def test_cpu_tensors_are_views_of_the_mapping(tmp_path):
    st = require("safetensors.numpy")
    path = str(tmp_path / "m.safetensors")
    st.save_file({"w": np.zeros((64, 64), np.float32)}, path)
    t = load_safetensors(path)["w"]
    view = t.numpy()
    base = view
    while getattr(base, "base", None) is not None and not isinstance(base, memoryview):
        base = base.base
    assert isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)
    # Behaviourally: a write to the file shows through the tensor, so nothing was copied.
    begin = SafetensorsFile(path).info("w").file_offsets[0]
    with open(path, "r+b") as fh:
        fh.seek(begin + 4 * 65)
        fh.write(np.float32(7.5).tobytes())
    assert t[1, 1].item() == 7.5


def test_bytes_loader_views_the_buffer():
    buf = bytearray(save_safetensors_bytes({"w": ember.tensor([[1.0, 2.0], [3.0, 4.0]])}))
    t = load_safetensors_bytes(buf)["w"]
    assert np.shares_memory(t.numpy(), np.frombuffer(buf, np.uint8))
    np.testing.assert_array_equal(t.numpy(), [[1.0, 2.0], [3.0, 4.0]])


def test_unsupported_file_dtype_fails_only_for_that_tensor(tmp_path):
    data = np.arange(3, dtype=np.int16).tobytes() + np.float32(2.5).tobytes()
    path = write(tmp_path, file_bytes({
        "i16": {"dtype": "I16", "shape": [3], "data_offsets": [0, 6]},
        "f": {"dtype": "F32", "shape": [1], "data_offsets": [6, 10]}}, data))
    with SafetensorsFile(path) as f:
        assert f.get("f").tolist() == [2.5]
        with pytest.raises(UnsupportedFileDType) as err:
            f.get("i16")
    assert isinstance(err.value, ember.FormatError) and isinstance(err.value, ember.UnsupportedDType)
    assert "'i16'" in str(err.value) and "I16" in str(err.value) and path in str(err.value)
    with pytest.raises(ember.FormatError, match="I16"):
        load_safetensors(path)


def test_save_rejects_bad_arguments(tmp_path):
    path = str(tmp_path / "x.safetensors")
    with pytest.raises(TypeError, match="'w'.*ndarray"):
        save_safetensors({"w": np.zeros(3)}, path)
    with pytest.raises(TypeError, match="metadata"):
        save_safetensors({"w": ember.zeros(3)}, path, metadata={"n": 1})
    with pytest.raises(TypeError, match="__metadata__"):
        save_safetensors({"__metadata__": ember.zeros(3)}, path)
    assert not os.path.exists(path) and not os.path.exists(path + ".partial")


# --- malformed files -------------------------------------------------------------------------------
def _entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


MALFORMED = {
    # name: (file bytes, words the message must contain besides the path)
    "empty file": (b"", ["header_length"]),
    "shorter than the length": (b"\x10\x00\x00", ["header_length"]),
    "header beyond the file": (struct.pack("<Q", 1000) + b"{}", ["header_length", "1000"]),
    "huge header length": (struct.pack("<Q", 2 ** 64 - 1) + b"{}", ["header_length"]),
    "bad json": (file_bytes(None, raw_header=b'{"w": {"dtype": '), ["header", "JSON"]),
    "not utf-8": (file_bytes(None, raw_header=b'{"\xff": 1}'), ["header", "UTF-8"]),
    "header is a list": (file_bytes([1, 2]), ["header", "list"]),
    "entry not an object": (file_bytes({"w": 3}), ["'w'", "int"]),
    "missing field": (file_bytes({"w": {"dtype": "F32", "shape": [1]}}, b"\0" * 4),
                      ["'w'", "data_offsets"]),
    "unknown dtype": (file_bytes({"w": _entry(dtype="F33")}, b"\0" * 8), ["'w'", "dtype", "F33"]),
    "negative dim": (file_bytes({"w": _entry(shape=(-2,))}, b"\0" * 8), ["'w'", "shape"]),
    "shape not a list": (file_bytes({"w": _entry() | {"shape": "2"}}, b"\0" * 8), ["'w'", "shape"]),
    "offsets reversed": (file_bytes({"w": _entry(offsets=(8, 0))}, b"\0" * 8),
                         ["'w'", "data_offsets"]),
    "offsets not ints": (file_bytes({"w": _entry() | {"data_offsets": [0, 8.0]}}, b"\0" * 8),
                         ["'w'", "data_offsets"]),
    "shape and bytes disagree": (file_bytes({"w": _entry(shape=(3,))}, b"\0" * 8),
                                 ["'w'", "[3]", "12", "8"]),
    "offsets outside the data": (file_bytes({"w": _entry(offsets=(0, 8))}, b"\0" * 6),
                                 ["'w'", "data_offsets", "outside"]),
    "overlap": (file_bytes({"a": _entry(offsets=(0, 8)), "b": _entry(offsets=(4, 12))},
                           b"\0" * 12), ["'b'", "overlaps", "'a'"]),
    "gap": (file_bytes({"a": _entry(offsets=(4, 12))}, b"\0" * 12), ["'a'", "[0, 4]"]),
    "not covering": (file_bytes({"a": _entry()}, b"\0" * 12), ["4 trailing bytes"]),
    "metadata not strings": (file_bytes({"__metadata__": {"n": 1}}), ["__metadata__"]),
    "duplicate name": (file_bytes(None, raw_header=b'{"a": {}, "a": {}}'), ["duplicate", "'a'"]),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_raises_format_error(tmp_path, case):
    content, words = MALFORMED[case]
    path = write(tmp_path, content)
    for load in (lambda: load_safetensors(path), lambda: SafetensorsFile(path)):
        with pytest.raises(ember.FormatError) as err:
            load()
        message = str(err.value)
        assert path in message and err.value.path == path
        for word in words:
            assert word in message, (word, message)
    with pytest.raises(ember.FormatError):
        load_safetensors_bytes(content, name=path)


@pytest.mark.parametrize("case", sorted(set(MALFORMED) - {"duplicate name"}))
def test_reference_library_also_refuses_each_malformed_file(case):
    """Our idea of malformed agrees with the reference (which accepts duplicate keys)."""
    st = require("safetensors.numpy")
    with pytest.raises(Exception):  # noqa: B017 (the reference's exception type varies by case)
        st.load(MALFORMED[case][0])


def test_truncations_of_a_valid_file_all_raise(tmp_path):
    st = require("safetensors.numpy")
    content = st.save({"a": sample("float32", (3, 3)), "b": sample("int64", (2,))})
    for cut in range(len(content)):
        with pytest.raises(ember.FormatError):
            load_safetensors_bytes(content[:cut])


def test_fuzzed_files_raise_only_format_error(tmp_path):
    hypothesis = require("hypothesis")
    st_ = require("hypothesis.strategies")
    ref = require("safetensors.numpy")
    seed_file = ref.save({"a": sample("float32", (3, 2)), "b": sample("int64", (4,)),
                          "c": sample("uint8", (5,)), "e": sample("float16", (0, 2))},
                         metadata={"note": "seed"})

    @hypothesis.settings(max_examples=300, deadline=None, derandomize=True)
    @hypothesis.given(edits=st_.lists(st_.tuples(st_.integers(0, len(seed_file) - 1),
                                                 st_.integers(0, 255)), max_size=6),
                      cut=st_.integers(0, len(seed_file)))
    def check(edits, cut):
        blob = bytearray(seed_file)
        for pos, value in edits:
            blob[pos] = value
        blob = bytes(blob[:cut])
        try:
            tensors = load_safetensors_bytes(blob)
        except ember.FormatError:
            return
        for t in tensors.values():  # whatever loads must be readable in full
            t.numpy().sum()

    check()
    # The file path (mmap) shares the parser; a few corrupt files through it too.
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        for i in range(40):
            blob = bytearray(seed_file)
            for pos in rng.integers(0, len(blob), size=3):
                blob[pos] = int(rng.integers(0, 256))
            path = os.path.join(tmp, f"{i}.safetensors")
            with open(path, "wb") as fh:
                fh.write(bytes(blob[:int(rng.integers(0, len(blob) + 1))]))
            try:
                load_safetensors(path)
            except ember.FormatError:
                pass


# --- memory behaviour ------------------------------------------------------------------------------
RSS_PROBE = textwrap.dedent("""
    import sys
    def rss_kib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    import ember, numpy
    ember.Device.cpu()
    before = rss_kib()
    tensors = ember.io.load_safetensors(sys.argv[1])
    after = rss_kib()
    assert sum(t.numel() for t in tensors.values()) * 4 == int(sys.argv[2])
    print(after - before)
""")


def test_loading_does_not_grow_rss_with_file_size(tmp_path):
    if not os.path.exists("/proc/self/status"):
        missing("/proc/self/status", "RSS is read from Linux's procfs")
    n_tensors, per_tensor = 50, 4 * 1024 * 1024  # 50 x 4 MiB f32 = 200 MiB
    header = {f"w{i}": _entry(shape=(per_tensor // 4,), offsets=(i * per_tensor,
                                                                 (i + 1) * per_tensor))
              for i in range(n_tensors)}
    path = str(tmp_path / "big.safetensors")
    head = file_bytes(header)
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + n_tensors * per_tensor)  # sparse: no disk, no page cache
    out = subprocess.run([sys.executable, "-c", RSS_PROBE, path, str(n_tensors * per_tensor)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    grown_kib = int(out.stdout.split()[-1])
    assert grown_kib < 20 * 1024, f"RSS grew {grown_kib} KiB loading a 200 MiB file"


NO_NUMPY_PROBE = textwrap.dedent("""
    import sys
    sys.modules["numpy"] = None  # any `import numpy` now raises ImportError
    import json
    import ember
    from ember.backends.base import Backend
    from ember.device import Device

    class BytesBackend(Backend):
        # A stand-in accelerator: keeps uploads as bytes, as a GPU buffer would.
        name = "bytes"
        def from_host(self, data, dtype, shape):
            assert isinstance(data, memoryview), type(data)
            return bytes(data)
        def to_bytes(self, storage, layout, dtype):
            assert layout.is_contiguous() and layout.offset == 0
            return storage

    dev = Device("bytes", 0, BytesBackend())
    blob = open(sys.argv[1], "rb").read()
    tensors = ember.io.load_safetensors_bytes(blob, device=dev)
    print(json.dumps({k: [t.dtype.name, list(t.shape), t.tolist()] for k, t in tensors.items()}))
    again = ember.io.save_safetensors_bytes(tensors, metadata={"m": "1"})
    tensors = ember.io.load_safetensors_bytes(again, device=dev)
    print(json.dumps({k: t.tolist() for k, t in tensors.items()}))
""")


def test_bytes_loader_works_without_numpy(tmp_path):
    st = require("safetensors.numpy")
    arrays = {"f": sample("float32", (2, 3)), "h": sample("float16", (3,)),
              "i": sample("int64", (2, 2)), "b": sample("uint8", (4,))}
    path = str(tmp_path / "m.safetensors")
    st.save_file(arrays, path)
    out = subprocess.run([sys.executable, "-c", NO_NUMPY_PROBE, path], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    first, second = (json.loads(line) for line in out.stdout.strip().splitlines())
    for name, want in arrays.items():
        dtype_name, shape, values = first[name]
        assert dtype_name == NUMPY_DTYPES[str(want.dtype)].name and tuple(shape) == want.shape
        np.testing.assert_array_equal(np.asarray(values, dtype=want.dtype), want)
        np.testing.assert_array_equal(np.asarray(second[name], dtype=want.dtype), want)


STREAM_PROBE = textwrap.dedent("""
    import sys
    def status_kib(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    import ember
    from ember.backends.base import Backend
    from ember.device import Device

    class CountingBackend(Backend):
        # A stand-in accelerator that reads every uploaded byte and keeps only a count,
        # so any RSS growth is host pages the loader kept, not device memory.
        name = "counting"
        def from_host(self, data, dtype, shape):
            return sum(bytes(data[i:i + 65536]).count(1) for i in range(0, len(data), 65536))

    dev = Device("counting", 0, CountingBackend())
    ember.Device.cpu()
    # The reader unmaps the file when it closes, so what counts is the peak while loading:
    # writing 5 to clear_refs resets VmHWM (the peak) to the current RSS.
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    before = status_kib("VmRSS")
    tensors = ember.io.load_safetensors(sys.argv[1], device=dev)
    peak = status_kib("VmHWM")
    assert sum(t.storage for t in tensors.values()) == int(sys.argv[2])  # every byte read
    print(peak - before)
""")


def test_uploads_stream_without_keeping_the_file_in_memory(tmp_path):
    if not os.path.exists("/proc/self/status"):
        missing("/proc/self/status", "RSS is read from Linux's procfs")
    n_tensors, per_tensor = 25, 4 * 1024 * 1024  # 100 MiB, written for real (holes in a
    header = {f"w{i}": _entry(shape=(per_tensor // 4,), offsets=(i * per_tensor,  # sparse file
                                                                 (i + 1) * per_tensor))  # may map
              for i in range(n_tensors)}  # to the shared zero page and hide the pages kept)
    path = str(tmp_path / "big.safetensors")
    with open(path, "wb") as fh:
        fh.write(file_bytes(header))
        chunk = b"\x01" * per_tensor
        for _ in range(n_tensors):
            fh.write(chunk)
    out = subprocess.run([sys.executable, "-c", STREAM_PROBE, path, str(n_tensors * per_tensor)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    grown_kib = int(out.stdout.split()[-1])
    assert grown_kib < 20 * 1024, f"peak RSS grew {grown_kib} KiB streaming a 100 MiB file"


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.safetensors"):
        load_safetensors(tmp_path / "nowhere.safetensors")
