"""transformers' SamModel (a tiny random config) behind the API of ember's SamModel
(`image_embeddings`, `predict_masks` on ember tensors), so ember's SAM pre- and
post-processing and automatic mask generation are checked against transformers' own
on the same model outputs."""

import numpy as np

import ember
from helpers import require


def tiny_sam(seed=0, scale=2.0, pe_scale=8.0):
    """A random tiny SamModel whose masks are worth comparing (a fresh one gives logits
    ~1e-6, the same mask for every point): every weight redrawn with std `scale` /
    sqrt(fan-in), biases 0, norm gains near 1, and the Fourier matrix of the positional
    encoding with std `pe_scale` (SAM's own is wide too: it is what lets a point's mask
    depend on where the point is)."""
    torch = require("torch")
    transformers = require("transformers")
    cfg = transformers.SamConfig(
        vision_config=dict(
            hidden_size=32,
            output_channels=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            window_size=8,
            global_attn_indexes=[],
            mlp_dim=64,
            num_pos_feats=16,
        ),
        prompt_encoder_config=dict(hidden_size=32, mask_input_channels=4),
        mask_decoder_config=dict(
            hidden_size=32,
            mlp_dim=64,
            num_attention_heads=2,
            iou_head_hidden_dim=32,
        ),
    )
    torch.manual_seed(seed)
    model = transformers.SamModel(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p[0].numel() if p.ndim > 1 else 1
            std = scale / fan_in**0.5
            if name.endswith("positional_embedding"):
                p.copy_(pe_scale * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.zero_()
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(std * torch.randn(p.shape, generator=gen))
    return model


class TorchSam:
    """ember.models.sam.SamModel's API over a transformers SamModel, on the CPU."""

    def __init__(self, model):
        self.model = model
        self.device = ember.Device.cpu()
        self.calls = 0

    def image_embeddings(self, pixel_values):
        torch = require("torch")
        with torch.no_grad():
            emb = self.model.get_image_embeddings(torch.from_numpy(pixel_values.numpy().copy()))
        return ember.tensor(emb.numpy())

    def predict_masks(
        self,
        image_embeddings,
        input_points=None,
        input_labels=None,
        input_boxes=None,
        multimask_output=True,
    ):
        torch = require("torch")
        self.calls += 1

        def t(x, dtype):
            if x is None:
                return None
            return torch.tensor(np.asarray(x.numpy() if hasattr(x, "numpy") else x), dtype=dtype)

        with torch.no_grad():
            out = self.model(
                image_embeddings=t(image_embeddings, torch.float32),
                input_points=t(input_points, torch.float32),
                input_labels=t(input_labels, torch.int64),
                input_boxes=t(input_boxes, torch.float32),
                multimask_output=multimask_output,
            )
        return ember.tensor(out.pred_masks.numpy()), ember.tensor(out.iou_scores.numpy())


RADII, HEIGHT = (5.0, 10.0, 20.0), 30.0  # the bumps' radii (low-res pixels) and height


def point_bumps(points, n_masks, side):
    """(B, P, k, side, side) float32 bumps around each prompt's first point of
    `points` (B, P, N, 2) in input pixels: HEIGHT * (1 - d^2 / r^2) with r = RADII[i]
    for mask i of three (RADII[1] for a single mask)."""
    points = np.asarray(points, dtype=np.float32)
    scale = np.float32(side / 1024)  # the low-res mask covers the 1024 x 1024 input
    px = points[:, :, 0, 0][..., None, None, None] * scale
    py = points[:, :, 0, 1][..., None, None, None] * scale
    grid = np.arange(side, dtype=np.float32) + np.float32(0.5)
    d2 = (grid[None, :] - px) ** 2 + (grid[:, None] - py) ** 2
    r = np.array(RADII if n_masks == 3 else RADII[1:2], np.float32)[:, None, None]
    return (np.float32(HEIGHT) * (1 - d2 / r**2)).astype(np.float32)


def squash(iou):
    """IoU predictions squashed into (0, 1), a trained model's range."""
    return 1 / (1 + np.exp(-np.asarray(iou, np.float64) / 4))


def add_point_bumps(model):
    """Add point_bumps to the model's mask logits and squash its IoU predictions, as a
    forward hook, so the same model seen by transformers' pipeline and by ember gives
    compact masks whose boxes differ from point to point: a random model's masks cover
    the whole image, which leaves box NMS and the crop-edge filter nothing to decide."""
    torch = require("torch")

    def hook(module, args, kwargs, output):
        points = kwargs.get("input_points")
        if points is None:
            return output
        masks = output["pred_masks"]
        bumps = point_bumps(points.numpy(), masks.shape[2], masks.shape[-1])
        output["pred_masks"] = masks + torch.from_numpy(bumps)
        output["iou_scores"] = torch.from_numpy(squash(output["iou_scores"].numpy())).float()
        return output

    model.register_forward_hook(hook, with_kwargs=True)
    return model


class EmberBumps:
    """ember's SamModel with the same bumps and squashed IoU as add_point_bumps."""

    def __init__(self, model):
        self.model, self.device = model, model.device

    def image_embeddings(self, pixel_values):
        return self.model.image_embeddings(pixel_values)

    def predict_masks(self, image_embeddings, input_points, input_labels, multimask_output):
        low, iou = self.model.predict_masks(
            image_embeddings,
            input_points=input_points,
            input_labels=input_labels,
            multimask_output=multimask_output,
        )
        low = low.numpy()
        bumped = low + point_bumps(input_points.numpy(), low.shape[2], low.shape[-1])
        return ember.tensor(bumped), ember.tensor(squash(iou.numpy()).astype(np.float32))


def cache_embeddings(model):
    """Memoize the model's get_image_embeddings by the pixel values' bytes: ember's
    preprocessing gives SamProcessor's pixel values bit for bit, so the reference and
    ember embed each crop once between them (the test's time goes to the decoder)."""
    torch = require("torch")
    inner, seen = model.get_image_embeddings, {}

    def cached(pixel_values, **kwargs):
        key = pixel_values.to(torch.float32).numpy().tobytes()
        if key not in seen:
            seen[key] = inner(pixel_values, **kwargs)
        return seen[key]

    model.get_image_embeddings = cached
    return model


def run_mask_generation(model, image, **kwargs):
    """transformers' mask-generation pipeline on `model` (with the Pillow image processor)
    over an (H, W, 3) uint8 image: its output dict. torchvision, which the pipeline's final
    NMS step imports, cannot be installed beside the CPU torch here (NOTES.md): for that
    call only, torchvision.ops.boxes.batched_nms is a plain greedy NMS written below (by
    score, dropping IoU > threshold); every other step is transformers' own."""
    torch = require("torch")
    transformers = require("transformers")
    import importlib.machinery
    import sys
    import types

    from PIL import Image
    from transformers.models.sam import image_processing_pil_sam

    def batched_nms(boxes, scores, idxs, iou_threshold):
        b = boxes.double()
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        order = torch.argsort(scores, descending=True, stable=True).tolist()
        keep = []
        while order:
            i, rest = order[0], order[1:]
            keep.append(i)
            lt = torch.maximum(b[i, :2], b[rest, :2])
            rb = torch.minimum(b[i, 2:], b[rest, 2:])
            inter = (rb - lt).clamp(min=0).prod(-1)
            iou = inter / (area[i] + area[rest] - inter)
            order = [j for j, v in zip(rest, iou.tolist(), strict=True) if not v > iou_threshold]
        return torch.tensor(keep, dtype=torch.int64)

    processor = transformers.SamImageProcessorPil()
    # the method's torchvision-availability check would refuse; its body is the module function
    processor.post_process_for_mask_generation = (
        image_processing_pil_sam._post_process_for_mask_generation
    )
    pipe = transformers.pipelines.MaskGenerationPipeline(model=model, image_processor=processor)
    try:
        import torchvision.ops.boxes  # noqa: F401  (a working one is the reference itself)

        return pipe(Image.fromarray(image), **kwargs)
    except ImportError:
        pass
    names = ("torchvision", "torchvision.ops", "torchvision.ops.boxes")
    mods = [types.ModuleType(n) for n in names]
    for m in mods:
        m.__spec__ = importlib.machinery.ModuleSpec(m.__name__, None)
    mods[0].ops, mods[1].boxes, mods[2].batched_nms = mods[1], mods[2], batched_nms
    sys.modules.update(dict(zip(names, mods, strict=True)))
    try:
        return pipe(Image.fromarray(image), **kwargs)
    finally:
        for n in names:
            del sys.modules[n]
