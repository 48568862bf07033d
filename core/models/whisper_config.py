"""Whisper's dimensions, read and validated from a Hugging Face config.json or from the
shapes and settings inside a CTranslate2 model.bin (whose config.json holds only the
decoding lists: suppressed tokens, language ids, alignment heads)."""

from dataclasses import dataclass, field

from ..errors import FormatError

# CTranslate2's ActivationType code for the exact (erf) GELU, the only one Whisper uses
_CT2_GELU = 3


@dataclass(frozen=True)
class WhisperConfig:
    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    max_source_positions: int  # encoder positions: input frames are twice as many
    decoder_layers: int
    decoder_attention_heads: int
    decoder_ffn_dim: int
    max_target_positions: int
    vocab_size: int
    layer_norm_eps: float = 1e-5
    suppress_tokens: tuple = field(default=())
    begin_suppress_tokens: tuple = field(default=())
    source: str = ""

    @property
    def is_multilingual(self):
        return self.vocab_size >= 51865

    def check(self):
        for name in ("suppress_tokens", "begin_suppress_tokens"):
            out_of_range = [t for t in getattr(self, name) if t >= self.vocab_size]
            if out_of_range:
                raise FormatError(
                    f"{self.source}: {name} holds token {out_of_range[0]}, outside the "
                    f"vocabulary of {self.vocab_size}",
                    path=self.source,
                    field=name,
                )
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            if self.d_model % getattr(self, name):
                raise FormatError(
                    f"{self.source}: {name}={getattr(self, name)} does not divide "
                    f"d_model={self.d_model}",
                    path=self.source,
                    field=name,
                )
        return self


def _token_list(value, field, path):
    """A suppress list from a config: null or absent is empty (CTranslate2's converter writes
    null for a model without one); anything but a list of token ids is refused by name."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value
    ):
        raise FormatError(
            f"{path}: {field} must be a list of token ids, got {value!r}"[:300],
            path=path,
            field=field,
        )
    return tuple(value)


def _require(cfg, key, path):
    if key not in cfg:
        raise FormatError(
            f"{path}: config.json lacks {key!r}, which a Whisper model needs", path=path, field=key
        )
    value = cfg[key]
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise FormatError(
            f"{path}: config.json {key!r} must be a positive integer, got {value!r}",
            path=path,
            field=key,
        )
    return value


# The sizes a transformers WhisperConfig must state (and that WhisperConfig holds).
SIZE_FIELDS = (
    "num_mel_bins",
    "d_model",
    "encoder_layers",
    "encoder_attention_heads",
    "encoder_ffn_dim",
    "max_source_positions",
    "decoder_layers",
    "decoder_attention_heads",
    "decoder_ffn_dim",
    "max_target_positions",
    "vocab_size",
)


def from_hf(cfg, path, generation=None):
    """From a transformers WhisperConfig dict (and generation_config.json's token lists)."""
    values = {k: _require(cfg, k, path) for k in SIZE_FIELDS}
    act = cfg.get("activation_function", "gelu")
    if act != "gelu":
        raise FormatError(
            f"{path}: activation_function {act!r} is not Whisper's 'gelu'",
            path=path,
            field="activation_function",
        )
    gen = generation or {}
    suppress = gen.get("suppress_tokens", cfg.get("suppress_tokens"))
    begin = gen.get("begin_suppress_tokens", cfg.get("begin_suppress_tokens"))
    return WhisperConfig(
        **values,
        suppress_tokens=_token_list(suppress, "suppress_tokens", path),
        begin_suppress_tokens=_token_list(begin, "begin_suppress_tokens", path),
        source=path,
    ).check()


def from_ct2(f, tensors, ct2_config, path):
    """From a CTranslate2 file (`f`), its variables mapped to HF names (`tensors`) and the
    directory's config.json (`ct2_config`)."""
    from ..io.ctranslate2 import scalar

    act = scalar(f, "decoder/activation", _CT2_GELU)
    if act != _CT2_GELU:
        raise FormatError(
            f"{path}: decoder/activation is CTranslate2 activation {act}, not GELU ({_CT2_GELU})",
            path=path,
            field="decoder/activation",
        )

    def count(side):
        return sum(
            1 for k in tensors if k.startswith(f"model.{side}.layers.") and k.endswith("fc1.weight")
        )

    def heads(side):
        n = scalar(f, f"{side}/num_heads")
        if n is None:
            raise FormatError(
                f"{path}: {side}/num_heads is missing", path=path, field=f"{side}/num_heads"
            )
        return n

    conv1 = tensors["model.encoder.conv1.weight"].shape  # (d_model, n_mels, 3)
    return WhisperConfig(
        num_mel_bins=conv1[1],
        d_model=conv1[0],
        encoder_layers=count("encoder"),
        encoder_attention_heads=heads("encoder"),
        encoder_ffn_dim=tensors["model.encoder.layers.0.fc1.weight"].shape[0],
        max_source_positions=tensors["model.encoder.embed_positions.weight"].shape[0],
        decoder_layers=count("decoder"),
        decoder_attention_heads=heads("decoder"),
        decoder_ffn_dim=tensors["model.decoder.layers.0.fc1.weight"].shape[0],
        max_target_positions=tensors["model.decoder.embed_positions.weight"].shape[0],
        vocab_size=tensors["model.decoder.embed_tokens.weight"].shape[0],
        suppress_tokens=_token_list(ct2_config.get("suppress_ids"), "suppress_ids", path),
        begin_suppress_tokens=_token_list(
            ct2_config.get("suppress_ids_begin"), "suppress_ids_begin", path
        ),
        source=path,
    ).check()
