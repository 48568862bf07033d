"""Rotary position embeddings: frequency tables (default, linear, dynamic NTK, llama3
scaling) and their application in the two layouts checkpoints use.

- "half" (Hugging Face Llama/Mistral/Qwen2/Gemma/Phi-3): a head's first and second halves
  form the (x, y) pairs, so the rotation partner of element i is i ± d/2.
- "interleaved" (Meta's original, llama.cpp's GGUF llama): pairs are adjacent elements.

Whole heads rotate through ember.functional.rope (the backend contract's rope). A partial
rotation is written as  x * cos + swap(x) * sin_signed,  where swap exchanges the two
elements of each pair (one gather over a size-2 axis) and sin_signed carries the minus
sign of the first partner.
Tables are built once, for every position the cache can hold, in float32 as transformers
computes them: the rot/2 inverse frequencies on the host in plain Python (tiny), the
[positions, rot/2] angles and their cos/sin as tensor ops on the model's device. One path
with or without numpy.
"""

import math
from array import array

from .. import dtype as dt
from ..errors import EmberError
from ..tensor import arange, cat, stack, tensor


def _f32(values):
    """Each value rounded to the nearest float32 (array("f") stores that), as floats."""
    return list(array("f", values))


def inverse_frequencies(rot_dim, theta, scaling=None, seq_len=None):
    """The rot_dim/2 inverse frequencies, after any rope scaling, and the attention
    scale. Small host data, so plain Python, with every step rounded to float32 as
    transformers computes it in torch (the GPU's pow is too coarse for this: a few ulp
    here become 5e-4 of angle at position 5,000)."""
    exponents = _f32([i / rot_dim for i in range(0, rot_dim, 2)])
    theta32 = _f32([theta])[0]
    inv = _f32([1.0 / p for p in _f32([theta32**e for e in exponents])])
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind in (None, "default"):
        return inv, 1.0
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return _f32([v / factor for v in inv]), 1.0
    if kind == "dynamic":
        original = int(
            scaling.get("original_max_position_embeddings") or scaling["max_position_embeddings"]
        )
        if seq_len is not None and seq_len > original:
            growth = (factor * seq_len / original) - (factor - 1)
            base = theta * growth ** (rot_dim / (rot_dim - 2))
            return inverse_frequencies(rot_dim, base)[0], 1.0
        return inv, 1.0
    if kind == "llama3":
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old / low, old / high
        out = []
        for f in inv:
            wavelen = _f32([2 * math.pi / f])[0]
            scaled = _f32([f / factor])[0] if wavelen > low_wavelen else f
            if wavelen < high_wavelen or wavelen > low_wavelen:
                out.append(scaled)  # long and short wavelengths: scaled as they are
                continue
            smooth = _f32([(old / wavelen - low) / (high - low)])[0]
            out.append(_f32([(1 - smooth) * scaled / factor + smooth * scaled])[0])
        return out, 1.0
    raise EmberError(
        f"rope: rope_type {kind!r} is not supported (default, linear, dynamic, llama3)",
        op="rope",
        rope_type=kind,
    )


def rope_tables(rot_dim, max_len, theta, scaling, interleaved, freq_factors=None, device=None):
    """f32 tensors ([max_len, rot/2] cos, sin, [max_len, rot] cos, signed sin) on
    `device`, laid out for the pairing `interleaved` names."""
    freqs, attention_scale = inverse_frequencies(rot_dim, theta, scaling, seq_len=max_len)
    inv = tensor(freqs, dtype=dt.f32, device=device)
    if freq_factors is not None:  # GGUF llama3 models: per-frequency divisors
        inv = inv / tensor(freq_factors, dtype=dt.f32, device=device).reshape(-1)
    pos = arange(max_len, dtype=dt.f32, device=device)
    freqs = pos.unsqueeze(1) * inv.unsqueeze(0)  # [max_len, rot/2]
    cos, sin = freqs.cos(), freqs.sin()
    if attention_scale != 1.0:
        cos, sin = cos * attention_scale, sin * attention_scale
    if interleaved:
        cos2 = stack([cos, cos], -1).reshape(max_len, rot_dim)
        sin2 = stack([-sin, sin], -1).reshape(max_len, rot_dim)
    else:
        cos2, sin2 = cat([cos, cos], 1), cat([-sin, sin], 1)
    return cos, sin, cos2, sin2


