"""Object detection in a page (web/static/detect.html): a YOLOv8 detector run in the
worker's Pyodide on the page's WebGPU device, with no numpy, giving `ember detect`'s
boxes:

- the model: an ember YOLO model directory's pair (model.safetensors + yolo.json, made
  by `ember convert --from-ultralytics`), from the bundle or picked by the visitor,
  fetched into a JS ArrayBuffer; its tensors go from views of it straight into GPU
  buffers, and the BatchNorm vectors come back to the host (one readback) to be folded
  as native ember folds them (page_yolo_model);
- a frame: RGB pixels the page decoded with the browser's own decoder (an image file
  through createImageBitmap, or a webcam frame), as float32 0..255 values; letterboxed
  on the device as ember.vision.letterbox does it (page_yolo_letterbox), scaled to
  [0, 1], the model, and only the head's output read back;
- boxes: confidence filter, class-wise NMS and the mapping back onto the frame in plain
  Python, as ember.vision.nms.select and Letterbox.to_original do (page_yolo_nms).

Answers are JSON strings, with each stage's milliseconds.
"""

import json
import time
from array import array

from ember import dtype as dt
from ember.device import Device
from ember.errors import FormatError, InvalidArgument
from ember.tensor import cat

from . import page_yolo_letterbox, page_yolo_model, page_yolo_nms

MAX_IMGSZ = 1280  # a letterbox side; the models are trained at 640
MAX_PIXELS = 4096 * 4096  # a frame, as float32 RGB: 200 MB at most
BATCHNORM_SUFFIXES = (".running_mean", ".running_var", ".weight", ".bias")

_state = {}


def _bad(message, argument):
    raise InvalidArgument(message, op="detect", argument=argument)


async def _fetch(url, what):
    import js

    response = await js.fetch(url)
    if not response.ok:
        raise FileNotFoundError(f"fetching the {what} ({url}): HTTP {response.status}")
    return response


def _is_batchnorm(name):
    return ".bn." in name and name.endswith(BATCHNORM_SUFFIXES)


async def read_weights(array_buffer, device, name):
    """(device tensors, host BatchNorm vectors) of the safetensors file in `array_buffer`:
    every tensor goes from a view of the buffer to the GPU, the BatchNorm vectors come
    back to the host in one readback."""
    from ember.io.js_buffers import load_safetensors_js

    tensors = load_safetensors_js(array_buffer, device, name)
    for key in [k for k in tensors if k.endswith(".num_batches_tracked")]:
        del tensors[key]  # a training counter, never read
    bn = [k for k in tensors if _is_batchnorm(k)]
    for key in bn:
        t = tensors[key]
        if t.dtype is not dt.f32 or t.ndim != 1:
            raise FormatError(
                f"{name}: tensor {key} is {t.dtype.name} {list(t.shape)}; a BatchNorm vector "
                "of an ember YOLO model is f32 and one-dimensional",
                path=name,
                tensor=key,
            )
    flat = await cat([tensors[k] for k in bn]).tolist_async() if bn else []
    host, at = {}, 0
    for key in bn:
        n = tensors.pop(key).shape[0]
        host[key], at = flat[at : at + n], at + n
    return tensors, host


async def load_model(weights_url, meta_url, label="model.safetensors"):
    """Load the model whose model.safetensors is at `weights_url` and yolo.json at
    `meta_url` onto the page's device; JSON with its classes, sizes and the seconds taken."""
    t0 = time.perf_counter()
    text = await (await _fetch(meta_url, "yolo.json")).text()
    try:
        meta = json.loads(text)
    except ValueError as exc:
        raise FormatError(f"yolo.json beside {label}: not JSON ({exc})", path="yolo.json") from None
    config = page_yolo_model.check_meta(meta, "yolo.json")  # before 40 MB are fetched
    buffer = await (await _fetch(weights_url, f"weights {label}")).arrayBuffer()
    t1 = time.perf_counter()
    device = Device.webgpu()
    _state.clear()
    tensors, host = await read_weights(buffer, device, label)
    weights = page_yolo_model.Weights(tensors, host, label, meta["bn_eps"])
    model = page_yolo_model.PageDetector(config, meta, weights, device, label)
    _state["model"] = model
    return json.dumps(
        {
            "model": label,
            "names": model.names,
            "imgsz": model.imgsz,
            "stride": model.stride,
            "parameters": sum(t.numel() for t in tensors.values()) + sum(map(len, host.values())),
            "bytes": int(buffer.byteLength),
            "seconds": {"read": t1 - t0, "load": time.perf_counter() - t1},
        }
    )


