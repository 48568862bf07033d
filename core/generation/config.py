"""What a generation run does: length, sampling, stops."""
from dataclasses import dataclass, field, replace

from ..errors import EmberError


@dataclass
class GenerationConfig:
    max_new_tokens: int = 32
    temperature: float = 0.0          # 0 = greedy; otherwise sample from softmax(logits / T)
    top_k: int = 0                    # 0 = off
    top_p: float = 1.0                # 1 = off
    repetition_penalty: float = 1.0   # 1 = off; > 1 discourages tokens already present
    seed: int = None                  # seeds sampling when no Generator is passed
    stop_token_ids: tuple = None      # a row ends after one of these (None: the model's eos)
    stop_strings: tuple = ()          # ... or when its text contains one of these
    pad_token_id: int = 0             # fills left padding and rows that have finished
    extra: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.max_new_tokens < 0:
            raise EmberError(f"generate: max_new_tokens must be >= 0, got {self.max_new_tokens}",
                             op="generate")
        if self.temperature < 0:
            raise EmberError(f"generate: temperature must be >= 0, got {self.temperature}",
                             op="generate")
        if self.top_k < 0:
            raise EmberError(f"generate: top_k must be >= 0, got {self.top_k}", op="generate")
        if not 0.0 < self.top_p <= 1.0:
            raise EmberError(f"generate: top_p must be in (0, 1], got {self.top_p}", op="generate")
        if self.repetition_penalty <= 0:
            raise EmberError(f"generate: repetition_penalty must be > 0, got "
                             f"{self.repetition_penalty}", op="generate")
        if self.stop_token_ids is not None:
            self.stop_token_ids = tuple(int(t) for t in self.stop_token_ids)
        if isinstance(self.stop_strings, str):
            self.stop_strings = (self.stop_strings,)
        self.stop_strings = tuple(s for s in (self.stop_strings or ()) if s)

    @property
    def do_sample(self):
        return self.temperature > 0

    def updated(self, **changes):
        """A copy with the given fields changed (None values leave a field as it is)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})
