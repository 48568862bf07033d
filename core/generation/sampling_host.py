"""sampling.py's processors in pure Python, on logits read back as lists (a browser
without numpy). One row of a vocabulary is a few thousand floats: a list is fine.

Same definitions as sampling.py (transformers'): repetition penalty, temperature,
top-k (keep logits >= the k-th largest), top-p (drop the least likely tokens whose
cumulative probability stays <= 1 - p; the most likely always stays), then argmax
or one draw from the softmax with a uniform number from an `ember.Generator`.
"""
import math

NEG_INF = float("-inf")


def apply_repetition_penalty(row, seen, penalty):
    if penalty == 1.0 or not seen:
        return row
    out = list(row)
    for i in set(int(t) for t in seen):
        s = out[i]
        out[i] = s * penalty if s < 0 else s / penalty
    return out


def apply_top_k(row, k):
    if k <= 0 or k >= len(row):
        return row
    kth = sorted(row, reverse=True)[k - 1]
    return [NEG_INF if s < kth else s for s in row]


def apply_top_p(row, p):
    if p >= 1.0:
        return row
    order = sorted(range(len(row)), key=row.__getitem__)          # ascending, stable
    probs = softmax([row[i] for i in order])
    out = list(row)
    cumulative = 0.0
    for rank, i in enumerate(order[:-1]):                          # keep the most likely
        cumulative += probs[rank]
        if cumulative <= 1 - p:
            out[i] = NEG_INF
    return out


def softmax(row):
    m = max(row)
    e = [math.exp(s - m) if s != NEG_INF else 0.0 for s in row]
    total = sum(e)
    return [v / total for v in e]


def argmax(row):
    """The first index of the largest value (as numpy's argmax)."""
    best, index = row[0], 0
    for i, v in enumerate(row):
        if v > best:
            best, index = v, i
    return index


def choose_token(row, seen, config, generator):
    """The next token id for one row of logits (a list of floats)."""
    row = apply_repetition_penalty(row, seen, config.repetition_penalty)
    if not config.do_sample:
        return argmax(row)
    if config.temperature != 1.0:
        row = [s / config.temperature for s in row]
    row = apply_top_p(apply_top_k(row, config.top_k), config.top_p)
    probs = softmax(row)
    u = float(_first(generator.uniform((1,))))   # a list, or an array where numpy is
    target, cdf = u * sum(probs), 0.0
    for i, q in enumerate(probs):
        cdf += q
        if cdf > target and q > 0:
            return i
    return argmax(probs)   # rounding at the end of the cdf: the most likely token


def choose_tokens(rows, history, config, generator):
    """Next token id per row of `rows` (lists of floats)."""
    return [choose_token(row, seen, config, generator) for row, seen in zip(rows, history)]


def _first(values):
    return values[0]
