"""What a generation run does: length, sampling, stops, what to do with a long prompt."""

import math
from dataclasses import dataclass, field, replace

from ..errors import EmberError

TRUNCATE = (None, "left")


@dataclass
class GenerationConfig:
    max_new_tokens: int = 32
    temperature: float = 0.0  # 0 = greedy; otherwise sample from softmax(logits / T)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    repetition_penalty: float = 1.0  # 1 = off; > 1 discourages tokens already present
    seed: int = None  # seeds sampling when no Generator is passed
    stop_token_ids: tuple = None  # a row ends after one of these (None: the model's eos)
    stop_strings: tuple = ()  # ... or when its text contains one of these
    pad_token_id: int = 0  # fills left padding and rows that have finished
    # A prompt longer than the model's context is refused (None) or, with "left", loses
    # its oldest tokens so that it fits with room for one new token.
    truncate: str = None
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.max_new_tokens = _integer("max_new_tokens", self.max_new_tokens, 0)
        self.top_k = _integer("top_k", self.top_k, 0)
        self.pad_token_id = _integer("pad_token_id", self.pad_token_id, 0)
        if self.seed is not None:
            self.seed = _integer("seed", self.seed, 0)
        self.temperature = _number("temperature", self.temperature, ">= 0", lambda v: v >= 0)
        self.top_p = _number("top_p", self.top_p, "in (0, 1]", lambda v: 0.0 < v <= 1.0)
        self.repetition_penalty = _number(
            "repetition_penalty", self.repetition_penalty, "> 0", lambda v: v > 0
        )
        if self.truncate not in TRUNCATE:
            raise EmberError(
                f"generate: truncate must be None or 'left', got {self.truncate!r}",
                op="generate",
                field="truncate",
            )
        if self.stop_token_ids is not None:
            self.stop_token_ids = tuple(
                _integer("stop_token_ids", t, 0) for t in self.stop_token_ids
            )
        if isinstance(self.stop_strings, str):
            self.stop_strings = (self.stop_strings,)
        self.stop_strings = tuple(s for s in (self.stop_strings or ()) if s)

    @property
    def do_sample(self):
        return self.temperature > 0

    def updated(self, **changes):
        """A copy with the given fields changed (None values leave a field as it is)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def _integer(name, value, low):
    """value as an int >= low; bools, floats and strings are refused by name."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise EmberError(
            f"generate: {name} must be an integer, got {value!r}", op="generate", field=name
        )
    value = int(value)
    if value < low:
        raise EmberError(
            f"generate: {name} must be >= {low}, got {value}", op="generate", field=name
        )
    return value


def _number(name, value, rule, ok):
    """value as a finite float that satisfies `ok` (NaN and inf never do)."""
    if isinstance(value, bool):
        raise EmberError(
            f"generate: {name} must be a number, got {value!r}", op="generate", field=name
        )
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise EmberError(
            f"generate: {name} must be a number, got {value!r}", op="generate", field=name
        ) from None
    if not math.isfinite(value) or not ok(value):
        raise EmberError(
            f"generate: {name} must be a finite number {rule}, got {value}",
            op="generate",
            field=name,
        )
    return value
