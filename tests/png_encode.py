"""A small PNG writer for the tests (zlib + struct), choosing each row's filter, so the
decoder's five filters, colour types and depths are all exercised without Pillow."""

import struct
import zlib

import numpy as np

SIG = b"\x89PNG\r\n\x1a\n"
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _filter_row(kind, line, prior, bpp):
    out = bytearray(len(line))
    for i, v in enumerate(line):
        a = line[i - bpp] if i >= bpp else 0
        b = prior[i]
        c = prior[i - bpp] if i >= bpp else 0
        pred = (0, a, b, (a + b) // 2, _paeth(a, b, c))[kind]
        out[i] = (v - pred) & 0xFF
    return bytes([kind]) + bytes(out)


def encode(samples, ctype, depth=8, palette=None, filters=(0, 1, 2, 3, 4), interlace=0):
    """samples: (H, W, channels) integers (indices for ctype 3) -> PNG bytes; row y uses
    filters[y % len(filters)]."""
    samples = np.asarray(samples)
    h, w = samples.shape[:2]
    ch = CHANNELS[ctype]
    flat = samples.reshape(h, w * ch)
    if depth == 16:
        rows = [r.astype(">u2").tobytes() for r in flat]
    elif depth == 8:
        rows = [r.astype(np.uint8).tobytes() for r in flat]
    else:
        bits = (
            ((flat[..., None] >> np.arange(depth - 1, -1, -1)) & 1).reshape(h, -1).astype(np.uint8)
        )
        rows = [np.packbits(r).tobytes() for r in bits]
    bpp = max(ch * depth // 8, 1)
    raw, prior = b"", bytes(len(rows[0]))
    for y, r in enumerate(rows):
        raw += _filter_row(filters[y % len(filters)], r, prior, bpp)
        prior = r
    out = SIG + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace))
    if palette is not None:
        out += chunk(b"PLTE", np.asarray(palette, np.uint8).tobytes())
    return out + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
