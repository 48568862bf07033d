"""Tensor names of Segment Anything checkpoints: the original segment-anything ones
(`image_encoder.blocks.0.attn.qkv.weight`, ...) mapped onto transformers' SamModel names,
and a weight source that serves a file under the names the model reads and records which
tensors were read, so a checkpoint holding tensors SAM does not use is refused.
"""

import re

from ..errors import FormatError

# Original names -> transformers names, applied in order (a name's prefix, then parts).
_PREFIXES = (
    ("image_encoder.", "vision_encoder."),
    (
        "prompt_encoder.pe_layer.positional_encoding_gaussian_matrix",
        "shared_image_embedding.positional_embedding",
    ),
)
_PARTS = (
    (r"^vision_encoder\.patch_embed\.proj\.", "vision_encoder.patch_embed.projection."),
    (r"^vision_encoder\.blocks\.", "vision_encoder.layers."),
    (r"\.norm(\d)\.", r".layer_norm\1."),
    (r"^vision_encoder\.neck\.0\.", "vision_encoder.neck.conv1."),
    (r"^vision_encoder\.neck\.1\.", "vision_encoder.neck.layer_norm1."),
    (r"^vision_encoder\.neck\.2\.", "vision_encoder.neck.conv2."),
    (r"^vision_encoder\.neck\.3\.", "vision_encoder.neck.layer_norm2."),
    (r"^prompt_encoder\.point_embeddings\.", "prompt_encoder.point_embed."),
    (r"^prompt_encoder\.mask_downscaling\.0\.", "prompt_encoder.mask_embed.conv1."),
    (r"^prompt_encoder\.mask_downscaling\.1\.", "prompt_encoder.mask_embed.layer_norm1."),
    (r"^prompt_encoder\.mask_downscaling\.3\.", "prompt_encoder.mask_embed.conv2."),
    (r"^prompt_encoder\.mask_downscaling\.4\.", "prompt_encoder.mask_embed.layer_norm2."),
    (r"^prompt_encoder\.mask_downscaling\.6\.", "prompt_encoder.mask_embed.conv3."),
    (
        r"^mask_decoder\.transformer\.norm_final_attn\.",
        "mask_decoder.transformer.layer_norm_final_attn.",
    ),
    (r"^mask_decoder\.output_upscaling\.0\.", "mask_decoder.upscale_conv1."),
    (r"^mask_decoder\.output_upscaling\.1\.", "mask_decoder.upscale_layer_norm."),
    (r"^mask_decoder\.output_upscaling\.3\.", "mask_decoder.upscale_conv2."),
)
# The feed-forward heads number their Linear layers 0..depth-1 in the original;
# transformers calls the first proj_in, the last proj_out and the ones between layers.j-1.
_FFN = re.compile(
    r"^(mask_decoder\.(?:output_hypernetworks_mlps\.\d+|iou_prediction_head))"
    r"\.layers\.(\d+)\.(weight|bias)$"
)


def is_original(names):
    """Whether `names` are the original segment-anything checkpoint's."""
    return "image_encoder.patch_embed.proj.weight" in names


def hf_names(names):
    """{transformers name: original name} for the names of an original checkpoint."""
    renamed = {}
    depth: dict[str, int] = {}
    for name in names:
        m = _FFN.match(name)
        if m:
            depth[m.group(1)] = max(depth.get(m.group(1), 0), int(m.group(2)) + 1)
    for name in names:
        new = name
        for old, repl in _PREFIXES:
            if new.startswith(old):
                new = repl + new[len(old) :]
        for pattern, repl in _PARTS:
            new = re.sub(pattern, repl, new)
        m = _FFN.match(new)
        if m:
            head, j, kind = m.group(1), int(m.group(2)), m.group(3)
            last = depth[head] - 1
            part = "proj_in" if j == 0 else "proj_out" if j == last else f"layers.{j - 1}"
            new = f"{head}.{part}.{kind}"
        renamed[new] = name
    return renamed


class TrackedSource:
    """A VarBuilder source over `inner` under other names (`names`: model name -> stored
    name, or None for the same names), recording every name loaded."""

    def __init__(self, inner, names=None):
        self.inner = inner
        stored = inner.keys()  # a weight source declares keys(), not iteration
        self.names = names if names is not None else {k: k for k in stored}
        self.used = set()

    def keys(self):
        return self.names.keys()

    def __contains__(self, name):
        return name in self.names

    def shape(self, name):
        return self.inner.shape(self.names[name])

    def where(self, name=None):
        return self.inner.where(self.names.get(name) if name is not None else None)

    def load(self, name, device=None, dtype=None):
        self.used.add(name)
        return self.inner.load(self.names[name], device=device, dtype=dtype)

    def refuse_unused(self, allowed=()):
        """FormatError naming a tensor the model did not read (another architecture or
        variant: SAM-HQ, SAM 2, a classifier head...)."""
        unused = sorted(set(self.names) - self.used - set(allowed))
        if unused:
            stored = self.names[unused[0]]
            raise FormatError(
                f"{self.inner.where(stored)}: {len(unused)} tensors a Segment Anything "
                f"model does not use, e.g. {stored} (a checkpoint of another architecture?)",
                path=self.inner.where(stored),
                tensor=stored,
            )
