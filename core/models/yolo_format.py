"""ember's on-disk form of a YOLOv8 model: a directory holding

- `model.safetensors`: every float tensor under Ultralytics' state-dict names
  (`model.0.conv.weight`, `model.0.bn.running_mean`, ...), float32;
- `yolo.json`: what the tensors do not say: the model yaml (the layer rows), the
  task (detect or pose), class names, the head's strides, the training image size and
  the BatchNorm eps (an attribute of each BatchNorm, not a tensor).

It is written once, by a conversion (ember.models.yolo_convert, `ember convert
--from-ultralytics`), and read by ember.models.yolo.load: reading it parses JSON and a
safetensors header, nothing is unpickled. Both files are staged under temporary names
and renamed together, so a failed conversion leaves neither.
"""

import json
import os

import numpy as np

from ..errors import FormatError
from . import yolo_config

FORMAT = "ember-yolo"
VERSION = 1
WEIGHTS = "model.safetensors"
META = "yolo.json"
TASKS = ("detect", "pose")  # the Ultralytics tasks ember runs
MAX_META_BYTES = 4 << 20  # a model's JSON is a few kB; a bigger file is not one


def paths(path):
    """(yolo.json, model.safetensors) of a model directory, or of its yolo.json."""
    path = os.fspath(path)
    meta = path if os.path.basename(path) == META else os.path.join(path, META)
    return meta, os.path.join(os.path.dirname(meta), WEIGHTS)


def is_model(path):
    meta, weights = paths(path)
    return os.path.isfile(meta) and os.path.isfile(weights)


def _bad(source, field, why):
    raise FormatError(f"{source}: {field} {why}", path=source, field=field)


def _check_eps(source, eps):
    values = eps.values() if isinstance(eps, dict) else [eps]
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
            _bad(source, "bn_eps", f"must be a number in (0, 1) or a map of them, got {v!r}")


def check_meta(meta, source):
    """The YoloConfig of a yolo.json object, every field checked (FormatError naming it)."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        _bad(source, "format", f"must be {FORMAT!r} (is this an ember YOLO model?)")
    if meta.get("version") != VERSION:
        _bad(source, "version", f"{meta.get('version')!r} is not {VERSION}")
    task = meta.get("task")
    if task not in TASKS:
        _bad(source, "task", f"{task!r}: ember runs YOLOv8 {' and '.join(TASKS)} models only")
    config = yolo_config.parse(meta.get("yaml"), source=source)
    if (config.kpt_shape is not None) != (task == "pose"):
        _bad(source, "task", f"{task!r} does not match the model yaml's head")
    names = meta.get("names")
    if not isinstance(names, dict) or set(names) != {str(i) for i in range(config.nc)}:
        _bad(source, "names", f"must map '0'..'{config.nc - 1}' to class names")
    if not all(isinstance(v, str) for v in names.values()):
        _bad(source, "names", "must be strings")
    strides = meta.get("strides")
    if strides != list(config.strides):
        _bad(source, "strides", f"{strides!r} differ from the yaml's {list(config.strides)}")
    imgsz = meta.get("imgsz")
    if not isinstance(imgsz, int) or isinstance(imgsz, bool) or imgsz < 1 or imgsz % max(strides):
        _bad(source, "imgsz", f"must be a multiple of {max(strides)}, got {imgsz!r}")
    _check_eps(source, meta.get("bn_eps"))
    return config


def make_meta(yaml, task, names, strides, imgsz, bn_eps, converted_from):
    """A yolo.json object (checked as the reader checks it, so a converter never writes
    a model ember then refuses)."""
    eps = sorted(set(bn_eps.values())) if isinstance(bn_eps, dict) else [bn_eps]
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "task": task,
        "names": {str(int(k)): str(v) for k, v in sorted(names.items())},
        "strides": [int(s) for s in strides],
        "imgsz": int(imgsz),
        "bn_eps": eps[0] if len(eps) == 1 else dict(sorted(bn_eps.items())),
        "yaml": yaml,
        "converted_from": converted_from,
    }
    meta = json.loads(json.dumps(meta))  # as the reader will see it (tuples become lists)
    check_meta(meta, converted_from)
    return meta


def write(out_dir, meta, arrays, force=False):
    """Write `arrays` (name -> float numpy array) and `meta` into `out_dir` (made if
    absent); an existing file there is refused unless `force`. Returns the two paths."""
    from ..io.outputs import StagedOutputs
    from ..io.safetensors_writer import PlannedTensor, write_safetensors

    out_dir = os.fspath(out_dir)
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise FormatError(f"{out_dir} exists and is not a directory", path=out_dir)
    os.makedirs(out_dir, exist_ok=True)
    meta_path, weights_path = paths(out_dir)
    planned = [
        PlannedTensor(
            name,
            "F32",
            tuple(a.shape),
            lambda a=a: np.ascontiguousarray(a, dtype=np.float32),
        )
        for name, a in sorted(arrays.items())
    ]
    with StagedOutputs(force) as outputs:
        write_safetensors(outputs, weights_path, planned, metadata={"format": FORMAT})
        outputs.open(meta_path).write((json.dumps(meta, indent=1) + "\n").encode())
    return meta_path, weights_path


def read(path):
    """(YoloConfig, names {int: str}, arrays {name: numpy}, meta) of a model directory."""
    from ..io.safetensors import SafetensorsFile

    meta_path, weights_path = paths(path)
    for p in (meta_path, weights_path):
        if not os.path.isfile(p):
            raise FormatError(
                f"{p} is missing: an ember YOLO model is a directory holding {META} and "
                f"{WEIGHTS} (make one with `ember convert --from-ultralytics MODEL.pt DIR`)",
                path=p,
            )
    if os.path.getsize(meta_path) > MAX_META_BYTES:
        _bad(meta_path, "size", f"is over {MAX_META_BYTES} bytes")
    try:
        with open(meta_path, encoding="utf-8") as fh:
            meta = json.load(fh)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{meta_path}: not JSON ({exc})", path=meta_path) from None
    config = check_meta(meta, meta_path)
    with SafetensorsFile(weights_path) as st:
        arrays = {name: st.get(name).numpy() for name in st}
    names = {int(k): v for k, v in meta["names"].items()}
    return config, names, arrays, meta
