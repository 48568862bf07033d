"""Aligning text tokens to audio frames from cross-attention, as openai-whisper and
CTranslate2 (faster-whisper) do for word timestamps: the attention of a few heads over the
encoder positions, softmaxed over the frames that hold audio, standardized over the
tokens, median-filtered over time, averaged over the heads; then the monotonic path of
greatest total attention through the (token, frame) matrix by dynamic time warping.

Host-side numpy on small matrices (tokens of one window x at most 1500 positions).
"""

import numpy as np

MEDIAN_FILTER_WIDTH = 7


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def standardize(x, axis=-2):
    """(x - mean) / std over `axis` (the population std, no epsilon, as CTranslate2's
    layer norm there); a constant line stays at zero instead of dividing by zero."""
    mean = np.mean(x, axis=axis, keepdims=True)
    std = np.std(x, axis=axis, keepdims=True)
    return (x - mean) / np.where(std > 0, std, 1.0)


def median_filter(x, width=MEDIAN_FILTER_WIDTH):
    """The median of each `width` (odd) window along the last axis, the ends mirrored
    without repeating the edge sample (numpy's "reflect"); a line no longer than
    width // 2 is returned as it is, since it cannot be mirrored."""
    if width % 2 != 1:
        raise ValueError(f"median filter width must be odd, got {width}")
    half = width // 2
    if x.shape[-1] <= half:
        return x
    pad = [(0, 0)] * (x.ndim - 1) + [(half, half)]
    padded = np.pad(x, pad, mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.median(windows, axis=-1).astype(x.dtype, copy=False)


def dtw(cost):
    """The monotonic path through `cost` [n, m] (float32) from (0, 0) to (n-1, m-1) of
    least total cost, each step one row down, one column right, or both: a list of
    (row, column) pairs in order.

    The recurrence is CTranslate2's and openai-whisper's, ties going to the diagonal step
    only when it is strictly cheaper than both others, then the vertical one, else the
    horizontal; the walk back stops at the first row or column as CTranslate2's does. It
    is evaluated one anti-diagonal at a time (every cell there depends only on the two
    before), in float32 like theirs, so the same sums and the same ties come out."""
    cost = np.asarray(cost, dtype=np.float32)
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    total[0, 0] = 0.0
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    for d in range(2, n + m + 1):  # cells (i, j) with i + j = d, 1 <= i <= n, 1 <= j <= m
        i = np.arange(max(1, d - m), min(n, d - 1) + 1)
        j = d - i
        c0, c1, c2 = total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]
        diag = (c0 < c1) & (c0 < c2)
        down = ~diag & (c1 < c0) & (c1 < c2)
        best = np.where(diag, c0, np.where(down, c1, c2))
        total[i, j] = cost[i - 1, j - 1] + best
        trace[i, j] = np.where(diag, 0, np.where(down, 1, 2))
    path = []
    i, j = n, m
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        step = trace[i, j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    path.reverse()
    return path


def attention_matrix(scores, positions, width=MEDIAN_FILTER_WIDTH):
    """scores [heads, tokens, all positions] (the pre-softmax cross-attention) ->
    [tokens, positions]: softmax over the first `positions` (those with audio),
    standardized over the tokens, median-filtered over time, averaged over the heads."""
    weights = softmax(np.asarray(scores, dtype=np.float32)[:, :, :positions])
    return median_filter(standardize(weights), width).mean(axis=0)
