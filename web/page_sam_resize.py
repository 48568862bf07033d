"""Pillow's BILINEAR resize of 8-bit image planes in pure Python, for the segmentation
page (Pyodide has no numpy and no Pillow there).

SamProcessor resizes through Pillow, so the page must too, bit for bit: separable
resampling with a triangle filter widened by the scale factor when shrinking (it
antialiases), coefficients rounded to 22-bit fixed point, the horizontal pass first with
its result rounded to 8 bits, then the vertical pass; a pass whose size does not change
is skipped. Integer arithmetic throughout, so every pixel equals Pillow's.

Cost: about (source rows x output columns + output pixels) x taps Python multiply-adds
per channel; for a photo resized to 1024 that is seconds in Pyodide (a WGSL kernel would
be the next step), for the small inputs of tiny models it is nothing.
"""

from operator import mul

from ember.errors import InvalidArgument

PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit images
_HALF = 1 << (PRECISION_BITS - 1)


def resized_shape(height, width, longest):
    """(height, width) with the longest side scaled to `longest`, rounded as SamProcessor."""
    scale = longest * 1.0 / max(height, width)
    return int(height * scale + 0.5), int(width * scale + 0.5)


def _triangle(x):
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def coefficients(in_size, out_size):
    """Per output pixel (first source index, [fixed-point weights]), as Pillow's
    precompute_coeffs followed by normalize_coeffs_8bpc."""
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = filterscale  # the triangle filter's support is 1
    out = []
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)  # int() truncates, as the C cast
        hi = min(int(center + support + 0.5), in_size)
        w = [_triangle((x + lo - center + 0.5) / filterscale) for x in range(hi - lo)]
        total = sum(w)
        if total != 0.0:
            w = [v / total for v in w]
        out.append((lo, [int((0.5 if v >= 0 else -0.5) + v * (1 << PRECISION_BITS)) for v in w]))
    return out


def _clip8(acc):
    v = acc >> PRECISION_BITS
    return 0 if v < 0 else 255 if v > 255 else v


def resize_plane(plane, width, height, out_width, out_height):
    """One channel, `plane` (bytes, row-major height x width) -> bytes out_height x out_width."""
    if len(plane) != width * height:
        raise ValueError(f"resize_plane: {len(plane)} bytes for a {width}x{height} plane")
    rows = [plane[y * width : (y + 1) * width] for y in range(height)]
    if out_width != width:
        taps = coefficients(width, out_width)
        rows = [
            bytes(_clip8(_HALF + sum(map(mul, row[lo : lo + len(ws)], ws))) for lo, ws in taps)
            for row in rows
        ]
    if out_height != height:
        out = []
        for lo, ws in coefficients(height, out_height):
            acc = [_HALF] * out_width
            for k, wk in enumerate(ws):
                acc = [a + v * wk for a, v in zip(acc, rows[lo + k], strict=True)]
            out.append(bytes(_clip8(a) for a in acc))
        rows = out
    return b"".join(rows)


def check_size(width, height, longest):
    """The resized (height, width), refusing an image too thin to keep a pixel."""
    rh, rw = resized_shape(height, width, longest)
    if rh < 1 or rw < 1:
        raise InvalidArgument(
            f"image: {width}x{height} is too thin: its short side would be "
            f"{min(rh, rw)} pixels once the long side is {longest}",
            op="segment",
            argument="image",
        )
    return rh, rw
