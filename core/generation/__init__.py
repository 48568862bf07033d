"""Text generation: sampling, stop tokens and strings, streaming, chat templates."""

from .chat_template import ChatTemplate
from .config import GenerationConfig
from .generate import TextGeneration, generate, generate_steps, generate_steps_async
from .prompt_cache import PromptCache
from .sampling import (
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    choose_tokens,
    process_logits,
)
from .streaming import IncrementalDecoder, StopStrings

__all__ = [
    "ChatTemplate",
    "GenerationConfig",
    "PromptCache",
    "TextGeneration",
    "generate",
    "generate_steps",
    "generate_steps_async",
    "apply_repetition_penalty",
    "apply_temperature",
    "apply_top_k",
    "apply_top_p",
    "choose_tokens",
    "process_logits",
    "IncrementalDecoder",
    "StopStrings",
]
