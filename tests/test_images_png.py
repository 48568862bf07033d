"""ember.vision.png and read_image: PNGs written by the tests' own encoder (every filter,
colour type and depth) decode to the samples written; damaged or unsupported files are
refused naming the file and the reason."""

import numpy as np
import pytest

from ember.errors import FormatError, InvalidArgument
from ember.vision import images, png
from png_encode import chunk, encode

RNG = np.random.default_rng(0)


def _rgb(h, w):
    return RNG.integers(0, 256, (h, w, 3))


@pytest.mark.parametrize("filters", [(0,), (1,), (2,), (3,), (4,), (4, 3, 2, 1, 0)])
def test_rgb8_every_filter(filters):
    a = _rgb(7, 11)
    got = png.decode(encode(a, 2, filters=filters))
    np.testing.assert_array_equal(got, a.astype(np.uint8))
    assert got.dtype == np.uint8 and got.shape == (7, 11, 3)


def test_rgba_drops_alpha_and_16_bit_keeps_the_high_byte():
    a = RNG.integers(0, 256, (5, 6, 4))
    np.testing.assert_array_equal(png.decode(encode(a, 6)), a[..., :3].astype(np.uint8))
    a16 = RNG.integers(0, 65536, (4, 3, 3))
    np.testing.assert_array_equal(png.decode(encode(a16, 2, depth=16)), (a16 >> 8).astype(np.uint8))
    ga16 = RNG.integers(0, 65536, (3, 5, 2))
    got = png.decode(encode(ga16, 4, depth=16))
    np.testing.assert_array_equal(got, np.repeat((ga16[..., :1] >> 8).astype(np.uint8), 3, 2))


@pytest.mark.parametrize("depth", [1, 2, 4, 8])
def test_grey_and_palette_low_depths(depth):
    levels = 1 << depth
    g = RNG.integers(0, levels, (6, 13, 1))
    got = png.decode(encode(g, 0, depth=depth))
    want = (g * (255 // (levels - 1))).astype(np.uint8)
    np.testing.assert_array_equal(got, np.repeat(want, 3, 2))
    pal = RNG.integers(0, 256, (levels, 3))
    got = png.decode(encode(g, 3, depth=depth, palette=pal))
    np.testing.assert_array_equal(got, pal[g[..., 0]].astype(np.uint8))


def test_one_pixel_image(tmp_path):
    p = tmp_path / "one.png"
    p.write_bytes(encode([[[10, 20, 30]]], 2))
    np.testing.assert_array_equal(images.read_image(p), [[[10, 20, 30]]])


def _corrupt_crc(data):
    i = data.index(b"IDAT") + 6
    return data[:i] + bytes([data[i] ^ 1]) + data[i + 1 :]


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda d: d[: len(d) // 2], "truncated"),
        (_corrupt_crc, "CRC"),
        (lambda d: encode(_rgb(4, 4), 2, interlace=1), "interlaced"),
        (lambda d: encode(RNG.integers(0, 4, (2, 2, 1)), 3, depth=2), "palette"),
        (
            lambda d: encode(RNG.integers(0, 4, (2, 2, 1)), 3, depth=2, palette=[[0, 0, 0]]),
            "past the end",
        ),
        (lambda d: encode(_rgb(2, 2), 2, depth=4), "not a valid combination"),
        (
            lambda d: (
                png.SIGNATURE
                + chunk(b"IHDR", (20000).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0]))
                + chunk(b"IDAT", b"")
                + chunk(b"IEND", b"")
            ),
            "over the",
        ),
    ],
)
def test_bad_pngs_are_refused_naming_the_file(tmp_path, make, match):
    p = tmp_path / "bad.png"
    p.write_bytes(make(encode(_rgb(16, 16), 2)))
    with pytest.raises(FormatError, match=match) as info:
        images.read_image(p)
    assert str(p) in str(info.value)


def test_not_an_image_and_no_file(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello")
    with pytest.raises(FormatError, match="not a PNG or JPEG|not a readable image") as info:
        images.read_image(p)
    assert str(p) in str(info.value)
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(FormatError, match="empty"):
        images.read_image(tmp_path / "empty.png")
    with pytest.raises(InvalidArgument, match="cannot read"):
        images.read_image(tmp_path / "missing.png")


def test_jpeg_without_pillow_says_how_to_install(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pil(name, *a, **k):
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("no PIL here")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    p = tmp_path / "photo.jpg"
    p.write_bytes(b"\xff\xd8\xff\xe0" + bytes(100))
    with pytest.raises(images.MissingDependency, match=r"pip install 'ember\[images\]'"):
        images.read_image(p)


def test_as_image_accepts_arrays_grey_and_rgba():
    g = RNG.integers(0, 256, (3, 4), dtype=np.uint8)
    np.testing.assert_array_equal(images.as_image(g), np.repeat(g[..., None], 3, 2))
    rgba = RNG.integers(0, 256, (3, 4, 4), dtype=np.uint8)
    np.testing.assert_array_equal(images.as_image(rgba), rgba[..., :3])
    with pytest.raises(InvalidArgument, match="uint8"):
        images.as_image(np.zeros((3, 4, 3), np.float32))


def test_encode_round_trips():
    a = RNG.integers(0, 256, (17, 23, 3), dtype=np.uint8)
    np.testing.assert_array_equal(png.decode(png.encode(a)), a)
