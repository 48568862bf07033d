"""Segment Anything's dimensions, read and validated from a transformers SamConfig
config.json (vision_config, prompt_encoder_config, mask_decoder_config), or inferred
from the tensor shapes of an original segment-anything checkpoint (which has no config).

Every field is checked for type and range, and the three parts are checked against each
other (the prompt encoder's width is the neck's output and twice the positional
features; its embedding grid is the encoder's patch grid), so a wrong config fails here,
naming the field, instead of as a shape error inside a layer.
"""

from dataclasses import dataclass

from ..errors import FormatError
from . import config_fields as cf

# The activations SAM configs name (transformers' ACT2FN keys; the exact GELU is "gelu").
ACTIVATIONS = ("gelu", "relu", "gelu_new", "gelu_pytorch_tanh", "quick_gelu", "silu")


@dataclass(frozen=True)
class SamVisionConfig:
    hidden_size: int = 768
    output_channels: int = 256
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_channels: int = 3
    image_size: int = 1024
    patch_size: int = 16
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True
    mlp_dim: int = 3072
    use_abs_pos: bool = True
    use_rel_pos: bool = True
    window_size: int = 14
    global_attn_indexes: tuple = (2, 5, 8, 11)
    num_pos_feats: int = 128

    @property
    def grid(self):
        """Patches per side: the image embedding is grid x grid."""
        return self.image_size // self.patch_size

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class SamPromptEncoderConfig:
    hidden_size: int = 256
    image_size: int = 1024
    patch_size: int = 16
    mask_input_channels: int = 16
    num_point_embeddings: int = 4
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6

    @property
    def image_embedding_size(self):
        return self.image_size // self.patch_size


@dataclass(frozen=True)
class SamMaskDecoderConfig:
    hidden_size: int = 256
    hidden_act: str = "relu"
    mlp_dim: int = 2048
    num_hidden_layers: int = 2
    num_attention_heads: int = 8
    attention_downsample_rate: int = 2
    num_multimask_outputs: int = 3
    iou_head_depth: int = 3
    iou_head_hidden_dim: int = 256
    layer_norm_eps: float = 1e-6


@dataclass(frozen=True)
class SamConfig:
    vision: SamVisionConfig
    prompt: SamPromptEncoderConfig
    decoder: SamMaskDecoderConfig
    source: str = ""

    def check(self):
        v, p, d, src = self.vision, self.prompt, self.decoder, self.source

        def bad(field, why, value):
            raise cf.fail(src, field, why, value)

        if v.hidden_size % v.num_attention_heads:
            bad(
                "vision_config.num_attention_heads",
                f"a divisor of hidden_size {v.hidden_size}",
                v.num_attention_heads,
            )
        if v.image_size % v.patch_size:
            bad("vision_config.patch_size", f"a divisor of image_size {v.image_size}", v.patch_size)
        for i in v.global_attn_indexes:
            if i >= v.num_hidden_layers:
                bad(
                    "vision_config.global_attn_indexes",
                    f"layer indices below num_hidden_layers {v.num_hidden_layers}",
                    list(v.global_attn_indexes),
                )
        if p.hidden_size != v.output_channels:
            bad(
                "prompt_encoder_config.hidden_size",
                f"vision_config.output_channels ({v.output_channels})",
                p.hidden_size,
            )
        if p.hidden_size != 2 * v.num_pos_feats:
            bad(
                "vision_config.num_pos_feats",
                f"half of prompt_encoder_config.hidden_size ({p.hidden_size})",
                v.num_pos_feats,
            )
        if p.image_embedding_size != v.grid or p.image_size != v.image_size:
            bad(
                "prompt_encoder_config.image_size",
                f"the vision encoder's image_size {v.image_size} with its grid {v.grid}",
                p.image_size,
            )
        if p.num_point_embeddings != 4:
            bad(
                "prompt_encoder_config.num_point_embeddings",
                "4 (negative, positive, box corners)",
                p.num_point_embeddings,
            )
        if p.mask_input_channels % 4:
            bad(
                "prompt_encoder_config.mask_input_channels",
                "a multiple of 4",
                p.mask_input_channels,
            )
        if d.hidden_size != p.hidden_size:
            bad(
                "mask_decoder_config.hidden_size",
                f"prompt_encoder_config.hidden_size ({p.hidden_size})",
                d.hidden_size,
            )
        if d.hidden_size % 8:
            bad(
                "mask_decoder_config.hidden_size",
                "a multiple of 8 (the upscaling widths)",
                d.hidden_size,
            )
        inner = d.hidden_size // d.attention_downsample_rate
        if d.hidden_size % d.attention_downsample_rate or inner % d.num_attention_heads:
            bad(
                "mask_decoder_config.num_attention_heads",
                f"a divisor of hidden_size / attention_downsample_rate ({inner})",
                d.num_attention_heads,
            )
        return self


