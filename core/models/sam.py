"""Segment Anything (SAM) on any ember device, in transformers' SamModel layout.

    model = SamModel.from_pretrained("sam-vit-base", device=dev)   # or a .safetensors file
    emb = model.image_embeddings(pixel_values)                     # once per image
    masks, iou = model.predict_masks(emb, input_points=[[[[500, 375]]]], input_labels=[[[1]]])

`image_embeddings` runs the ViT image encoder (sam_vision) once; `predict_masks` runs the
prompt encoder (sam_prompt) and the mask decoder (sam_mask_decoder) on those embeddings
for any number of prompts, returning what transformers' SamModel returns as pred_masks
(low-resolution mask logits [B, P, 3 or 1, 256, 256]) and iou_scores ([B, P, 3 or 1]).
Prompts are in the pixel coordinates of the resized image_size x image_size input.

Weights load from a Hugging Face directory (config.json + model.safetensors in
transformers' names) or from a safetensors file in the original segment-anything names
(a converted sam_vit_b_01ec64.pth), whose dimensions are read from the tensor shapes.
"""

import os

from ..errors import FormatError, InvalidArgument, ShapeMismatch, fmt_shape
from ..io.files import read_json
from ..nn import Module, VarBuilder
from ..nn.sources import DictSource, SafetensorsSource, source_for_dir
from ..tensor import Tensor, tensor
from . import sam_config, sam_names
from .sam_mask_decoder import PreparedImage, SamMaskDecoder
from .sam_prompt import PADDING_LABEL, FourierEmbedding, SamPromptEncoder
from .sam_vision import SamVisionEncoder

# transformers keeps the Fourier matrix twice (tied); files saved before the tie hold both.
_FOURIER = "shared_image_embedding.positional_embedding"
_FOURIER_TIED = "prompt_encoder.shared_embedding.positional_embedding"
# segment-anything's normalization constants, which some conversions store as tensors:
# preprocessing (the processor's), not weights
_PREPROCESSING = ("pixel_mean", "pixel_std")


