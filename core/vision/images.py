"""Reading images for a detector: (H, W, 3) uint8 RGB numpy arrays.

PNG is decoded by ember itself (ember.vision.png, pure Python). JPEG and the other
formats go through Pillow, an optional dependency (`pip install 'ember[images]'`):
without it they are refused with a message that says so. Either way the file is named
in every error, and an image over MAX_PIXELS is refused before it is decoded.
"""

import os

import numpy as np

from ..errors import FormatError, InvalidArgument
from . import png

MAX_PIXELS = png.MAX_PIXELS
JPEG_MAGIC = b"\xff\xd8\xff"


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


def _read_with_pillow(path, head):
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
        with Image.open(path) as im:
            w, h = im.size
            if w * h > MAX_PIXELS:
                raise FormatError(
                    f"{path}: the image is {w}x{h}, over the {MAX_PIXELS:,} pixels ember decodes",
                    path=path,
                )
            im.load()  # decodes now, so a truncated file fails here, naming itself
            return np.asarray(im.convert("RGB"))
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


def read_image(path):
    """The image file at `path` as an (H, W, 3) uint8 RGB array."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(png.SIGNATURE))
            if head.startswith(png.SIGNATURE):
                return png.decode(head + fh.read(), path)
    except (IsADirectoryError, FileNotFoundError, PermissionError) as exc:
        raise InvalidArgument(
            f"{path}: cannot read the image ({exc.strerror})", op="read_image"
        ) from None
    if not head:
        raise FormatError(f"{path}: the file is empty", path=path)
    return _read_with_pillow(path, head)


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
