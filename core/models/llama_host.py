"""The Llama forward's host-side data: token ids, attention masks and positions, as
plain Python lists (they are batch x sequence, small), and the additive causal mask
built on the device from two `arange`s and one comparison, skipped entirely when it
would allow everything (a decode step without padding). Nothing here is O(t^2) on the
host, and nothing needs numpy, so a browser page runs the same code.
"""

from .. import dtype as dt
from ..errors import ShapeMismatch, fmt_shape
from ..hostdata import pack, unpack
from ..tensor import Tensor, arange, tensor, where

# The most negative finite float32 (numpy's finfo(float32).min), written out so that
# importing this needs no numpy.
MASKED = -3.4028234663852886e38


def round_to_dtype(value, dtype):
    """A Python float rounded to what `dtype` can hold (transformers rounds Gemma's
    embedding scale to the model's dtype first)."""
    return float(unpack(pack([float(value)], dtype), dtype, (1,))[0])


def bool_rows(mask, expected):
    """A 0/1 attention mask ([batch][length]: nested lists, a numpy array or a Tensor)
    as lists of bools, checked to have the shape `expected`."""
    if isinstance(mask, Tensor):
        mask = mask.tolist()
    try:
        rows = [[bool(v) for v in row] for row in mask]
    except TypeError:
        rows = None
    shape = (len(rows), len(rows[0]) if rows else 0) if rows is not None else None
    if rows is None or any(len(r) != shape[1] for r in rows) or shape != expected:
        got = fmt_shape(shape) if shape is not None else "a 1-D sequence"
        raise ShapeMismatch(
            f"forward: attention_mask has shape {got}, expected "
            f"{fmt_shape(expected)} (cache length + new tokens)",
            op="llama.forward",
            shapes=(shape, expected),
        )
    return rows


def positions(key_mask, past, device):
    """An int start when every row uses past..past+t-1, else a [b, t] i64 tensor holding
    each real token's index among its row's real tokens (padding slots get 1, any valid
    row of the tables)."""
    if key_mask is None or all(all(row) for row in key_mask):
        return past
    out = []
    for row in key_mask:
        count, pos = 0, []
        for real in row:
            count += real
            pos.append(count - 1 if real else 1)
        out.append(pos[past:])
    return tensor(out, dtype=dt.i64, device=device)


def additive_mask(b, t, past, window, key_mask, low, dtype, device):
    """The additive mask [b, 1, 1, t, past+t] (0 where a query may look, `low` elsewhere)
    for a causal attention with an optional sliding window, or None when it allows
    everything."""
    total = past + t
    padded = key_mask is not None and not all(all(row) for row in key_mask)
    # The last query sits at position total-1 and sees every key; earlier ones see less.
    if t == 1 and not padded and (window is None or window >= total):
        return None
    q = arange(past, total, dtype=dt.i64, device=device).reshape(t, 1)
    k = arange(0, total, dtype=dt.i64, device=device).reshape(1, total)
    allowed = k <= q  # u8 [t, total]
    if window is not None:
        allowed = allowed * (k > q - window)
    allowed = allowed.reshape(1, t, total)
    if padded:
        keys = tensor(
            [[1 if v else 0 for v in row] for row in key_mask], dtype=dt.u8, device=device
        ).reshape(b, 1, total)
        allowed = allowed * keys  # [b, t, total]
    zeros = tensor([0.0], dtype=dt.f32, device=device)
    add = where(allowed, zeros, low).broadcast_to(b, t, total).contiguous()
    add = add.reshape(b, 1, 1, t, total)
    return add if dtype is dt.f32 else add.to(dtype)