class RotaryEmbedding:
    """cos/sin tables for positions [0, max_len) on a device, and `apply(x, positions)`.

    x is [..., head_dim]; positions is either an int (the first position,
    the same for every row: the tables are narrowed, a view) or a [batch, seq] integer
    Tensor (left-padded batches: rows are gathered).
    """

    def __init__(
        self,
        head_dim,
        max_len,
        theta=10000.0,
        scaling=None,
        rot_dim=None,
        interleaved=False,
        device=None,
        dtype=dt.f32,
        freq_factors=None,
    ):
        self.head_dim = head_dim
        self.rot_dim = rot_dim or head_dim
        if self.rot_dim % 2 or self.rot_dim > head_dim:
            raise EmberError(
                f"rope: rotary dim {self.rot_dim} must be even and at most the head dim {head_dim}",
                op="rope",
            )
        self.max_len = max_len
        self.interleaved = interleaved
        cos, sin, cos2, sin2 = rope_tables(
            self.rot_dim, max_len, theta, scaling, interleaved, freq_factors, device
        )
        self.cos, self.sin = cos2.to(dtype), sin2.to(dtype)
        self._swap = tensor([1, 0], dtype=dt.i64, device=device)
        # ember.functional.rope (Backend.rope) takes plain [T, rot/2] or [B, T, rot/2]
        # tables and rotates whole heads.
        self.fused = self.rot_dim == head_dim
        if self.fused:
            self.cos_half, self.sin_half = cos.to(dtype), sin.to(dtype)

    def fused_tables(self, positions, seq_len):
        """(cos, sin) for ember.functional.rope: [T, rot/2] for a first position (int), or
        [batch, T, rot/2] for per-row positions (a [batch, seq] tensor, a left-padded
        batch); None for a partial rotation, which `rotate` does."""
        if not self.fused:
            return None
        if isinstance(positions, int):
            return (
                self.cos_half.narrow(0, positions, seq_len),
                self.sin_half.narrow(0, positions, seq_len),
            )
        return self.cos_half.index_select(0, positions), self.sin_half.index_select(0, positions)

    def rotate_fused(self, x, tables):
        """x [..., T, head_dim] (or [B, ..., T, head_dim] with per-row tables) rotated by
        ember.functional.rope (a new tensor)."""
        from ..functional import rope

        return rope(x, tables[0], tables[1], interleaved=self.interleaved)

    def tables(self, positions, seq_len):
        """(cos, sin), each [batch or 1, seq, rot_dim]: unsqueeze the heads dim to apply."""
        if isinstance(positions, int):
            if positions < 0 or positions + seq_len > self.max_len:
                raise EmberError(
                    f"rope: positions {positions}..{positions + seq_len - 1} exceed "
                    f"the {self.max_len} the cache was built for",
                    op="rope",
                )
            cos = self.cos.narrow(0, positions, seq_len)
            sin = self.sin.narrow(0, positions, seq_len)
            return cos.unsqueeze(0), sin.unsqueeze(0)
        return self.cos.index_select(0, positions), self.sin.index_select(0, positions)

    def rotate(self, x, cos, sin):
        """Rotate the first rot_dim features of x [..., head_dim]; cos/sin broadcast to it."""
        if self.rot_dim < self.head_dim:
            rot = x.narrow(-1, 0, self.rot_dim)
            rest = x.narrow(-1, self.rot_dim, self.head_dim - self.rot_dim)
            from ..tensor import cat

            return cat([self._rotate(rot, cos, sin), rest], dim=-1)
        return self._rotate(x, cos, sin)

    def _rotate(self, x, cos, sin):
        lead = x.shape[:-1]
        d = self.rot_dim
        if self.interleaved:
            swapped = x.reshape(lead + (d // 2, 2)).index_select(-1, self._swap)
        else:
            swapped = x.reshape(lead + (2, d // 2)).index_select(-2, self._swap)
        return x * cos + swapped.reshape(lead + (d,)) * sin
