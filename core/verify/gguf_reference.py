"""transformers' model of a GGUF file: the reference `verify_model` compares ember's
GGUF models with. Its config and its weights are transformers' own reading of the file
(the weights dequantized by the `gguf` package), built without from_pretrained (which asks
for `accelerate` on GGUF files).

transformers' GGUF reader leaves three Gemma 2/3 settings at its config defaults where
llama.cpp's files mean something else: the attention scale (llama.cpp scales by the head
size, transformers' default query_pre_attn_scalar is 256), the soft caps (Gemma 2's GGUF
keys are not read, 50 and 30 assumed) and the rope scaling of Gemma 3's global layers.
Those few fields are taken from ember's reading of the metadata (itself checked against
transformers' own configs in the Gemma GGUF tests), so the comparison still checks every
weight and every computation; everything else stays transformers' reading.
"""

from ..errors import FormatError
from .reference import import_torch, import_transformers


def transformers_from_gguf(path, ember_config):
    torch = import_torch()
    transformers = import_transformers()
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        config = dict(load_gguf_checkpoint(path)["config"])
        model_type = config.pop("model_type")
        config.pop("_model_name_or_path", None)
        if model_type in ("gemma2", "gemma3_text"):
            config.pop("rope_theta", None)  # rope_parameters below carry it
            config.update(_gemma_settings(ember_config, model_type))
        hf_config = transformers.AutoConfig.for_model(model_type, **config)
        model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
        tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    except (ValueError, KeyError, ImportError) as exc:
        raise FormatError(f"verify: transformers cannot read {path} ({exc})", path=path) from None
    state = {k: v if hasattr(v, "detach") else torch.from_numpy(v) for k, v in tensors.items()}
    missing, _ = model.load_state_dict(state, strict=False)
    if [k for k in missing if k != "lm_head.weight" or not hf_config.tie_word_embeddings]:
        raise FormatError(f"verify: transformers' reading of {path} lacks {missing}", path=path)
    return model.eval()


def _gemma_settings(cfg, model_type):
    """transformers config fields for what its GGUF reader leaves at Gemma's defaults."""
    full = {"rope_type": "default", **(cfg.rope_scaling or {}), "rope_theta": cfg.rope_theta}
    full.pop("max_position_embeddings", None)  # ember's own copy, not a rope parameter
    if model_type == "gemma3_text":
        local = cfg.rope_local_theta if cfg.rope_local_theta is not None else cfg.rope_theta
        rope = {
            "full_attention": full,
            "sliding_attention": {"rope_type": "default", "rope_theta": local},
        }
    else:
        rope = full
    return {
        # transformers' config types it int (its checkpoints' scalars are whole numbers)
        "query_pre_attn_scalar": _whole(cfg.query_pre_attn_scalar),
        "attn_logit_softcapping": cfg.attn_logit_softcapping,
        "final_logit_softcapping": cfg.final_logit_softcapping,
        "rope_parameters": rope,
    }


def _whole(x):
    return int(x) if float(x).is_integer() else x
