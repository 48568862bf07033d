"""Segment Anything in a page (web/static/segment.html), run in its worker's Pyodide on
the page's WebGPU device, with no numpy:

- the model: a safetensors file (and its config.json) fetched from a URL (a blob: URL
  of a file the visitor picked, or the bundle's) into a JS ArrayBuffer, its tensors
  uploaded from views of it (load_safetensors_js), then ember's own SamModel;
- the image: RGBA pixels the page decoded with the browser's own decoder, resized
  as SamProcessor resizes (Pillow's bilinear, in integers: page_sam_resize), then
  scaled, normalized and padded on the device with ember ops (WGSL);
- the image embedding is computed once per image (set_image) and reused by every
  segment() call, whose low-resolution mask logits are upsampled bilinearly to the
  model's input, cropped to the image, upsampled to the image's size and thresholded
  at 0 on the device, as SamProcessor.post_process_masks does; only the masks (one
  byte per pixel) and the IoU scores are read back;
- the positional encoding's sin and cos are computed with ember ops as polynomials
  (AccurateFourierEmbedding) instead of WGSL's built-ins, which SwiftShader (Chromium's
  software WebGPU) computes only to ~2e-4: enough to move the IoU scores by 2e-3.

The input side is the model's own image_size (1024 for SAM ViT-B/L/H, smaller for tiny
test models), where SamProcessor's default is 1024. Answers are JSON strings.
"""

import base64
import json
import math
import time
from array import array

from ember import dtype as dt
from ember import functional as F
from ember.device import Device
from ember.errors import InvalidArgument
from ember.layout import Layout
from ember.models.sam_prompt import FourierEmbedding
from ember.tensor import Tensor, cat, tensor

from . import page_sam_resize

MEAN = (0.485, 0.456, 0.406)  # ImageNet, on [0, 1] RGB, as SamProcessor
STD = (0.229, 0.224, 0.225)
MAX_POINTS = 64  # clicks on one object: bounded, far past what a person adds

_state = {}

# 2 pi in two parts (Cody and Waite): k * _TWO_PI_HI is exact in f32 for the k met here
# (|k| < 2**12), so x - k * 2 pi loses nothing but the low part's rounding.
_TWO_PI_HI = 6.28125
_TWO_PI_LO = 2 * math.pi - 6.28125
# Taylor coefficients on [-pi, pi]: the first term left out is below 3e-8 there.
_SIN = [(-1) ** n / math.factorial(2 * n + 1) for n in range(9)]
_COS = [(-1) ** n / math.factorial(2 * n) for n in range(10)]


def _poly(r2, coefficients):
    """sum(c_n r2**n) by Horner's rule, in ember ops."""
    acc = r2 * coefficients[-1] + coefficients[-2]
    for c in reversed(coefficients[:-2]):
        acc = acc * r2 + c
    return acc


class AccurateFourierEmbedding(FourierEmbedding):
    """SAM's Fourier positional encoding with sin and cos as polynomials of the argument
    reduced to [-pi, pi] (about 1e-6 from the exact values), so a page on SwiftShader
    gives native ember's prompt and image encodings to float32 rounding."""

    def forward(self, coords):
        c = coords * 2.0 - 1.0
        c = F.linear(c, self.positional_embedding.transpose(0, 1)) * (2 * math.pi)
        k = (c * (1 / (2 * math.pi))).round()
        r = (c - k * _TWO_PI_HI) - k * _TWO_PI_LO
        r2 = r * r
        return cat([r * _poly(r2, _SIN), _poly(r2, _COS)], -1)


def _bad(message, argument):
    raise InvalidArgument(message, op="segment", argument=argument)


async def _fetch(url, what):
    import js

    response = await js.fetch(url)
    if not response.ok:
        raise FileNotFoundError(f"fetching the {what} ({url}): HTTP {response.status}")
    return response


async def load_model(weights_url, config_url=None, label="model.safetensors"):
    """Load the SAM weights at `weights_url` (with the config.json at `config_url` for
    transformers' names; none for the original segment-anything names) onto the page's
    device; JSON with the model's sizes and the seconds taken."""
    from ember.io.js_buffers import load_safetensors_js
    from ember.models.sam import SamModel

    t0 = time.perf_counter()
    buffer = await (await _fetch(weights_url, f"weights {label}")).arrayBuffer()
    config = None
    if config_url:
        text = await (await _fetch(config_url, "config.json")).text()
        try:
            config = json.loads(text)
        except ValueError as exc:
            raise InvalidArgument(
                f"config.json beside {label} is not JSON: {exc}", op="segment", argument="config"
            ) from None
    t1 = time.perf_counter()
    device = Device.webgpu()
    tensors = load_safetensors_js(buffer, device, name=label)
    model = SamModel.from_tensors(tensors, config, device=device, label=label)
    # The one Fourier module the model and its prompt encoder share, given accurate sin/cos.
    model.shared_image_embedding.__class__ = AccurateFourierEmbedding
    _state.clear()
    _state["model"] = model
    v = model.cfg.vision
    return json.dumps(
        {
            "model": label,
            "parameters": model.num_parameters(),
            "bytes": int(buffer.byteLength),
            "image_size": v.image_size,
            "layers": v.num_hidden_layers,
            "hidden_size": v.hidden_size,
            "seconds": {"read": t1 - t0, "load": time.perf_counter() - t1},
        }
    )


def _model():
    model = _state.get("model")
    if model is None:
        raise RuntimeError("no model is loaded: pick a SAM model first")
    return model


def _upload_f32(values, shape, device):
    """A device tensor from an array('f') of host values (one copy, no Python floats list)."""
    storage = device.backend.from_host(values.tobytes(), dt.f32, shape)
    return Tensor(storage, Layout(shape), dt.f32, device)


