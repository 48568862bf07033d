"""Choosing the next token from logits, on the host, as plain Python lists.

One row of a vocabulary is a few thousand floats, read back once per step: lists do,
and the same code runs in a browser page without numpy. Greedy decoding without a
repetition penalty never comes here: generate.py takes the argmax on the device and
reads back one id per row.

The processors follow transformers' definitions so the same settings mean the same
thing: repetition penalty divides positive and multiplies negative logits of tokens
already present; temperature divides; top-k keeps logits >= the k-th largest; top-p
keeps the smallest set of most likely tokens whose probability reaches p (at least one).
Penalised and tempered logits are rounded to float32, as transformers computes them.
Sampling draws one uniform number per row from an `ember.Generator`, so a seed gives
the same tokens on every device.
"""
import math
from array import array

NEG_INF = float("-inf")


def _f32(values):
    """Each value rounded to the nearest float32 (array("f") stores exactly that)."""
    return array("f", values).tolist()


def apply_repetition_penalty(rows, history, penalty):
    """rows: [batch][vocab] logits; history: per row, the token ids seen so far."""
    if penalty == 1.0:
        return [list(row) for row in rows]
    p = _f32([penalty])[0]
    out = []
    for row, seen in zip(rows, history):
        row = [float(s) for s in row]
        for i in set(int(t) for t in seen):
            s = row[i]
            row[i] = _f32([s * p if s < 0 else s / p])[0]
        out.append(row)
    return out


def apply_temperature(rows, temperature):
    if temperature in (0.0, 1.0):
        return [list(row) for row in rows]
    t = _f32([temperature])[0]
    return [_f32([s / t for s in row]) for row in rows]


def apply_top_k(rows, k):
    return [_top_k(list(row), k) for row in rows]


def _top_k(row, k):
    if k <= 0 or k >= len(row):
        return row
    kth = sorted(row, reverse=True)[k - 1]
    return [NEG_INF if s < kth else s for s in row]


def apply_top_p(rows, p):
    return [_top_p(list(row), p) for row in rows]


def _top_p(row, p):
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
    """The first index of the largest value (as numpy's and torch's argmax)."""
    return row.index(max(row))


def process_logits(rows, history, config):
    """The processed rows sampling draws from (or greedy takes the argmax of)."""
    rows = apply_repetition_penalty(rows, history, config.repetition_penalty)
    if config.do_sample:
        rows = apply_temperature(rows, config.temperature)
        rows = apply_top_p(apply_top_k(rows, config.top_k), config.top_p)
    return rows


def choose_tokens(rows, history, config, generator):
    """Next token id per row: argmax when greedy, else one draw from the filtered softmax."""
    rows = process_logits(rows, history, config)
    if not config.do_sample:
        return [argmax(row) for row in rows]
    u = generator.uniform((len(rows),))        # a list, or an array where numpy is
    return [_draw(softmax(row), float(u[r])) for r, row in enumerate(rows)]


def _draw(probs, u):
    target, cdf = u * sum(probs), 0.0
    for i, q in enumerate(probs):
        cdf += q
        if cdf > target and q > 0:
            return i
    return argmax(probs)   # rounding at the end of the cdf: the most likely token