def _model():
    model = _state.get("model")
    if model is None:
        raise RuntimeError("no model is loaded: pick a YOLO model first")
    return model


def check_imgsz(imgsz, stride):
    if (
        isinstance(imgsz, bool)
        or not isinstance(imgsz, int)
        or imgsz % stride
        or not stride <= imgsz <= MAX_IMGSZ
    ):
        _bad(
            f"imgsz: {imgsz!r} is not a multiple of {stride} between {stride} and {MAX_IMGSZ}",
            "imgsz",
        )
    return imgsz


def boxes(pred_values, pred_shape, model, width, height, geometry, conf, iou, max_det):
    """The head's output values (flat, float32) -> detections on the frame, best first."""
    resized, padding = geometry
    out = []
    for box, score, cls in page_yolo_nms.select(
        pred_values, pred_shape[2], model.config.nc, conf, iou, max_det
    ):
        out.append(
            {
                "box": page_yolo_letterbox.to_original(box, height, width, resized, padding),
                "score": score,
                "class": cls,
                "label": model.names.get(cls, str(cls)),
            }
        )
    return out


async def detect(pixels_url, width, height, imgsz=None, conf=0.25, iou=0.7, max_det=300):
    """Detections on the frame whose RGB pixels (float32 0..255, row-major height x
    width x 3, as the page decoded them) are at `pixels_url`; imgsz is the letterbox
    side (the model's own by default). JSON: the boxes (x1 y1 x2 y2 in the frame's
    pixels), scores, classes and labels, the letterboxed input's shape and each stage's
    milliseconds."""
    from ember.io.js_buffers import tensor_from_js

    model = _model()
    width, height = int(width), int(height)
    imgsz = check_imgsz(model.imgsz if imgsz is None else imgsz, model.stride)
    page_yolo_nms.check_threshold("conf", conf)
    page_yolo_nms.check_threshold("iou", iou)
    if isinstance(max_det, bool) or not isinstance(max_det, int) or max_det < 0:
        _bad(f"max_det: {max_det!r} is not a count", "max_det")
    if width < 1 or height < 1 or width * height > MAX_PIXELS:
        _bad(f"image: {width}x{height} is not between 1 and {MAX_PIXELS:,} pixels", "image")
    t0 = time.perf_counter()
    buffer = await (await _fetch(pixels_url, "frame pixels")).arrayBuffer()
    if int(buffer.byteLength) != width * height * 12:
        _bad(
            f"image: {int(buffer.byteLength)} bytes of float32 RGB for a {width}x{height} frame",
            "image",
        )
    image = tensor_from_js(buffer, dt.f32, (height, width, 3), model.device)
    boxed, geometry = page_yolo_letterbox.letterbox(image, imgsz, model.stride)
    x = (boxed / 255.0).reshape(1, *boxed.shape)
    await x.narrow(3, 0, 1).narrow(2, 0, 1).sum().item_async()  # the letterbox done
    t1 = time.perf_counter()
    pred = model(x)
    raw = await pred.backend.to_bytes_async(pred.storage, pred.layout, pred.dtype)
    t2 = time.perf_counter()
    values = array("f")
    values.frombytes(raw)
    found = boxes(values.tolist(), pred.shape, model, width, height, geometry, conf, iou, max_det)
    t3 = time.perf_counter()
    _state["last_input"] = x  # the model's input, for a check against native letterboxing
    return json.dumps(
        {
            "width": width,
            "height": height,
            "imgsz": imgsz,
            "input": list(x.shape[2:]),
            "detections": found,
            "ms": {
                "preprocess": 1000 * (t1 - t0),
                "forward": 1000 * (t2 - t1),
                "postprocess": 1000 * (t3 - t2),
            },
        }
    )
