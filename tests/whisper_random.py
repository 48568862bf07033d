"""A tiny random multilingual WhisperForConditionalGeneration saved with transformers, for
the decoding tests (batching, language detection): seeded, 2+2 layers of width 32, three
languages, a 30-position encoder (60 frames) and a 64-token decoder."""

import pytest

from ember.models.whisper_tokens import WhisperTokens
from helpers import require

TEXT_TOKENS = 100
LANGS = ("en", "de", "fr")
FRAMES = 60  # = 2 x max_source_positions, as the encoder requires
MAX_TARGET = 64


def tiny_whisper_config(transformers, tokens, n_mels=80, **overrides):
    """The tiny WhisperConfig the random-Whisper tests build (2+2 layers of width 32, a
    30-position encoder, a MAX_TARGET-token decoder) over `tokens`' vocabulary, with
    `overrides` on top."""
    fields = dict(
        vocab_size=tokens.timestamp_begin + 1501,
        d_model=32,
        encoder_layers=2,
        encoder_attention_heads=4,
        decoder_layers=2,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_source_positions=FRAMES // 2,
        max_target_positions=MAX_TARGET,
        num_mel_bins=n_mels,
        pad_token_id=tokens.eot,
        bos_token_id=tokens.eot,
        eos_token_id=tokens.eot,
        decoder_start_token_id=tokens.sot,
    )
    fields.update(overrides)
    return transformers.WhisperConfig(**fields)


@pytest.fixture(scope="module")
def random_whisper(tmp_path_factory):
    """(transformers model, its directory, WhisperTokens, features [3, 80, 60] torch)."""
    torch = require("torch")
    transformers = require("transformers")
    tokens = WhisperTokens.by_layout(TEXT_TOKENS, LANGS, multilingual=True)
    torch.manual_seed(13)
    cfg = tiny_whisper_config(
        transformers, tokens, suppress_tokens=[], begin_suppress_tokens=[tokens.eot]
    )
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    path = tmp_path_factory.mktemp("whisper-random")
    model.save_pretrained(path)
    features = torch.randn(3, 80, FRAMES, generator=torch.Generator().manual_seed(5))
    return model, path, tokens, features


class IdsTokenizer:
    """Text as the token ids themselves: enough for segments and the fallback's ratio."""

    def decode(self, ids):
        return " ".join(map(str, ids))


def fixed_log_mel(em, features):
    """A log_mel for Transcription that gives these features ([80, 60]) for every window,
    since the random encoder takes 60 frames, not a real window's 3000."""
    import ember

    def log_mel(_window):
        return ember.tensor(features, device=em.device)

    return log_mel