def _size(src, name, value):
    """A positive int, or a square [n, n] (transformers allows a pair)."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    return cf.positive_int(src, name, value)


def _vision(d, src):
    d = cf.mapping(src, "vision_config", d)
    base = SamVisionConfig()

    def get(name):
        return d.get(name, getattr(base, name))

    def field(name):
        return f"vision_config.{name}"

    hidden = cf.positive_int(src, field("hidden_size"), get("hidden_size"))
    mlp_dim = d.get("mlp_dim")
    if mlp_dim is None:
        ratio = cf.positive_number(src, field("mlp_ratio"), d.get("mlp_ratio", 4.0))
        mlp_dim = int(hidden * ratio)
    layers = cf.positive_int(src, field("num_hidden_layers"), get("num_hidden_layers"))
    glob = get("global_attn_indexes")
    if not isinstance(glob, (list, tuple)):
        raise cf.fail(src, field("global_attn_indexes"), "a list of layer indices", glob)
    glob = tuple(
        cf.integer(src, f"{field('global_attn_indexes')}[{i}]", g, low=0, high=layers - 1)
        for i, g in enumerate(glob)
    )
    return SamVisionConfig(
        hidden_size=hidden,
        output_channels=cf.positive_int(src, field("output_channels"), get("output_channels")),
        num_hidden_layers=layers,
        num_attention_heads=cf.positive_int(
            src, field("num_attention_heads"), get("num_attention_heads")
        ),
        num_channels=cf.positive_int(src, field("num_channels"), get("num_channels")),
        image_size=_size(src, field("image_size"), get("image_size")),
        patch_size=_size(src, field("patch_size"), get("patch_size")),
        hidden_act=cf.string(src, field("hidden_act"), get("hidden_act"), ACTIVATIONS),
        layer_norm_eps=cf.positive_number(src, field("layer_norm_eps"), get("layer_norm_eps")),
        qkv_bias=cf.boolean(src, field("qkv_bias"), get("qkv_bias")),
        mlp_dim=cf.positive_int(src, field("mlp_dim"), mlp_dim),
        use_abs_pos=cf.boolean(src, field("use_abs_pos"), get("use_abs_pos")),
        use_rel_pos=cf.boolean(src, field("use_rel_pos"), get("use_rel_pos")),
        window_size=cf.integer(src, field("window_size"), get("window_size"), low=0),
        global_attn_indexes=glob,
        num_pos_feats=cf.positive_int(src, field("num_pos_feats"), get("num_pos_feats")),
    )


def _prompt(d, src):
    d = cf.mapping(src, "prompt_encoder_config", d)
    base = SamPromptEncoderConfig()

    def get(name):
        return d.get(name, getattr(base, name))

    def field(name):
        return f"prompt_encoder_config.{name}"

    return SamPromptEncoderConfig(
        hidden_size=cf.positive_int(src, field("hidden_size"), get("hidden_size")),
        image_size=_size(src, field("image_size"), get("image_size")),
        patch_size=_size(src, field("patch_size"), get("patch_size")),
        mask_input_channels=cf.positive_int(
            src, field("mask_input_channels"), get("mask_input_channels")
        ),
        num_point_embeddings=cf.positive_int(
            src, field("num_point_embeddings"), get("num_point_embeddings")
        ),
        hidden_act=cf.string(src, field("hidden_act"), get("hidden_act"), ACTIVATIONS),
        layer_norm_eps=cf.positive_number(src, field("layer_norm_eps"), get("layer_norm_eps")),
    )


def _decoder(d, src):
    d = cf.mapping(src, "mask_decoder_config", d)
    base = SamMaskDecoderConfig()

    def get(name):
        return d.get(name, getattr(base, name))

    def count(name, low=1):
        return cf.integer(src, f"mask_decoder_config.{name}", get(name), low=low)

    return SamMaskDecoderConfig(
        hidden_size=count("hidden_size"),
        hidden_act=cf.string(src, "mask_decoder_config.hidden_act", get("hidden_act"), ACTIVATIONS),
        mlp_dim=count("mlp_dim"),
        num_hidden_layers=count("num_hidden_layers"),
        num_attention_heads=count("num_attention_heads"),
        attention_downsample_rate=count("attention_downsample_rate"),
        num_multimask_outputs=count("num_multimask_outputs"),
        iou_head_depth=count("iou_head_depth", low=2),
        iou_head_hidden_dim=count("iou_head_hidden_dim"),
        layer_norm_eps=cf.positive_number(
            src, "mask_decoder_config.layer_norm_eps", get("layer_norm_eps")
        ),
    )


def from_hf(d, source="config.json"):
    """The SamConfig of a transformers config.json dict; FormatError naming the field."""
    d = cf.mapping(source, "config", d)
    model_type = d.get("model_type")
    if model_type != "sam":
        archs = d.get("architectures")
        what = f" ({', '.join(map(str, archs))})" if isinstance(archs, list) and archs else ""
        raise FormatError(
            f"{source}: model_type {model_type!r}{what} is not a Segment Anything model "
            "(model_type 'sam')",
            path=source,
            field="model_type",
            value=model_type,
        )
    return SamConfig(
        _vision(d.get("vision_config", {}), source),
        _prompt(d.get("prompt_encoder_config", {}), source),
        _decoder(d.get("mask_decoder_config", {}), source),
        source,
    ).check()


def from_shapes(shapes, source):
    """The SamConfig an original segment-anything checkpoint implies, from the shapes of
    its tensors in transformers' names (`shapes`: name -> shape): widths and counts from
    the weights, heads from the relative-position tables' width (the head dimension),
    window size and global layers from those tables' lengths. The mask decoder's head
    count is not in any shape; every released SAM uses 8."""

    def shape(name):
        if name not in shapes:
            raise FormatError(
                f"{source}: tensor {name} is missing (not a Segment Anything checkpoint?)",
                path=source,
                tensor=name,
            )
        return tuple(shapes[name])

    hidden, channels, patch, _ = shape("vision_encoder.patch_embed.projection.weight")
    pe = "vision_encoder.pos_embed"
    grid = shape(pe)[1] if pe in shapes else None
    layers = 0
    while f"vision_encoder.layers.{layers}.attn.qkv.weight" in shapes:
        layers += 1
    rel = "vision_encoder.layers.{}.attn.rel_pos_h"
    use_rel = layers > 0 and rel.format(0) in shapes
    window, glob, head_dim = 0, [], hidden
    if use_rel:
        head_dim = shape(rel.format(0))[1]
        lengths = [(shape(rel.format(i))[0] + 1) // 2 for i in range(layers)]
        grid = grid or max(lengths)
        glob = [i for i, n in enumerate(lengths) if n == grid]
        local = [n for n in lengths if n != grid]
        window = local[0] if local else 14
    if grid is None:
        raise FormatError(
            f"{source}: neither {pe} nor relative positions give the image grid",
            path=source,
            tensor=pe,
        )
    out_ch = shape("vision_encoder.neck.conv1.weight")[0]
    n_dec = 0
    while f"mask_decoder.transformer.layers.{n_dec}.mlp.lin1.weight" in shapes:
        n_dec += 1
    iou_depth = 2
    while f"mask_decoder.iou_prediction_head.layers.{iou_depth - 2}.weight" in shapes:
        iou_depth += 1
    vision = SamVisionConfig(
        hidden_size=hidden,
        output_channels=out_ch,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // head_dim),
        num_channels=channels,
        image_size=grid * patch,
        patch_size=patch,
        qkv_bias="vision_encoder.layers.0.attn.qkv.bias" in shapes,
        mlp_dim=shape("vision_encoder.layers.0.mlp.lin1.weight")[0],
        use_abs_pos=pe in shapes,
        use_rel_pos=use_rel,
        window_size=window,
        global_attn_indexes=tuple(glob),
        num_pos_feats=shape("shared_image_embedding.positional_embedding")[1],
    )
    prompt = SamPromptEncoderConfig(
        hidden_size=out_ch,
        image_size=grid * patch,
        patch_size=patch,
        mask_input_channels=shape("prompt_encoder.mask_embed.conv2.weight")[0],
    )
    decoder = SamMaskDecoderConfig(
        hidden_size=shape("mask_decoder.iou_token.weight")[1],
        mlp_dim=shape("mask_decoder.transformer.layers.0.mlp.lin1.weight")[0],
        num_hidden_layers=n_dec,
        num_multimask_outputs=shape("mask_decoder.mask_tokens.weight")[0] - 1,
        iou_head_depth=iou_depth,
        iou_head_hidden_dim=shape("mask_decoder.iou_prediction_head.proj_in.weight")[0],
    )
    return SamConfig(vision, prompt, decoder, source).check()
