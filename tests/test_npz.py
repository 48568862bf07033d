"""npz/npy: numpy's own files load as tensors and back; broken or pickled files raise
FormatError naming the file."""
import numpy as np
import pytest

import ember


def test_npz_round_trip_with_numpy(tmp_path, device):
    rng = np.random.default_rng(0)
    arrays = {"f32": rng.standard_normal((3, 4)).astype(np.float32),
              "i64": np.arange(-3, 3, dtype=np.int64), "u8": np.array([0, 255], np.uint8),
              "mask": np.array([True, False])}
    path = tmp_path / "a.npz"
    np.savez(path, **arrays)
    loaded = ember.io.load_npz(path, device=device)
    assert loaded["mask"].dtype is ember.u8 and loaded["i64"].dtype is ember.i64
    for name, want in arrays.items():
        assert loaded[name].device == device
        np.testing.assert_array_equal(loaded[name].cpu().numpy(), want.astype(
            np.uint8) if want.dtype == np.bool_ else want)
    out = tmp_path / "b.npz"
    ember.io.save_npz({"t": loaded["f32"].t(), "i": loaded["i64"]}, out, compressed=True)
    with np.load(out) as back:
        np.testing.assert_array_equal(back["t"], arrays["f32"].T)
        np.testing.assert_array_equal(back["i"], arrays["i64"])


def test_npy_and_dtype_argument(tmp_path):
    path = tmp_path / "one.npy"
    np.save(path, np.array([1.5, 2.5], np.float16))
    (t,) = ember.io.load_npz(path, dtype=ember.f32).values()
    assert t.dtype is ember.f32 and t.tolist() == [1.5, 2.5]


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not really a zip", b"\x93NUMPY\x01\x00"])
def test_broken_files_raise_format_error(tmp_path, content):
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(ember.FormatError, match="bad.npz"):
        ember.io.load_npz(path)


def test_pickled_arrays_are_refused(tmp_path):
    path = tmp_path / "obj.npz"
    np.savez(path, obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ember.FormatError, match="obj.npz.*'obj'"):
        ember.io.load_npz(path)


def test_save_refuses_bf16(tmp_path):
    with pytest.raises(ember.UnsupportedDType, match="'w'.*bf16"):
        ember.io.save_npz({"w": ember.zeros(2, dtype=ember.bf16)}, tmp_path / "x.npz")


def test_missing_directory_and_fifo_are_format_errors(tmp_path):
    import os
    with pytest.raises(ember.FormatError, match="does not exist"):
        ember.io.load_npz(tmp_path / "absent.npz")
    with pytest.raises(ember.FormatError, match="is a directory"):
        ember.io.load_npz(tmp_path)
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.npz")     # numpy's own open would block here forever
        with pytest.raises(ember.FormatError, match="FIFO"):
            ember.io.load_npz(tmp_path / "pipe.npz")
