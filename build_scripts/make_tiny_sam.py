"""Make the segmentation page's bundled model: a small Segment Anything with random weights
(transformers' SamModel on a small config, seeded), so the page segments out of the box
with no downloaded weights and the repository holds no binary. Its masks follow the
points and the image but mean nothing: a real SAM (facebook/sam-vit-base, -large, -huge,
SlimSAM) is bundled instead when EMBER_SAM_MODEL names its directory (config.json and
model.safetensors, as the hub has them), or picked in the page.

    python build_scripts/make_tiny_sam.py [--out DIR]

Needs torch and transformers (the test/bench extras) at build time only; the page reads
the result with ember alone. build_web.py calls `bundled()`, which makes the model in
ember's cache once and again only when this recipe changes.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

import seeded_models  # beside this file: on sys.path when run or imported by build_web

NAME = "sam-tiny-random"
FILES = ["config.json", "model.safetensors"]
SEED = 0
USER_MODEL_ENV = "EMBER_SAM_MODEL"
# A 256 x 256 input (16 x 16 patches), two encoder layers (windows of 4, the second one
# global), narrow everywhere: SwiftShader embeds an image in about a second, yet every
# part of SAM runs (windowed and global attention, relative positions, the neck, the
# prompt encoder, the two-way mask decoder).
IMAGE_SIZE = 256
CONFIG = {
    "vision_config": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "mlp_dim": 128,
        "image_size": IMAGE_SIZE,
        "patch_size": 16,
        "window_size": 4,
        "global_attn_indexes": [1],
        "output_channels": 32,
        "num_pos_feats": 16,
    },
    "prompt_encoder_config": {
        "hidden_size": 32,
        "image_size": IMAGE_SIZE,
        "patch_size": 16,
        "mask_input_channels": 4,
    },
    "mask_decoder_config": {
        "hidden_size": 32,
        "mlp_dim": 64,
        "num_attention_heads": 2,
        "num_hidden_layers": 2,
        "iou_head_hidden_dim": 32,
    },
}


def recipe_hash():
    """What the files depend on: this script and the versions that write them (from the
    installed metadata: importing torch on every bundle check would cost seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256(Path(__file__).read_bytes())
    for name in ("transformers", "torch"):
        try:
            h.update(f"{name} {version(name)}\0".encode())
        except PackageNotFoundError:
            raise ImportError(f"{name} is not installed") from None
    return h.hexdigest()[:16]


def make(out):
    """Write the model's files into directory `out` (created). transformers' own init
    leaves the image encoder's output ~1e-10 wide and every mask the same, so the weights
    are redrawn (seeded) about 1 / sqrt(fan-in) wide, norm gains near 1, and the Fourier
    matrix of the positional encoding at segment-anything's own scale (std 1)."""
    import torch
    from transformers import SamConfig, SamModel

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    model = SamModel(SamConfig(**CONFIG)).eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("positional_embedding"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[0] if "upscale_conv" in name else p[0].numel()
                p.copy_(2.0 * fan_in**-0.5 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(str(out), safe_serialization=True)
    return out


def is_sam_dir(path):
    """Whether `path` holds a SAM in transformers' layout (config.json says model_type sam)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == "sam"


def user_model(path):
    """(name, dir, files) of the SAM directory a user named in EMBER_SAM_MODEL, checked
    before anything is built: a clear SystemExit saying what is wrong with it otherwise."""
    src = Path(path).expanduser()
    where = f"{USER_MODEL_ENV}={path}"
    if not src.is_dir():
        raise SystemExit(f"build_web: {where}: not a directory")
    if not (src / "config.json").is_file() or not (src / "model.safetensors").is_file():
        raise SystemExit(
            f"build_web: {where}: needs config.json and model.safetensors (a Hugging Face "
            "SAM directory such as facebook/sam-vit-base); found "
            f"{sorted(p.name for p in src.iterdir())[:10]}"
        )
    if not is_sam_dir(src):
        raise SystemExit(f'build_web: {where}: config.json is not a SAM\'s (model_type "sam")')
    return src.resolve().name, src, list(FILES)


def bundled(root):
    """(name, dir, files) of the SAM the bundle ships: the user's (EMBER_SAM_MODEL) when
    set, else the tiny random one made under `root`; None when neither can be had."""
    named = os.environ.get(USER_MODEL_ENV, "").strip()
    if named:
        return user_model(named)
    src = ensure(root)
    return None if src is None else (NAME, src, list(FILES))


_said_missing = []


def ensure(root):
    """The model's directory under `root`, made when missing or made by an older recipe;
    None (with a note) when torch/transformers are not installed."""
    return seeded_models.ensure_made(
        root, "make_tiny_sam", NAME, FILES, recipe_hash, make, _said_missing
    )


def main(argv=None):
    return seeded_models.main(argv, __doc__, FILES, make, ensure)


if __name__ == "__main__":
    sys.exit(main())
