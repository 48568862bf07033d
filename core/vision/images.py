"""Reading images for a detector: (H, W, 3) uint8 RGB numpy arrays.

PNG is decoded by ember itself (ember.vision.png, pure Python). JPEG and the other
formats go through Pillow, an optional dependency (`pip install 'ember[images]'`):
without it they are refused with a message that says so. Either way the file is named
in every error, and an image over MAX_PIXELS is refused before it is decoded. The EXIF
orientation of a file Pillow reads (a phone's JPEG) is applied, as OpenCV's imread
(Ultralytics' reader) applies it.

A detector needs only the letterboxed image (640 pixels a side), so `read_for_size`
never holds a 10,000 x 10,000 image at full size: a PNG over LARGE_PIXELS is resized to
the letterbox's scale row by row as it is inflated (the same bits as resizing it whole),
a JPEG over LARGE_PIXELS is decoded at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling,
through Pillow's draft), then resized. Up to LARGE_PIXELS (a 24 MP camera photo) JPEGs
are decoded whole, as Ultralytics decodes them, so detections match Ultralytics' there.
"""

import os
import warnings

import numpy as np

from ..errors import FormatError, InvalidArgument
from . import png
from .letterbox import resize_bilinear_rows, resized_shape

MAX_PIXELS = png.MAX_PIXELS
LARGE_PIXELS = 24_000_000  # JPEGs over this are decoded at reduced scale by read_for_size
JPEG_MAGIC = b"\xff\xd8\xff"
EXIF_ORIENTATION = 0x0112  # 1 upright; 5-8 swap width and height


class MissingDependency(FormatError):
    """The file's format needs an optional package that is not installed."""


def _pillow(path):
    try:
        from PIL import Image
    except ImportError:
        raise MissingDependency(
            f"{path}: reading JPEG (or any format but PNG) needs Pillow, which is not installed: "
            "pip install 'ember[images]' (or pip install pillow)",
            path=path,
        ) from None
    return Image


def _reduction(w, h, size):
    """The JPEG scale (1, 2, 4 or 8) read_for_size decodes a w x h file at: the least
    that brings it to LARGE_PIXELS or under, never so far that a side falls below what a
    `size` letterbox resizes it to."""
    if size is None or w * h <= LARGE_PIXELS:
        return 1
    need_h, need_w = resized_shape(h, w, size)
    fits = [s for s in (2, 4, 8) if -(-w // s) >= need_w and -(-h // s) >= need_h]
    small = [s for s in fits if -(-w // s) * -(-h // s) <= LARGE_PIXELS]
    return small[0] if small else fits[-1] if fits else 1


def _read_with_pillow(path, head, size=None):
    """(pixels, (height, width) of the file, upright); JPEGs reduced as _reduction says."""
    if not head.startswith(JPEG_MAGIC):
        try:
            import PIL  # noqa: F401  (only whether it is there)
        except ImportError:
            raise FormatError(
                f"{path}: not a PNG or JPEG file (ember reads PNG itself; JPEG and other "
                "formats through Pillow, which is not installed)",
                path=path,
            ) from None
    Image = _pillow(path)
    try:
        with warnings.catch_warnings():  # Pillow warns from 89 MP on; ember's limit is its own
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(path)
        with im:
            w, h = im.size
            if w * h > MAX_PIXELS:
                raise FormatError(
                    f"{path}: the image is {w}x{h}, over the {MAX_PIXELS:,} pixels ember decodes",
                    path=path,
                )
            orientation = im.getexif().get(EXIF_ORIENTATION, 1)
            scale = _reduction(w, h, size) if im.format in ("JPEG", "MPO") else 1
            if scale > 1:
                im.draft(None, (w // scale, h // scale))
            im.load()  # decodes now, so a truncated file fails here, naming itself
            shape = (w, h) if orientation in (5, 6, 7, 8) else (h, w)  # upright
            return _upright_rgb(im, orientation), shape
    except FormatError:
        raise
    except Image.DecompressionBombError as exc:
        raise FormatError(f"{path}: {exc}", path=path) from None
    except Image.UnidentifiedImageError:
        # the same words as without Pillow: what the file is not, whatever is installed
        raise FormatError(
            f"{path}: not a PNG or JPEG file, nor another format Pillow reads", path=path
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        kind = "JPEG" if head.startswith(JPEG_MAGIC) else "image"
        raise FormatError(f"{path}: not a readable {kind} ({exc})", path=path) from None


def _upright_rgb(im, orientation):
    """A loaded Pillow image as (H, W, 3) uint8, turned upright by its EXIF orientation;
    an RGB image is handed to numpy without another full-size copy of it."""
    if orientation in range(2, 9):
        from PIL import ImageOps

        im = ImageOps.exif_transpose(im)
    if im.mode != "RGB":
        im = im.convert("RGB")
    return np.asarray(im)


def _read_png(data, path, size):
    """(pixels, (H, W)); a PNG over LARGE_PIXELS, read for a `size` letterbox, is resized
    to the letterbox's scale as its rows are inflated: the same bits as resizing the
    whole decode (the letterbox then has nothing left to resize)."""
    h, w, rows = png.rows(data, path)
    if size is None or h * w <= LARGE_PIXELS:
        return png.assemble(h, w, rows), (h, w)
    return resize_bilinear_rows(rows, h, w, *resized_shape(h, w, size)), (h, w)


def read_image(path):
    """The image file at `path` as an (H, W, 3) uint8 RGB array."""
    return _read(path)[0]


def read_for_size(path, size):
    """(pixels, (H, W)): the image file at `path` for a detector letterboxing to `size`
    pixels a side. (H, W) is the image's own size, which boxes map back onto; `pixels`
    is the whole image, except over LARGE_PIXELS: a PNG then comes already resized to the
    letterbox's scale, a JPEG decoded at 1/2, 1/4 or 1/8 scale (never smaller than the
    letterbox needs)."""
    return _read(path, size)


def _read(path, size=None):
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(png.SIGNATURE))
            if head.startswith(png.SIGNATURE):
                return _read_png(head + fh.read(), path, size)
    except (IsADirectoryError, FileNotFoundError, PermissionError) as exc:
        raise InvalidArgument(
            f"{path}: cannot read the image ({exc.strerror})", op="read_image"
        ) from None
    if not head:
        raise FormatError(f"{path}: the file is empty", path=path)
    return _read_with_pillow(path, head, size)


def as_image(image, name="image"):
    """A path, an (H, W, 3|4) or (H, W) uint8 array, or an ember tensor of one, as an
    (H, W, 3) uint8 RGB array (alpha dropped, grey repeated)."""
    if isinstance(image, (str, os.PathLike)):
        return read_image(image)
    a = image.numpy() if hasattr(image, "numpy") and not isinstance(image, np.ndarray) else image
    a = np.asarray(a)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (1, 3, 4)):
        raise InvalidArgument(
            f"{name}: expects an (H, W, 3) uint8 RGB image (or grey, or RGBA), got {a.dtype} {a.shape}",
            op="as_image",
        )
    if a.ndim == 2:
        a = a[..., None]
    if a.shape[2] == 1:
        return np.repeat(a, 3, axis=2)
    return np.ascontiguousarray(a[..., :3])
