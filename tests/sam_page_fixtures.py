"""A tiny random Segment Anything model saved as a Hugging Face directory, a test image
and native ember's masks for it, for the segmentation page's test."""
import numpy as np

from helpers import require

IMAGE_SIZE = 64   # the model's input: small, so SwiftShader encodes it in moments
MEAN = np.array((0.485, 0.456, 0.406), np.float32)
STD = np.array((0.229, 0.224, 0.225), np.float32)


def save_tiny_sam(path, seed=3, pe_std=1.0):
    """transformers' SamModel on a tiny config (a 4 x 4 grid of patches, windows of 2,
    one global layer), its weights redrawn wide enough that masks depend on the image and
    on the points (the default init gives logits ~1e-6), saved to `path`. The Fourier
    matrix of the positional encoding keeps segment-anything's own scale (std 1)."""
    torch = require("torch")
    transformers = require("transformers")
    cfg = transformers.SamConfig(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           image_size=IMAGE_SIZE, patch_size=16, window_size=2,
                           global_attn_indexes=[1], output_channels=16, num_pos_feats=8,
                           mlp_dim=48),
        prompt_encoder_config=dict(hidden_size=16, image_size=IMAGE_SIZE, patch_size=16,
                                   mask_input_channels=8),
        mask_decoder_config=dict(hidden_size=16, mlp_dim=24, num_attention_heads=2,
                                 num_hidden_layers=2, iou_head_hidden_dim=20),
    )
    torch.manual_seed(seed)
    model = transformers.SamModel(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("positional_embedding"):
                p.copy_(pe_std * torch.randn(p.shape, generator=gen))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[0] if "upscale_conv" in name else p[0].numel()
                p.copy_(2.0 * fan_in ** -0.5 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(path)
    return path


def sample_image(height=90, width=120, seed=5):
    """An RGB uint8 image with structure (a bright disc, a gradient) and some noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    disc = ((xx - 0.35 * width) ** 2 + (yy - 0.45 * height) ** 2) < (0.22 * height) ** 2
    img = np.stack([40 + 1.2 * xx, 60 + yy, np.full_like(xx, 90.0)], -1)
    img[disc] = (230, 200, 60)
    img += rng.normal(0, 12, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def native_segment(model, rgb, points):
    """(masks [k, H, W] bool, IoU scores [k], upsampled logits [k, H, W]) from native
    ember's SamModel for `points` ([[x, y, label], ...] in the image's pixels), with the
    image and masks processed as SamProcessor does at this model's input size: Pillow's
    bilinear resize of the long side, / 255, ImageNet normalization, zero padding; the
    low-resolution logits upsampled with torch's bilinear interpolate to the input,
    cropped, upsampled to the image and thresholded at 0."""
    import ember
    pil = require("PIL.Image")
    torch = require("torch")
    size = model.cfg.vision.image_size
    h, w = rgb.shape[:2]
    scale = size / max(h, w)
    rh, rw = int(h * scale + 0.5), int(w * scale + 0.5)
    resized = np.asarray(pil.fromarray(rgb).resize((rw, rh), pil.BILINEAR))
    x = (resized.astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - MEAN) / STD
    pixels = np.zeros((1, 3, size, size), np.float32)
    pixels[0, :, :rh, :rw] = x.transpose(2, 0, 1)
    embeddings = model.image_embeddings(ember.tensor(pixels, device=model.device))
    scaled = [[[[px * (rw / w), py * (rh / h)] for px, py, _ in points]]]
    labels = [[[int(label) for *_, label in points]]]
    low, iou = model.predict_masks(embeddings, input_points=scaled, input_labels=labels,
                                   multimask_output=True)
    F = torch.nn.functional
    up = F.interpolate(torch.from_numpy(low.numpy()[0]), (size, size), mode="bilinear",
                       align_corners=False)[..., :rh, :rw]
    logits = F.interpolate(up, (h, w), mode="bilinear", align_corners=False)[0].numpy()
    return logits > 0, iou.numpy()[0, 0], logits
