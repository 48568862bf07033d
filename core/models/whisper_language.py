"""Spoken-language detection for multilingual Whisper models, as openai-whisper and
faster-whisper do it: the decoder's logits after <|startoftranscript|> alone, against a
window's encoder output, restricted to the language tokens and softmaxed.

    probs = language_probs(model, encoder_out, tokens)   # one dict per row
    code, p = best_language(probs[0])                     # ("en", 0.97)
"""

import numpy as np

from ..tensor import tensor


def language_probs(model, encoder_out, tokens):
    """For each row of `encoder_out` [b, positions, d], {language code: probability} over
    the model's language tokens (they sum to 1)."""
    codes = list(tokens.languages)
    ids = np.array([tokens.languages[c] for c in codes], dtype=np.int64)
    rows = encoder_out.shape[0]
    cache = model.decoder.new_cache(encoder_out)
    logits = model.decoder(tensor([[tokens.sot]] * rows, device=model.device), cache)
    picked = logits.numpy()[:, -1][:, ids].astype(np.float64)
    picked = np.exp(picked - picked.max(axis=1, keepdims=True))
    picked /= picked.sum(axis=1, keepdims=True)
    return [dict(zip(codes, (float(p) for p in row), strict=True)) for row in picked]


def best_language(probs):
    """(code, probability) of the most likely language in one row of `language_probs`."""
    code = max(probs, key=probs.get)
    return code, probs[code]
