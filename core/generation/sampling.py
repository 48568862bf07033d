"""Choosing the next token from logits, on the host (numpy, [batch, vocab] float32).

The processors follow transformers' definitions so the same settings mean the same
thing: repetition penalty divides positive and multiplies negative logits of tokens
already present; temperature divides; top-k keeps logits >= the k-th largest; top-p
keeps the smallest set of most likely tokens whose probability reaches p (at least one).
Sampling draws one uniform number per row from an `ember.Generator`, so a seed gives
the same tokens on every device.
"""
import numpy as np

NEG_INF = np.float32(-np.inf)


def apply_repetition_penalty(scores, history, penalty):
    """scores [b, v]; history: per row, the token ids seen so far (prompt and output)."""
    if penalty == 1.0:
        return scores
    out = scores.copy()
    for row, ids in enumerate(history):
        if not len(ids):
            continue
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        s = out[row, ids]
        out[row, ids] = np.where(s < 0, s * np.float32(penalty), s / np.float32(penalty))
    return out


def apply_temperature(scores, temperature):
    if temperature in (0.0, 1.0):
        return scores
    return scores / np.float32(temperature)


def apply_top_k(scores, k):
    if k <= 0 or k >= scores.shape[-1]:
        return scores
    kth = np.partition(scores, -k, axis=-1)[:, -k][:, None]
    return np.where(scores < kth, NEG_INF, scores)


def apply_top_p(scores, p):
    if p >= 1.0:
        return scores
    order = np.argsort(scores, axis=-1, kind="stable")           # ascending, like HF
    sorted_scores = np.take_along_axis(scores, order, axis=-1)
    probs = softmax(sorted_scores)
    cumulative = np.cumsum(probs, axis=-1)
    remove = cumulative <= (1 - p)
    remove[:, -1] = False                                           # keep the most likely
    out = scores.copy()
    np.put_along_axis(out, order, np.where(remove, NEG_INF, sorted_scores), axis=-1)
    return out


def softmax(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def process_logits(scores, history, config):
    """The logits after every processor the config turns on."""
    scores = np.asarray(scores, dtype=np.float32)
    scores = apply_repetition_penalty(scores, history, config.repetition_penalty)
    if config.do_sample:
        scores = apply_temperature(scores, config.temperature)
        scores = apply_top_k(scores, config.top_k)
        scores = apply_top_p(scores, config.top_p)
    return scores


def choose_tokens(scores, history, config, generator):
    """Next token id per row: argmax when greedy, else one draw from the filtered softmax."""
    scores = process_logits(scores, history, config)
    if not config.do_sample:
        return np.argmax(scores, axis=-1).astype(np.int64)
    probs = softmax(scores.astype(np.float64))
    u = np.asarray(generator.uniform((scores.shape[0],)), dtype=np.float64)
    cdf = np.cumsum(probs, axis=-1)
    picks = np.array([np.searchsorted(cdf[r], u[r] * cdf[r, -1], side="right")
                      for r in range(scores.shape[0])], dtype=np.int64)
    # never land on a filtered token through rounding at the end of the cdf
    picks = np.minimum(picks, scores.shape[-1] - 1)
    for r, t in enumerate(picks):
        if probs[r, t] == 0:
            picks[r] = int(np.argmax(probs[r]))
    return picks