def pixel_values(rgba, width, height, size, device):
    """RGBA bytes (height x width x 4) -> [1, 3, size, size] pixel values as SamProcessor
    makes them: resized (Pillow bilinear) so the long side is `size`, divided by 255,
    normalized by the ImageNet mean and std, zero-padded at the bottom and right; and the
    resized (height, width)."""
    rh, rw = page_sam_resize.check_size(width, height, size)
    planes = b"".join(
        page_sam_resize.resize_plane(rgba[c::4], width, height, rw, rh) for c in range(3)
    )
    # iter(): array("f", bytes) would read the bytes as packed floats
    x = _upload_f32(array("f", iter(planes)), (3, rh, rw), device) / 255.0
    mean = tensor([[[m]] for m in MEAN], dtype=dt.f32, device=device)
    std = tensor([[[s]] for s in STD], dtype=dt.f32, device=device)
    x = F.pad((x - mean) / std, (0, size - rw, 0, size - rh))
    return x.reshape(1, 3, size, size), (rh, rw)


async def set_image(rgba_url, width, height):
    """Embed the image whose RGBA pixels (width x height, as the page decoded them) are
    at `rgba_url`, once; JSON with the timings (ms) of the resize and of the encoder."""
    import js

    model = _model()
    width, height = int(width), int(height)
    if width < 1 or height < 1:
        _bad(f"image: {width}x{height} has no pixels", "image")
    buffer = await (await _fetch(rgba_url, "image pixels")).arrayBuffer()
    rgba = js.Uint8Array.new(buffer).to_bytes()
    if len(rgba) != width * height * 4:
        _bad(f"image: {len(rgba)} bytes of RGBA for a {width}x{height} image", "image")
    _state.pop("embedding", None)  # an old embedding must never answer for this image
    t0 = time.perf_counter()
    pixels, (rh, rw) = pixel_values(rgba, width, height, model.cfg.vision.image_size, model.device)
    await pixels.sum().item_async()  # the upload and normalization done before the encoder
    t1 = time.perf_counter()
    embedding = model.image_embeddings(pixels)
    await embedding.sum().item_async()  # wait for the encoder's work on the GPU
    t2 = time.perf_counter()
    _state.update(embedding=embedding, frame=(height, width, rh, rw))
    return json.dumps(
        {
            "width": width,
            "height": height,
            "resized": [rh, rw],
            "ms": {"preprocess": 1000 * (t1 - t0), "encoder": 1000 * (t2 - t1)},
        }
    )


def _checked_points(points, width, height):
    if not isinstance(points, list) or not points:
        _bad("points: an empty point list; click the image to add a point", "points")
    if len(points) > MAX_POINTS:
        _bad(f"points: {len(points)} points, more than the {MAX_POINTS} one prompt takes", "points")
    out, labels = [], []
    for i, p in enumerate(points):
        if not (isinstance(p, list) and len(p) == 3):
            _bad(f"points[{i}]: expects [x, y, label], got {p!r}", "points")
        x, y, label = p
        if label not in (0, 1) or isinstance(label, bool):
            _bad(f"points[{i}]: label {label!r} must be 1 (positive) or 0 (negative)", "points")
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
        if not ok or not (0 <= x < width and 0 <= y < height):
            _bad(f"points[{i}]: ({x}, {y}) is outside the {width}x{height} image", "points")
        out.append((float(x), float(y)))
        labels.append(label)
    return out, labels


async def segment(points_json, multimask=True):
    """Masks for the points (JSON [[x, y, label], ...] in the image's pixels, label 1
    positive, 0 negative) on the embedded image: JSON with "scores" (the predicted IoU
    of each mask), "masks" (base64, one byte 0/1 per pixel, row-major, the image's size)
    and the timings (ms) of the decoder and of the post-processing."""
    model = _model()
    embedding = _state.get("embedding")
    if embedding is None:
        raise RuntimeError("no image is embedded: pick an image first")
    height, width, rh, rw = _state["frame"]
    points, labels = _checked_points(json.loads(points_json), width, height)
    device = model.device
    # Into the resized image's frame, as SamProcessor scales prompts.
    scaled = [[x * (rw / width), y * (rh / height)] for x, y in points]
    t0 = time.perf_counter()
    low_res, iou = model.predict_masks(
        embedding,
        input_points=tensor([[scaled]], dtype=dt.f32, device=device),
        input_labels=[[labels]],  # host lists: no int64 upload to WebGPU
        multimask_output=bool(multimask),
    )
    scores = (await iou.tolist_async())[0][0]
    t1 = time.perf_counter()
    k, side = low_res.shape[2], low_res.shape[-1]
    size = model.cfg.vision.image_size
    up = F.interpolate(low_res.reshape(1, k, side, side), size=(size, size), mode="bilinear")
    up = up.narrow(2, 0, rh).narrow(3, 0, rw)
    masks = F.interpolate(up, size=(height, width), mode="bilinear").gt(0.0)  # u8 0/1
    raw = await masks.backend.to_bytes_async(masks.storage, masks.layout, masks.dtype)
    t2 = time.perf_counter()
    n = height * width
    return json.dumps(
        {
            "points": [[x, y, lab] for (x, y), lab in zip(points, labels, strict=True)],
            "scores": scores,
            "masks": [base64.b64encode(raw[i * n : (i + 1) * n]).decode() for i in range(k)],
            "width": width,
            "height": height,
            "ms": {"decoder": 1000 * (t1 - t0), "postprocess": 1000 * (t2 - t1)},
        }
    )