class SamModel(Module):
    def __init__(self, cfg, vb):
        super().__init__()
        self.cfg = cfg
        v = cfg.vision
        name = _FOURIER if vb.contains(_FOURIER) else _FOURIER_TIED
        self.shared_image_embedding = FourierEmbedding(vb.get((2, v.num_pos_feats), name))
        self.vision_encoder = SamVisionEncoder(v, vb.pp("vision_encoder"))
        self.prompt_encoder = SamPromptEncoder(
            cfg.prompt, vb.pp("prompt_encoder"), self.shared_image_embedding
        )
        self.mask_decoder = SamMaskDecoder(cfg.decoder, vb.pp("mask_decoder"))
        self._image_pe = self._key_pe = None

    def _reset_derived(self):
        self._image_pe = self._key_pe = None

    def image_positional_embeddings(self):
        """The Fourier embedding of every image-embedding cell [1, 256, 64, 64]: it
        depends on the weights only, so it is made once."""
        if self._image_pe is None:
            size = self.cfg.prompt.image_embedding_size
            self._image_pe = self.shared_image_embedding.grid(size)
        return self._image_pe

    def _decoder_positional_embeddings(self):
        """image_positional_embeddings as the mask decoder adds them, a row per cell
        [1, 64 * 64, 256], contiguous: made once, like them."""
        if self._key_pe is None:
            pe = self.image_positional_embeddings()
            self._key_pe = pe.reshape(*pe.shape[:2], -1).transpose(1, 2).contiguous()
        return self._key_pe

    @property
    def device(self):
        return self.mask_decoder.iou_token.device

    # --- loading -------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path, device=None, dtype="f32"):
        """A SamModel from a Hugging Face model directory or a .safetensors file (the
        original segment-anything names, or transformers' names beside a config.json)."""
        path = os.path.expanduser(os.fspath(path))
        cfg_path = path
        if os.path.isdir(path):
            cfg_path = os.path.join(path, "config.json")
            if not os.path.isfile(cfg_path):
                raise FormatError(
                    f"{path}: no config.json (a Hugging Face SAM directory has config.json "
                    "and model.safetensors)",
                    path=path,
                    field="config.json",
                )
            inner = source_for_dir(path)
            config_json = read_json(cfg_path, "SAM config")
        elif os.path.isfile(path):
            inner = SafetensorsSource(path)
            beside = os.path.join(os.path.dirname(path), "config.json")
            config_json = None
            if not sam_names.is_original(inner.keys()) and os.path.isfile(beside):
                config_json, cfg_path = read_json(beside, "SAM config"), beside
        else:
            raise FormatError(f"{path}: no such file or directory", path=path, field="path")
        return cls._from_source(inner, config_json, cfg_path, path, dtype, device)

    @classmethod
    def from_tensors(cls, tensors, config_json=None, device=None, dtype="f32", label="tensors"):
        """A SamModel from a dict of name -> Tensor already loaded (a page's safetensors
        in a JS buffer): original segment-anything names, or transformers' names with
        `config_json` (the parsed config.json) beside them. `label` names them in errors."""
        inner = DictSource(tensors, label)
        return cls._from_source(inner, config_json, label, label, dtype, device)

    @classmethod
    def _from_source(cls, inner, config_json, cfg_path, path, dtype, device):
        if sam_names.is_original(inner.keys()):
            source = sam_names.TrackedSource(inner, sam_names.hf_names(inner.keys()))
            names = source.keys()  # a weight source declares keys(), not iteration
            cfg = sam_config.from_shapes({k: source.shape(k) for k in names}, path)
        elif config_json is not None:
            cfg = sam_config.from_hf(config_json, cfg_path)
            source = sam_names.TrackedSource(inner)
        else:
            raise FormatError(
                f"{path}: neither a segment-anything checkpoint (no image_encoder.* tensors) "
                "nor transformers' SAM weights with a config.json beside them",
                path=path,
                field="tensors",
            )
        if "vision_encoder.patch_embed.projection.weight" not in source:
            raise FormatError(
                f"{path}: has no vision_encoder.patch_embed.projection.weight: not the "
                "weights of a Segment Anything model",
                path=path,
                tensor="vision_encoder.patch_embed.projection.weight",
            )
        vb = VarBuilder(source, dtype=dtype, device=device)
        model = cls(cfg, vb)
        source.refuse_unused(allowed=(_FOURIER, _FOURIER_TIED, *_PREPROCESSING))
        model.path = path
        return model

    # --- inference -------------------------------------------------------------------------------
    def image_embeddings(self, pixel_values):
        """pixel_values [B, 3, image_size, image_size] (normalized and padded, as
        SamProcessor makes them) -> image embeddings [B, 256, 64, 64] (for ViT-B..H)."""
        return self.vision_encoder(self._as_tensor(pixel_values, "pixel_values"))

    def prepare_image(self, image_embeddings):
        """image_embeddings (from image_embeddings) as a PreparedImage: given to
        predict_masks in their place, the mask decoder's work that depends on the image
        alone is done once for all of its prompts without input_masks, not per call. It is
        done here, with the image's other work (and again at a prompt after load or to)."""
        emb = self._as_tensor(image_embeddings, "image_embeddings")
        prepared = PreparedImage(emb)
        _, no_mask = self.prompt_encoder()
        self.mask_decoder.prepare(
            prepared,
            emb,
            self._decoder_positional_embeddings(),
            no_mask,
            self.prompt_encoder.no_mask_embed,
        )
        return prepared

    def predict_masks(
        self,
        image_embeddings,
        input_points=None,
        input_labels=None,
        input_boxes=None,
        multimask_output=True,
        input_masks=None,
    ):
        """(low-res mask logits [B, P, k, 4 S, 4 S], IoU predictions [B, P, k]) for the
        prompts, k = 3 with multimask_output else 1, as transformers' SamModel returns
        pred_masks and iou_scores.

        input_points [B, P, N, 2] (x, y), input_labels [B, P, N] (1 positive, 0 negative,
        -1 background, -10 padding; all 1 when omitted), input_boxes [B, P, 4] (x0, y0,
        x1, y1), all in input pixels; input_masks [B, 1, 4 S, 4 S] mask logits (e.g. an
        earlier pred_masks). Points and boxes together must have the same P.
        image_embeddings may be a PreparedImage of them (prepare_image)."""
        cfg = self.cfg.prompt
        prepared = image_embeddings if isinstance(image_embeddings, PreparedImage) else None
        if prepared is not None:
            image_embeddings = prepared.embeddings
        emb = self._as_tensor(image_embeddings, "image_embeddings")
        s = cfg.image_embedding_size
        want = (cfg.hidden_size, s, s)
        if emb.ndim != 4 or tuple(emb.shape[1:]) != want:
            raise ShapeMismatch(
                f"SamModel.predict_masks: image_embeddings {fmt_shape(emb.shape)} must be "
                f"[batch, {want[0]}, {want[1]}, {want[2]}] (from model.image_embeddings)",
                op="sam.predict_masks",
                shapes=(emb.shape,),
            )
        b = emb.shape[0]
        points, labels = self._points(input_points, input_labels, b)
        boxes = self._boxes(input_boxes, b)
        self._check_inside(input_points, labels, input_boxes)
        if points is not None and boxes is not None and points.shape[1] != boxes.shape[1]:
            raise ShapeMismatch(
                f"SamModel.predict_masks: {points.shape[1]} point sets and "
                f"{boxes.shape[1]} boxes per image: give one box per point set",
                op="sam.predict_masks",
                shapes=(points.shape, boxes.shape),
            )
        masks = None
        if input_masks is not None:
            masks = self._as_tensor(input_masks, "input_masks")
            if masks.ndim != 4 or tuple(masks.shape[1:]) != (1, 4 * s, 4 * s):
                raise ShapeMismatch(
                    f"SamModel.predict_masks: input_masks {fmt_shape(masks.shape)} must be "
                    f"[batch, 1, {4 * s}, {4 * s}]",
                    op="sam.predict_masks",
                    shapes=(masks.shape,),
                )
        sparse, dense = self.prompt_encoder(points, labels, boxes, masks)
        pe = self._decoder_positional_embeddings()
        state = None
        if prepared is not None and masks is None:
            no_mask = self.prompt_encoder.no_mask_embed
            state = self.mask_decoder.prepare(prepared, emb, pe, dense, no_mask)
        return self.mask_decoder(emb, pe, sparse, dense, bool(multimask_output), state)

    # --- argument checks -------------------------------------------------------------------------
    def _as_tensor(self, value, name):
        if isinstance(value, Tensor):
            t = value if value.device == self.device else value.to(self.device)
        else:
            try:
                t = tensor(value, dtype="f32", device=self.device)
            except (TypeError, ValueError) as exc:
                raise InvalidArgument(
                    f"SamModel: {name} must be a Tensor or nested lists of numbers ({exc})",
                    op="sam",
                    argument=name,
                ) from None
        return t if t.dtype.name == "f32" else t.float()

    def _points(self, points, labels, batch):
        if points is None:
            if labels is not None:
                raise InvalidArgument(
                    "SamModel.predict_masks: input_labels given without input_points",
                    op="sam.predict_masks",
                    argument="input_labels",
                )
            return None, None
        points = self._as_tensor(points, "input_points")
        if (
            points.ndim != 4
            or points.shape[-1] != 2
            or points.shape[0] != batch
            or 0 in points.shape
        ):
            raise ShapeMismatch(
                f"SamModel.predict_masks: input_points {fmt_shape(points.shape)} must be "
                f"[{batch}, point sets, points, 2] (x, y) for {batch} image embeddings",
                op="sam.predict_masks",
                argument="input_points",
                shapes=(points.shape,),
            )
        if labels is None:
            return points, [[[1] * points.shape[2]] * points.shape[1]] * batch
        values = labels.tolist() if hasattr(labels, "tolist") else labels
        shape = points.shape[:3]
        ok = (
            isinstance(values, (list, tuple))
            and len(values) == shape[0]
            and all(
                isinstance(row, (list, tuple))
                and len(row) == shape[1]
                and all(isinstance(r, (list, tuple)) and len(r) == shape[2] for r in row)
                for row in values
            )
        )
        flat = [v for row in values for r in row for v in r] if ok else []
        if not ok or not all(isinstance(v, (int, float)) and float(v).is_integer() for v in flat):
            raise ShapeMismatch(
                f"SamModel.predict_masks: input_labels must be integers shaped "
                f"[{shape[0]}, {shape[1]}, {shape[2]}] like input_points {fmt_shape(points.shape)}",
                op="sam.predict_masks",
                argument="input_labels",
            )
        bad = [int(v) for v in flat if int(v) not in (-1, 0, 1, PADDING_LABEL)]
        if bad:
            raise InvalidArgument(
                f"SamModel.predict_masks: input_labels holds {bad[0]}; labels are 1 "
                f"(positive), 0 (negative), -1 (background) and {PADDING_LABEL} (padding)",
                op="sam.predict_masks",
                argument="input_labels",
                value=bad[0],
            )
        return points, [[[int(v) for v in r] for r in row] for row in values]

    def _check_inside(self, points, labels, boxes):
        """Coordinates given as host data (lists, arrays) are checked here: inside the
        image_size input (padding points, label -10, excepted) and boxes with x0 <= x1,
        y0 <= y1. Tensors are taken as the processor made them (reading a device tensor
        back would stall a page)."""
        size = float(self.cfg.prompt.image_size)

        def host(value):
            if value is None or isinstance(value, Tensor):
                return None
            return value.tolist() if hasattr(value, "tolist") else value

        def inside(c):
            return 0.0 <= float(c) <= size  # False for NaN

        pts = host(points)
        if pts is not None:
            for i, per_image in enumerate(pts):
                for j, row in enumerate(per_image):
                    for n, (x, y) in enumerate(row):
                        if labels[i][j][n] != PADDING_LABEL and not (inside(x) and inside(y)):
                            raise InvalidArgument(
                                f"SamModel.predict_masks: input_points[{i}][{j}][{n}] = "
                                f"({x}, {y}) is outside the {size:g} x {size:g} input",
                                op="sam.predict_masks",
                                argument="input_points",
                                value=(x, y),
                            )
        bxs = host(boxes)
        for i, per_image in enumerate(bxs or ()):
            for j, (x0, y0, x1, y1) in enumerate(per_image):
                if not all(inside(c) for c in (x0, y0, x1, y1)) or x1 < x0 or y1 < y0:
                    raise InvalidArgument(
                        f"SamModel.predict_masks: input_boxes[{i}][{j}] = "
                        f"({x0}, {y0}, {x1}, {y1}) must be x0 <= x1, y0 <= y1 inside the "
                        f"{size:g} x {size:g} input",
                        op="sam.predict_masks",
                        argument="input_boxes",
                        value=(x0, y0, x1, y1),
                    )

    def _boxes(self, boxes, batch):
        if boxes is None:
            return None
        boxes = self._as_tensor(boxes, "input_boxes")
        if boxes.ndim != 3 or boxes.shape[-1] != 4 or boxes.shape[0] != batch or 0 in boxes.shape:
            raise ShapeMismatch(
                f"SamModel.predict_masks: input_boxes {fmt_shape(boxes.shape)} must be "
                f"[{batch}, boxes, 4] (x0, y0, x1, y1) for {batch} image embeddings",
                op="sam.predict_masks",
                argument="input_boxes",
                shapes=(boxes.shape,),
            )
        return boxes
