"""Segment Anything's input and output as transformers' SamProcessor makes them.

In: the image's longest side scaled to 1024 (each side int(side * scale + 0.5)) with
Pillow's bilinear resampling (sam_resample), scaled by 1/255, normalized by the ImageNet
mean and std, padded with zeros at the bottom and right to 1024 x 1024: the same pixel
values as SamProcessor's, bit for bit (the same integer resampling, the same float32
steps). Prompts (points
and boxes, in the original image's pixels) are scaled into the resized image's frame.

Out: low-resolution mask logits (..., 256, 256) upsampled bilinearly to 1024 x 1024, the
padding cropped off, upsampled again to the original size, then thresholded
(sam_interpolate, as torch's interpolate). The second upsampling runs a band of rows at a
time, so a large photo's masks cost its size in booleans, not in floats.

The geometry (sizes, coordinates) is plain Python; only pixels go through numpy.
"""

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgument
from . import sam_interpolate
from .sam_resample import resize_like_pillow

INPUT_SIZE = 1024  # the encoder's square input
MEAN = (0.485, 0.456, 0.406)  # ImageNet, on [0, 1] RGB
STD = (0.229, 0.224, 0.225)
BAND_ROWS = 512  # output rows upsampled at a time


def resized_shape(height, width, longest=INPUT_SIZE):
    """(height, width) with the longest side scaled to `longest`, as SamProcessor rounds."""
    scale = longest * 1.0 / max(height, width)
    return int(height * scale + 0.5), int(width * scale + 0.5)


@dataclass(frozen=True)
class SamFrame:
    """An image's size and the size it has inside the model's padded input."""

    original_size: tuple  # (height, width)
    reshaped_size: tuple  # (height, width) after resizing, before padding

    @classmethod
    def of(cls, height, width):
        return cls((height, width), resized_shape(height, width))

    def point_to_input(self, x, y):
        """A point in original pixels -> the resized image's pixels (float64, as SamProcessor)."""
        (h, w), (rh, rw) = self.original_size, self.reshaped_size
        return x * (rw / w), y * (rh / h)

    def box_to_input(self, box):
        x0, y0 = self.point_to_input(box[0], box[1])
        x1, y1 = self.point_to_input(box[2], box[3])
        return x0, y0, x1, y1


def preprocess(image):
    """(H, W, 3) uint8 RGB -> ((1, 3, 1024, 1024) float32 pixel values, SamFrame)."""
    frame = SamFrame.of(*image.shape[:2])
    rh, rw = frame.reshaped_size
    if rh < 1 or rw < 1:
        h, w = frame.original_size
        raise InvalidArgument(
            f"image: {w}x{h} is too thin for the model: its short side would be "
            f"{min(rh, rw)} pixels once the long side is {INPUT_SIZE}",
            op="sam.preprocess",
        )
    resized = resize_like_pillow(image, rh, rw)
    # SamProcessor's float steps: x / 255 rounded to float32, then (x - mean) / std in float32
    scaled = (resized.astype(np.float64) * (1 / 255)).astype(np.float32)
    normalized = (scaled - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
    out = np.zeros((1, 3, INPUT_SIZE, INPUT_SIZE), np.float32)
    out[0, :, :rh, :rw] = normalized.transpose(2, 0, 1)
    return out, frame


def mask_logits_bands(low_res, frame, band_rows=BAND_ROWS):
    """Yield (first row, (..., rows, W) float32 logits) bands of `low_res` (..., h, w)
    upsampled to the frame's original size, as SamProcessor.post_process_masks does it."""
    low_res = np.asarray(low_res, dtype=np.float32)
    (h, w), (rh, rw) = frame.original_size, frame.reshaped_size
    unpadded = sam_interpolate.resize(
        low_res, INPUT_SIZE, INPUT_SIZE, rows=np.arange(rh), cols=np.arange(rw)
    )
    for y in range(0, h, band_rows):
        rows = np.arange(y, min(y + band_rows, h))
        yield y, sam_interpolate.resize(unpadded, h, w, rows=rows)


def post_process_masks(low_res, frame, mask_threshold=0.0, binarize=True):
    """(..., 256, 256) mask logits -> (..., H, W) masks of the original image: booleans
    (logit > mask_threshold), or the float32 logits with binarize=False."""
    low_res = np.asarray(low_res, dtype=np.float32)
    h, w = frame.original_size
    out = np.empty(low_res.shape[:-2] + (h, w), bool if binarize else np.float32)
    for y, band in mask_logits_bands(low_res, frame):
        out[..., y : y + band.shape[-2], :] = band > mask_threshold if binarize else band
    return out
