"""An Ultralytics `.pt` checkpoint turned into ember's YOLO model directory
(ember.models.yolo_format: model.safetensors + yolo.json), once, before ember runs it.

Two readers of the `.pt`, which is a pickle of the whole nn.Module tree:

- `from_ultralytics` (the default of `ember convert --from-ultralytics`): Ultralytics'
  own loader in its weights-only mode (torch.load(weights_only=True) admitting only
  torch's and Ultralytics' model classes), so every checkpoint layout Ultralytics knows
  is read as Ultralytics reads it. It needs torch and ultralytics, imported here only.
- `from_inert_checkpoint` (`--inert`): ember's restricted unpickler in its inert mode
  (ember.io.torch_checkpoint), no torch: every class the pickle names becomes a data-only
  record, nothing in the file is imported or called. It knows the layout Ultralytics 8
  saves (a dict whose `ema` or `model` is the model object, with `yaml` and `names`).

Either way only YOLOv8 detect and pose models are converted; a checkpoint of another
task (segment, classify, obb) is refused naming it.
"""

import os

import numpy as np

from ..errors import EmberError, FormatError
from . import yolo_format

# Ultralytics' model classes -> their task (as its guess_model_task names them)
TASK_OF_CLASS = {
    "DetectionModel": "detect",
    "PoseModel": "pose",
    "SegmentationModel": "segment",
    "ClassificationModel": "classify",
    "OBBModel": "obb",
}
DEFAULT_IMGSZ = 640


class ConverterMissing(EmberError, ImportError):
    """Converting with Ultralytics' loader needs packages that are not installed."""


def task_of(class_name, source):
    """The task of an Ultralytics model class, refused unless ember runs it."""
    task = TASK_OF_CLASS.get(class_name)
    if task is None:
        raise FormatError(
            f"{source}: holds an Ultralytics {class_name}, not a YOLOv8 detect or pose model",
            path=source,
            field="model",
        )
    if task not in yolo_format.TASKS:
        raise FormatError(
            f"{source}: holds an Ultralytics {task} model ({class_name}); ember converts "
            f"and runs {' and '.join(yolo_format.TASKS)} models only",
            path=source,
            field="model",
        )
    return task


def _imgsz(train_args):
    size = train_args.get("imgsz") if isinstance(train_args, dict) else None
    return size if isinstance(size, int) and not isinstance(size, bool) else DEFAULT_IMGSZ


# --- with torch and Ultralytics -----------------------------------------------------------------
def _ultralytics():
    try:
        import torch
        from ultralytics.nn.tasks import torch_safe_load
    except ImportError as exc:
        raise ConverterMissing(
            f"converting an Ultralytics .pt needs torch and ultralytics ({exc}). Install them "
            "in an environment of their own: pip install torch ultralytics (Ultralytics pulls "
            "in torchvision, which breaks a transformers install beside a CPU torch). Or pass "
            "--inert to read the checkpoint with ember's restricted reader, without torch"
        ) from None
    return torch, torch_safe_load


def from_torch_model(model, imgsz=DEFAULT_IMGSZ, source="model"):
    """(yolo.json object, arrays) of a live Ultralytics model object (an nn.Module)."""
    torch, _ = _ultralytics()
    task = task_of(type(model).__name__, source)
    arrays = {
        k: v.detach().float().cpu().numpy()
        for k, v in model.state_dict().items()
        if v.is_floating_point()
    }
    eps = {
        name: float(m.eps)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.BatchNorm2d)
    }
    stride = [int(s) for s in model.stride.tolist()]
    meta = yolo_format.make_meta(model.yaml, task, model.names, stride, imgsz, eps, source)
    return meta, arrays


def from_ultralytics(path):
    """(yolo.json object, arrays) of an Ultralytics .pt, read by Ultralytics' loader."""
    _, torch_safe_load = _ultralytics()
    try:
        ckpt, _ = torch_safe_load(path, safe_only=True)
    except Exception as exc:  # any failure of a foreign loader: name the file
        raise FormatError(
            f"{path}: Ultralytics cannot load it ({type(exc).__name__}: {exc})", path=path
        ) from None
    model = (ckpt.get("ema") or ckpt.get("model")) if isinstance(ckpt, dict) else None
    if model is None or not hasattr(model, "state_dict"):
        raise FormatError(f"{path}: not an Ultralytics checkpoint (no model object)", path=path)
    return from_torch_model(model.float(), _imgsz(ckpt.get("train_args")), os.path.basename(path))


