"""Choosing the next token from logits, on the host, as plain Python lists.

One row of a vocabulary is a few thousand floats, read back once per step: lists do,
and the same code runs in a browser page without numpy. The per-element work stays on
the device where it can: greedy decoding without a repetition penalty takes the argmax
there (one id per row comes back), and sampling without one reads back the row's
`weights` computed there; only a penalty (a few ids per row) needs the logits here.

The processors follow transformers' definitions so the same settings mean the same
thing: repetition penalty divides positive and multiplies negative logits of tokens
already present; temperature divides; top-k keeps logits >= the k-th largest; top-p
keeps the smallest set of most likely tokens whose probability reaches p (at least one).
Penalised and tempered logits are rounded to float32, as transformers computes them.
Sampling draws one uniform number per row from an `ember.Generator`, so a seed gives
the same tokens on every device.
"""

import heapq
import math
from array import array
from bisect import bisect_left, bisect_right
from itertools import accumulate

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
    for row, seen in zip(rows, history, strict=True):
        row = [float(s) for s in row]
        for i in {int(t) for t in seen}:
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
    order = sorted(range(len(row)), key=row.__getitem__)  # ascending, stable
    probs = softmax([row[i] for i in order])
    out = list(row)
    cumulative = 0.0
    for rank, i in enumerate(order[:-1]):  # keep the most likely
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
    rows = apply_repetition_penalty(rows, history, config.repetition_penalty)
    if not config.do_sample:
        return [argmax(row) for row in rows]
    return draw_tokens([weights(row, config.temperature) for row in rows], config, generator)


def weights(row, temperature):
    """exp((row - max) / temperature): softmax(row / temperature) up to its sum (what
    generate.py computes on the device when no penalty has to change the row first)."""
    top, scale = max(row), 1.0 / temperature
    return [math.exp((s - top) * scale) for s in row]


def draw_tokens(rows, config, generator):
    """One draw per row of unnormalised probabilities (`weights`) after top-k and top-p,
    the filters apply_top_k / apply_top_p define (exp keeps the logits' order); the
    C-level helpers (sorted, accumulate, bisect) do the work, so a vocabulary-sized row
    costs little in pure Python."""
    u = generator.uniform((len(rows),))  # a list, or an array where numpy is
    return [_draw(row, config, float(u[r])) for r, row in enumerate(rows)]


def _draw(w, config, u):
    k = config.top_k
    floor = heapq.nlargest(k, w)[-1] if 0 < k < len(w) else 0.0
    ties = 0
    if config.top_p < 1.0:
        floor, ties = _top_p_floor(w, floor, config.top_p)
    if floor > 0.0:
        w = [v if v >= floor else 0.0 for v in w]
    if ties:  # top-p drops the first `ties` weights equal to the floor, in index order
        w = list(w)
        for i, v in enumerate(w):
            if v == floor:
                w[i] = 0.0
                ties -= 1
                if not ties:
                    break
    cdf = list(accumulate(w))
    pick = bisect_right(cdf, u * cdf[-1])
    # rounding at the end of the cdf never lands past the last token that can be drawn
    return pick if pick < len(w) and w[pick] > 0 else argmax(w)


def _top_p_floor(w, floor, p):
    """(the smallest weight top-p keeps of those >= floor, how many weights equal to it
    it still drops): the least likely go while their cumulative probability stays
    <= 1 - p, in ascending stable order; the most likely always stays."""
    kept = sorted(v for v in w if v >= floor)
    cumulative = list(accumulate(kept))
    removed = min(bisect_right(cumulative, (1 - p) * cumulative[-1]), len(kept) - 1)
    if not removed:
        return floor, 0
    cut = kept[removed - 1]
    if kept[removed] > cut:
        return kept[removed], 0
    return cut, removed - bisect_left(kept, cut)
