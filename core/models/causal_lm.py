"""The causal language model a Hugging Face directory holds, by its config.json
`model_type` (GGUF files go by `general.architecture` in gguf_llama.ARCHITECTURES).

    model = load_causal_lm("path/to/gemma-3-270m", device="cpu")
"""

import os

from .. import dtype as dt
from ..errors import FormatError
from ..io.files import read_json
from .gemma import GemmaForCausalLM
from .llama import LlamaForCausalLM
from .llama_config import SUPPORTED_MODEL_TYPES

# config.json model_type -> the model class that reads it (a new family joins here).
MODEL_CLASSES = {
    **dict.fromkeys(SUPPORTED_MODEL_TYPES, LlamaForCausalLM),
    **dict.fromkeys(GemmaForCausalLM.config_class.MODEL_TYPES + ("gemma3",), GemmaForCausalLM),
}


def model_class(path):
    """The class for the directory's config.json (FormatError naming its model_type and
    the supported ones when ember has none)."""
    config = os.path.join(path, "config.json") if os.path.isdir(path) else path
    d = read_json(config, "model config")
    kind = d.get("model_type", "llama") if isinstance(d, dict) else None
    if not isinstance(kind, str) or kind not in MODEL_CLASSES:
        raise FormatError(
            f"{config}: model_type {kind!r} is not a model ember can load "
            f"(supported: {', '.join(MODEL_CLASSES)})",
            path=config,
            field="model_type",
        )
    return MODEL_CLASSES[kind]


def load_causal_lm(path, device=None, dtype=dt.f32, max_len=None):
    """The model (LlamaForCausalLM, GemmaForCausalLM, ...) of a directory holding
    config.json and safetensors weights."""
    return model_class(path).from_pretrained(path, device, dtype, max_len)