# --- without torch: ember's inert reader --------------------------------------------------------
def _bn_eps(record, prefix=""):
    """`<module path>` -> eps of every pickled BatchNorm2d record under `record`."""
    out, st = {}, record.state
    for k, sub in (st.get("_modules") or {}).items():
        if sub is None or not isinstance(getattr(sub, "state", None), dict):
            continue
        name = f"{prefix}{k}"
        if sub.qualname == "BatchNorm2d":
            eps = sub.state.get("eps", 1e-5)
            if isinstance(eps, float) and 0 < eps < 1:
                out[name] = eps
        out.update(_bn_eps(sub, f"{name}."))
    return out


def from_inert_checkpoint(path):
    """(yolo.json object, arrays) of an Ultralytics .pt, read without torch and without
    running anything the pickle names."""
    from ..io.torch_checkpoint import InertObject, TorchCheckpoint

    with TorchCheckpoint(path, inert_objects=True) as ckpt:
        root = ckpt.root
        key = ("ema" if root.get("ema") is not None else "model") if isinstance(root, dict) else ""
        model = root.get(key) if key else None
        if not isinstance(model, InertObject) or not isinstance(model.state, dict):
            raise FormatError(
                f"{path}: not an Ultralytics checkpoint (no pickled 'model' object)", path=path
            )
        task = task_of(model.qualname, path)
        st = model.state
        stride = st.get("stride")
        try:
            stride = [int(s) for s in ckpt.ref_array(stride, "model.stride").tolist()]
        except FormatError:  # older checkpoints: the yaml alone gives the strides
            from . import yolo_config

            stride = list(yolo_config.parse(st.get("yaml"), source=path).strides)
        arrays = {}
        for name, info in ckpt.tensors.items():
            if name.startswith(f"{key}.") and info.dtype in ("F16", "F32", "F64", "BF16"):
                a = ckpt.array(name)
                if info.dtype == "BF16":
                    a = (a.astype(np.uint32) << 16).view(np.float32)
                arrays[name[len(key) + 1 :]] = a.astype(np.float32)
        names = st.get("names")
        if not isinstance(names, dict):
            raise FormatError(f"{path}: the model has no class names", path=path, field="names")
        meta = yolo_format.make_meta(
            st.get("yaml"),
            task,
            names,
            stride,
            _imgsz(root.get("train_args")),
            _bn_eps(model),
            os.path.basename(path),
        )
    return meta, arrays


def convert(path, out_dir, inert=False, force=False):
    """Convert the .pt at `path` into the model directory `out_dir`; returns its paths."""
    meta, arrays = from_inert_checkpoint(path) if inert else from_ultralytics(path)
    return yolo_format.write(out_dir, meta, arrays, force)


CONVERTED = "ember-yolo"  # convert_once's folder beside the .pt


def convert_once(path, inert=True):
    """The model directory `<folder of path>/ember-yolo`, converted from the .pt at `path`
    unless it is there already (a packaged model in ember's cache: that folder is ember's).
    Built under a temporary name and renamed, so it is whole or absent."""
    import shutil
    import tempfile

    dest = os.path.join(os.path.dirname(os.path.abspath(path)), CONVERTED)
    if not yolo_format.is_model(dest):
        if os.path.lexists(dest):  # not ours to replace (a rename would take an empty folder)
            raise FormatError(
                f"{dest} exists but is not a converted YOLO model; ember leaves it as it is "
                f"(move it away, or convert with: ember convert --from-ultralytics {path} DIR)"
            )
        staging = tempfile.mkdtemp(prefix=f".{CONVERTED}.", dir=os.path.dirname(dest))
        try:
            convert(path, staging, inert=inert)
            os.rename(staging, dest)
        finally:
            if os.path.isdir(staging):  # only our temporary folder, never dest
                shutil.rmtree(staging)
    return dest
