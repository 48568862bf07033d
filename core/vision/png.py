"""PNG decoding in pure Python (zlib and numpy): every colour type, bit depths 1-16,
the five row filters; not interlaced (Adam7) files, which are refused by name.

Decoded to what a detector reads, as OpenCV's imread(IMREAD_COLOR) gives it: 8-bit
RGB (16-bit samples keep their high byte, grey is repeated into three channels, alpha
is dropped, palettes are looked up). Chunk CRCs are checked, so a damaged file is an
error, never a half image.

Rows are inflated and unfiltered one at a time (`rows`), so a reader that keeps only
some of them (ember.vision.images.read_for_size, for a huge PNG) never holds the image.
"""

import struct
import zlib

import numpy as np

from ..errors import FormatError

SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_PIXELS = 120_000_000  # a 10,000 x 10,000 photo fits (300 MB as RGB); a bomb does not
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}


def _bad(path, why):
    raise FormatError(f"{path}: {why}", path=path)


def _chunks(data, path):
    pos = len(SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 8 + length
        if end + 4 > len(data):
            _bad(path, f"PNG chunk {kind!r} runs past the end of the file (truncated?)")
        body = memoryview(data)[pos + 8 : end]  # a view: IDAT is not copied
        (crc,) = struct.unpack_from(">I", data, end)
        if zlib.crc32(body, zlib.crc32(kind)) != crc:
            _bad(path, f"PNG chunk {kind!r} fails its CRC (the file is damaged)")
        yield kind, body
        if kind == b"IEND":
            return
        pos = end + 4
    _bad(path, "the PNG has no IEND chunk (truncated?)")


def _paeth_row(line, prior, bpp):
    for i in range(len(line)):
        a = line[i - bpp] if i >= bpp else 0
        b = prior[i]
        c = prior[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF


def _average_row(line, prior, bpp):
    for i in range(len(line)):
        a = line[i - bpp] if i >= bpp else 0
        line[i] = (line[i] + ((a + prior[i]) >> 1)) & 0xFF


def _unfilter(raw, prior, bpp, y, path):
    """Row `y`'s bytes from its filtered form (the filter type, then the bytes) and the
    unfiltered row above it."""
    kind = raw[0]
    line = np.frombuffer(raw, np.uint8, len(raw) - 1, 1).copy()
    stride = len(line)
    if kind == 1:  # Sub: a running sum per byte of a pixel, wrapping at 256
        pad = (-stride) % bpp
        cols = np.concatenate([line, np.zeros(pad, np.uint8)]).reshape(-1, bpp)
        line = np.cumsum(cols, 0, dtype=np.uint8).ravel()[:stride]
    elif kind == 2:
        line += prior
    elif kind in (3, 4):
        buf, pri = bytearray(line.tobytes()), prior.tobytes()
        (_average_row if kind == 3 else _paeth_row)(buf, pri, bpp)
        line = np.frombuffer(bytes(buf), np.uint8)
    elif kind != 0:
        _bad(path, f"PNG row {y} has filter type {kind} (0-4 exist)")
    return line


_PIECE = 1 << 14  # compressed bytes inflated at a time: at most ~16 MB out, even for a bomb


def _filtered_rows(idat, height, stride, path):
    """Each row's filtered bytes, inflated from the IDAT chunks as they are needed."""
    inflate = zlib.decompressobj()
    pieces = (body[i : i + _PIECE] for body in idat for i in range(0, len(body), _PIECE))
    buf, need, done = bytearray(), stride + 1, 0
    for _ in range(height):
        while len(buf) < need:
            piece = next(pieces, None)
            if piece is None:
                _bad(
                    path,
                    f"the PNG's image data holds {done + len(buf)} bytes, {height * need} "
                    "needed (truncated?)",
                )
            try:
                buf += inflate.decompress(piece)
            except zlib.error as exc:
                _bad(path, f"the PNG's image data does not decompress ({exc}; truncated?)")
        yield bytes(buf[:need])
        del buf[:need]  # cheap: a bytearray drops its front without moving the rest
        done += need


def _to_rgb(line, width, depth, ctype, palette, path):
    """One unfiltered row -> (width, 3) uint8 RGB."""
    if depth < 8:
        samples = np.unpackbits(line)[: width * depth].reshape(width, depth)
        values = samples.dot(1 << np.arange(depth - 1, -1, -1)).astype(np.uint8)
        pix = values[:, None] if ctype == 3 else (values * (255 // ((1 << depth) - 1)))[:, None]
    elif depth == 16:
        pix = line.reshape(width, _CHANNELS[ctype], 2)[..., 0]  # the high byte
    else:
        pix = line.reshape(width, _CHANNELS[ctype])
    if ctype == 3:
        idx = pix[:, 0]
        if idx.max() >= len(palette):
            _bad(path, "a PNG pixel names a colour past the end of the palette")
        return palette[idx]
    if ctype in (0, 4):
        return np.repeat(pix[:, :1], 3, axis=1)
    return pix[:, :3]


def rows(data, path="image"):
    """PNG bytes -> (height, width, an iterator of its (width, 3) uint8 RGB rows, top
    first). The header is checked at once; a damaged row raises when it is reached."""
    if not data.startswith(SIGNATURE):
        _bad(path, "not a PNG file")
    header, palette, idat = None, None, []
    for kind, body in _chunks(data, path):
        if kind == b"IHDR":
            if len(body) != 13:
                _bad(path, "the PNG header (IHDR) is malformed")
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = np.frombuffer(body, np.uint8).reshape(-1, 3) if len(body) % 3 == 0 else None
        elif kind == b"IDAT":
            idat.append(body)
    if header is None:
        _bad(path, "the PNG has no header (IHDR)")
    width, height, depth, ctype, comp, filt, interlace = header
    if ctype not in _CHANNELS or depth not in _DEPTHS[ctype] or comp or filt:
        _bad(path, f"PNG colour type {ctype} with bit depth {depth} is not a valid combination")
    if interlace:
        _bad(path, "interlaced (Adam7) PNGs are not supported; save it without interlacing")
    if width < 1 or height < 1:
        _bad(path, f"the PNG is {width}x{height}")
    if width * height > MAX_PIXELS:
        _bad(path, f"the PNG is {width}x{height}, over the {MAX_PIXELS:,} pixels ember decodes")
    if ctype == 3 and palette is None:
        _bad(path, "the palette PNG has no valid palette (PLTE)")
    bits = _CHANNELS[ctype] * depth
    stride, bpp = (width * bits + 7) // 8, max(bits // 8, 1)

    def each():
        prior = np.zeros(stride, np.uint8)
        for y, raw in enumerate(_filtered_rows(idat, height, stride, path)):
            prior = _unfilter(raw, prior, bpp, y, path)
            yield _to_rgb(prior, width, depth, ctype, palette, path)

    return height, width, each()


def assemble(height, width, each):
    """`rows`' answer -> the (height, width, 3) uint8 image."""
    out = np.empty((height, width, 3), np.uint8)
    for y, row in enumerate(each):
        out[y] = row
    return out


def decode(data, path="image"):
    """PNG bytes -> (H, W, 3) uint8 RGB."""
    return assemble(*rows(data, path))


def encode(image):
    """(H, W, 3) uint8 RGB -> PNG bytes (8-bit RGB, rows unfiltered, zlib level 6)."""
    a = np.ascontiguousarray(image, dtype=np.uint8)
    h, w = a.shape[:2]
    rows = np.concatenate([np.zeros((h, 1), np.uint8), a.reshape(h, w * 3)], 1)

    def chunk(kind, body):
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        SIGNATURE
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )
