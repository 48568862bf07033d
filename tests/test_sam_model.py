"""Segment Anything against transformers' SamModel on tiny random configs (window sizes
with and without padding, different global-attention layers, multimask on and off):
image embeddings, low-res masks and IoU predictions for point, box and combined prompts,
on every device; the same weights under the original segment-anything names; and the
checkpoints and prompts that must be refused."""

import json
import re

import numpy as np
import pytest

import ember
from ember.errors import FormatError, InvalidArgument, ShapeMismatch
from ember.models.sam import SamModel
from helpers import require

# (image_size, window_size, global_attn_indexes, vision layers, use_abs_pos,
#  mask decoder layers, num_multimask_outputs, iou_head_depth)
CONFIGS = {
    "grid4-win2": (64, 2, [1], 2, True, 2, 3, 3),
    "grid5-win3-padded": (80, 3, [0, 2], 3, True, 2, 3, 3),
    "grid6-win4-local-only": (96, 4, [], 2, False, 1, 2, 4),
}


def _tol(device):
    return 1e-4 if device.kind == "cpu" else 1e-3


def _randomize(model, torch):
    """Weights of a useful size everywhere: transformers' init makes the image encoder
    about 1e-10 wide and zeroes the position embeddings, which would test nothing."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "positional_embedding" in name:
                p.normal_(0, 1.0)
            elif "layer_norm" in name and name.endswith("weight"):
                p.normal_(1.0, 0.1)
            elif p.ndim == 1:
                p.normal_(0, 0.1)
            else:
                fan_in = p.shape[0] if "upscale_conv" in name else p[0].numel()
                p.normal_(0, fan_in**-0.5)


def _reference(torch, transformers, key, decoder_heads=2, hidden=16):
    size, window, glob, layers, abs_pos, dec_layers, multi, iou_depth = CONFIGS[key]
    torch.manual_seed(size + window)
    cfg = transformers.SamConfig(
        vision_config=dict(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=2,
            image_size=size,
            patch_size=16,
            window_size=window,
            global_attn_indexes=glob,
            use_abs_pos=abs_pos,
            output_channels=hidden,
            num_pos_feats=hidden // 2,
            mlp_dim=48,
        ),
        prompt_encoder_config=dict(
            hidden_size=hidden, image_size=size, patch_size=16, mask_input_channels=8
        ),
        mask_decoder_config=dict(
            hidden_size=hidden,
            mlp_dim=24,
            num_attention_heads=decoder_heads,
            num_hidden_layers=dec_layers,
            num_multimask_outputs=multi,
            iou_head_depth=iou_depth,
            iou_head_hidden_dim=20,
        ),
    )
    model = transformers.SamModel(cfg).eval()
    _randomize(model, torch)
    return model


def _saved(tmp_path_factory, key):
    torch = require("torch")
    transformers = require("transformers")
    model = _reference(torch, transformers, key)
    path = tmp_path_factory.mktemp(f"sam-{key}")
    model.save_pretrained(path)
    size = CONFIGS[key][0]
    gen = torch.Generator().manual_seed(size)
    pixels = torch.randn(2, 3, size, size, generator=gen)
    with torch.no_grad():
        embeddings = model.get_image_embeddings(pixels)
    return dict(model=model, path=path, size=size, pixels=pixels, embeddings=embeddings)


@pytest.fixture(scope="module", params=list(CONFIGS))
def tiny(request, tmp_path_factory):
    return _saved(tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def grid4(tmp_path_factory):
    """One config for the refusals, which do not depend on it."""
    return _saved(tmp_path_factory, "grid4-win2")


def _prompts(size, kind):
    """Two images, two prompt sets each: points (with negative and padding labels), boxes
    or both, in input pixels."""
    s = size - 1
    points = [
        [[[0.2 * s, 0.3 * s], [0.7 * s, 0.6 * s]], [[0.9 * s, 0.1 * s], [0.5 * s, 0.5 * s]]],
        [[[0.0, 0.0], [s, s]], [[0.4 * s, 0.8 * s], [0.1 * s, 0.9 * s]]],
    ]
    labels = [[[1, 0], [1, -10]], [[0, 1], [1, 1]]]
    boxes = [
        [[0.1 * s, 0.1 * s, 0.6 * s, 0.8 * s], [0.3 * s, 0.2 * s, s, 0.9 * s]],
        [[0.0, 0.0, s, s], [0.4 * s, 0.4 * s, 0.7 * s, 0.75 * s]],
    ]
    out = {}
    if kind in ("points", "both"):
        out.update(input_points=points, input_labels=labels)
    if kind in ("boxes", "both"):
        out["input_boxes"] = boxes
    return out


def _torch_outputs(torch, tiny, prompts, multimask):
    with torch.no_grad():
        out = tiny["model"](
            image_embeddings=tiny["embeddings"],
            multimask_output=multimask,
            **{k: torch.tensor(v) for k, v in prompts.items()},
        )
    return out.pred_masks.numpy(), out.iou_scores.numpy()


@pytest.fixture(scope="module")
def loaded(tiny, device):
    """The tiny model on `device` and its image embeddings, computed once."""
    model = SamModel.from_pretrained(tiny["path"], device=device)
    return model, model.image_embeddings(ember.tensor(tiny["pixels"].numpy(), device=device))


def test_image_embeddings_match_transformers(tiny, loaded, device):
    got = loaded[1].numpy()
    want = tiny["embeddings"].numpy()
    assert got.shape == want.shape
    assert np.abs(want).max() > 0.5  # the layer norms keep the embedding O(1)
    np.testing.assert_allclose(got, want, atol=_tol(device), rtol=0)


@pytest.mark.parametrize("multimask", [True, False], ids=["multimask", "single"])
@pytest.mark.parametrize("kind", ["points", "boxes", "both"])
def test_masks_and_iou_match_transformers(tiny, loaded, device, kind, multimask):
    torch = require("torch")
    model, emb = loaded
    prompts = _prompts(tiny["size"], kind)
    masks, iou = model.predict_masks(emb, multimask_output=multimask, **prompts)
    want_masks, want_iou = _torch_outputs(torch, tiny, prompts, multimask)
    assert masks.shape == want_masks.shape and iou.shape == want_iou.shape
    assert np.abs(want_masks).max() > 0.1
    np.testing.assert_allclose(masks.numpy(), want_masks, atol=_tol(device), rtol=0)
    np.testing.assert_allclose(iou.numpy(), want_iou, atol=_tol(device), rtol=0)


def test_labels_default_to_positive(grid4):
    torch = require("torch")
    model = SamModel.from_pretrained(grid4["path"])
    emb = ember.tensor(grid4["embeddings"].numpy())
    points = _prompts(grid4["size"], "points")["input_points"]
    masks, iou = model.predict_masks(emb, input_points=points)
    want_masks, want_iou = _torch_outputs(torch, grid4, {"input_points": points}, True)
    np.testing.assert_allclose(masks.numpy(), want_masks, atol=1e-4, rtol=0)
    np.testing.assert_allclose(iou.numpy(), want_iou, atol=1e-4, rtol=0)


@pytest.mark.parametrize("prepared", [False, True], ids=["embedding", "prepared-image"])
def test_mask_prompt_matches_transformers(grid4, prepared):
    """A mask prompt, on the embedding and on a PreparedImage whose no-mask state was made
    first (a mask prompt must not take it)."""
    torch = require("torch")
    model = SamModel.from_pretrained(grid4["path"])
    emb = ember.tensor(grid4["embeddings"].numpy())
    prompts = _prompts(grid4["size"], "points")
    if prepared:
        emb = model.prepare_image(emb)
        model.predict_masks(emb, **prompts)
    s = 4 * (grid4["size"] // 16)
    gen = torch.Generator().manual_seed(3)
    mask_in = torch.randn(2, 1, s, s, generator=gen)
    masks, iou = model.predict_masks(emb, input_masks=mask_in.numpy().tolist(), **prompts)
    with torch.no_grad():
        out = grid4["model"](
            image_embeddings=grid4["embeddings"],
            input_masks=mask_in,
            **{k: torch.tensor(v) for k, v in prompts.items()},
        )
    np.testing.assert_allclose(masks.numpy(), out.pred_masks.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(iou.numpy(), out.iou_scores.numpy(), atol=1e-4, rtol=0)


# --- the original segment-anything names ------------------------------------------------------
def _original_name(hf):
    """transformers' name -> segment-anything's (the inverse of transformers' converter,
    written from its documented mapping)."""
    name = hf.replace(
        "shared_image_embedding.positional_embedding",
        "prompt_encoder.pe_layer.positional_encoding_gaussian_matrix",
    )
    name = name.replace("vision_encoder.", "image_encoder.")
    name = name.replace("patch_embed.projection", "patch_embed.proj")
    name = name.replace("image_encoder.layers.", "image_encoder.blocks.")
    for i, part in enumerate(("conv1", "layer_norm1", "conv2", "layer_norm2")):
        name = name.replace(f"image_encoder.neck.{part}.", f"image_encoder.neck.{i}.")
    name = name.replace("prompt_encoder.point_embed.", "prompt_encoder.point_embeddings.")
    for i, part in (
        (0, "conv1"),
        (1, "layer_norm1"),
        (3, "conv2"),
        (4, "layer_norm2"),
        (6, "conv3"),
    ):
        name = name.replace(f"mask_embed.{part}.", f"mask_downscaling.{i}.")
    name = name.replace("layer_norm_final_attn", "norm_final_attn")
    for i, part in ((0, "upscale_conv1"), (1, "upscale_layer_norm"), (3, "upscale_conv2")):
        name = name.replace(f"mask_decoder.{part}.", f"mask_decoder.output_upscaling.{i}.")
    name = re.sub(r"\.layer_norm(\d)\.", r".norm\1.", name)
    return name


def _ffn_original(names):
    """The feed-forward heads' proj_in / layers.j / proj_out -> layers.0 / j+1 / last."""
    out = {}
    for hf, orig in names.items():
        m = re.match(
            r"(.*(?:output_hypernetworks_mlps\.\d+|iou_prediction_head))\.(.*)\.(\w+)$", orig
        )
        if m:
            head, part, kind = m.groups()
            hidden = {k for k in names.values() if k.startswith(head + ".layers.")}
            depth = len({k.rsplit(".", 1)[0] for k in hidden}) + 2
            j = (
                0
                if part == "proj_in"
                else depth - 1
                if part == "proj_out"
                else (int(part.split(".")[1]) + 1)
            )
            orig = f"{head}.layers.{j}.{kind}"
        out[hf] = orig
    return out


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A SAM with 8 mask-decoder heads (every released SAM's; the original checkpoint does
    not say) saved under the original names, and its transformers model."""
    torch = require("torch")
    transformers = require("transformers")
    from safetensors.torch import save_file

    model = _reference(torch, transformers, "grid5-win3-padded", decoder_heads=8, hidden=32)
    state = {
        k: v.contiguous()
        for k, v in model.state_dict().items()
        if not k.startswith("prompt_encoder.shared_embedding")
    }
    names = _ffn_original({k: _original_name(k) for k in state})
    path = tmp_path_factory.mktemp("sam-original") / "sam_tiny.safetensors"
    save_file({names[k]: v for k, v in state.items()}, str(path))
    return model, path, names


def test_original_checkpoint_names_load_to_the_same_outputs(original):
    torch = require("torch")
    ref, path, names = original
    assert "image_encoder.blocks.0.attn.qkv.weight" in names.values()
    assert "mask_decoder.iou_prediction_head.layers.2.weight" in names.values()
    model = SamModel.from_pretrained(path)
    assert model.cfg.vision.global_attn_indexes == (0, 2)
    assert model.cfg.vision.window_size == 3
    gen = torch.Generator().manual_seed(1)
    pixels = torch.randn(1, 3, 80, 80, generator=gen)
    prompts = {k: v[:1] for k, v in _prompts(80, "both").items()}
    with torch.no_grad():
        want_emb = ref.get_image_embeddings(pixels)
        want = ref(image_embeddings=want_emb, **{k: torch.tensor(v) for k, v in prompts.items()})
    emb = model.image_embeddings(pixels.numpy().tolist())
    masks, iou = model.predict_masks(emb, **prompts)
    np.testing.assert_allclose(emb.numpy(), want_emb.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(masks.numpy(), want.pred_masks.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(iou.numpy(), want.iou_scores.numpy(), atol=1e-4, rtol=0)


# --- refused checkpoints ------------------------------------------------------------------------
def _copy_dir(src, dst, edit_config=None, edit_tensors=None):
    from safetensors.numpy import load_file, save_file

    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    if edit_config:
        edit_config(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    tensors = load_file(str(src / "model.safetensors"))
    if edit_tensors:
        edit_tensors(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def test_another_architecture_is_refused_by_model_type(grid4, tmp_path):
    def to_bert(cfg):
        cfg["model_type"], cfg["architectures"] = "bert", ["BertModel"]

    path = _copy_dir(grid4["path"], tmp_path / "bert", edit_config=to_bert)
    with pytest.raises(FormatError, match=r"model_type 'bert' \(BertModel\)"):
        SamModel.from_pretrained(path)


def test_a_bad_config_field_is_named(grid4, tmp_path):
    def zero_heads(cfg):
        cfg["vision_config"]["num_attention_heads"] = 0

    path = _copy_dir(grid4["path"], tmp_path / "bad", edit_config=zero_heads)
    with pytest.raises(FormatError, match="vision_config.num_attention_heads"):
        SamModel.from_pretrained(path)


def test_a_missing_tensor_is_named(grid4, tmp_path):
    def drop(tensors):
        del tensors["mask_decoder.iou_token.weight"]

    path = _copy_dir(grid4["path"], tmp_path / "missing", edit_tensors=drop)
    with pytest.raises(FormatError, match="mask_decoder.iou_token.weight"):
        SamModel.from_pretrained(path)


def test_extra_tensors_of_another_variant_are_refused(grid4, tmp_path):
    def add_hq_token(tensors):  # SAM-HQ adds a high-quality output token
        tensors["mask_decoder.hf_token.weight"] = np.zeros((1, 16), np.float32)

    path = _copy_dir(grid4["path"], tmp_path / "hq", edit_tensors=add_hq_token)
    with pytest.raises(FormatError, match="mask_decoder.hf_token.weight"):
        SamModel.from_pretrained(path)


def test_weights_of_another_model_without_config_are_refused(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "bert.safetensors"
    save_file({"embeddings.word_embeddings.weight": np.zeros((4, 4), np.float32)}, str(path))
    with pytest.raises(FormatError, match="neither a segment-anything checkpoint"):
        SamModel.from_pretrained(path)


# --- refused prompts ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(input_points=[[[10.0, 10.0]]]), ShapeMismatch, "input_points"),
        (
            dict(input_points=[[[[10.0, 10.0]]]], input_labels=[[[1, 1]]]),
            ShapeMismatch,
            "input_labels",
        ),
        (
            dict(input_points=[[[[10.0, 10.0]]]], input_labels=[[[5]]]),
            InvalidArgument,
            "input_labels holds 5",
        ),
        (dict(input_labels=[[[1]]]), InvalidArgument, "input_labels given without"),
        (dict(input_boxes=[[1.0, 2.0, 3.0, 4.0]]), ShapeMismatch, "input_boxes"),
        (
            dict(input_points=[[[[1.0, 1.0]], [[2.0, 2.0]]]], input_boxes=[[[1.0, 1.0, 9, 9]]]),
            ShapeMismatch,
            "one box per point set",
        ),
        (
            dict(input_points=[[[[10.0, 65.0]]]]),
            InvalidArgument,
            r"input_points\[0\]\[0\]\[0\] = \(10.0, 65.0\) is outside the 64 x 64",
        ),
        (dict(input_points=[[[[float("nan"), 1.0]]]]), InvalidArgument, "input_points"),
        (
            dict(input_boxes=[[[30.0, 5.0, 20.0, 9.0]]]),
            InvalidArgument,
            r"input_boxes\[0\]\[0\] = \(30.0, 5.0, 20.0, 9.0\) must be x0 <= x1",
        ),
    ],
    ids=[
        "points-3d",
        "labels-count",
        "label-value",
        "labels-alone",
        "boxes-2d",
        "sets-vs-boxes",
        "point-outside",
        "point-nan",
        "box-reversed",
    ],
)
def test_bad_prompts_are_refused_by_name(grid4, kwargs, error, match):
    model = SamModel.from_pretrained(grid4["path"])
    emb = ember.tensor(grid4["embeddings"].numpy()[:1])
    with pytest.raises(error, match=match):
        model.predict_masks(emb, **kwargs)


def test_embeddings_of_another_size_are_refused(grid4):
    model = SamModel.from_pretrained(grid4["path"])
    with pytest.raises(ShapeMismatch, match="image_embeddings"):
        model.predict_masks(ember.zeros(1, 16, 7, 7), input_points=[[[[1.0, 1.0]]]])
    with pytest.raises(ShapeMismatch, match="pixel_values"):
        model.image_embeddings(ember.zeros(1, 3, 32, 32))


def test_reloaded_weights_reach_the_decoders_cached_projections(grid4):
    """The mask decoder keeps key_pe's projections (and the model key_pe itself) between
    calls; loading other weights must drop them: a model that predicted before the load
    gives the bits of one that never ran with the old weights."""
    from ember.nn import VarBuilder
    from ember.nn.sources import DictSource

    emb = ember.tensor(grid4["embeddings"].numpy())
    prompts = _prompts(grid4["size"], "both")
    used = SamModel.from_pretrained(grid4["path"])
    before = used.predict_masks(emb, **prompts)[0].numpy()  # fills the caches
    weights = {k: v.numpy() for k, v in used.state_dict().items()}
    for name in weights:  # the positional embedding and every projection of the image side
        if name.endswith("positional_embedding") or re.search(r"\.(k|q)_proj\.weight$", name):
            weights[name] = weights[name] * np.float32(0.5)
    fresh = SamModel.from_pretrained(grid4["path"])
    for model in (used, fresh):
        model.load(VarBuilder(DictSource({k: ember.tensor(v) for k, v in weights.items()})))
    after = used.predict_masks(emb, **prompts)[0].numpy()
    assert np.abs(after - before).max() > 1e-2
    np.testing.assert_array_equal(after, fresh.predict_masks(emb, **prompts)[0].numpy())
