"""Rotary position embeddings: frequency tables (default, linear, dynamic NTK, llama3
scaling) and their application in the two layouts checkpoints use.

- "half" (Hugging Face Llama/Mistral/Qwen2/Gemma/Phi-3): a head's first and second halves
  form the (x, y) pairs, so the rotation partner of element i is i ± d/2.
- "interleaved" (Meta's original, llama.cpp's GGUF llama): pairs are adjacent elements.

Rotation is written as  x * cos + swap(x) * sin_signed,  where swap exchanges the two
elements of each pair (one gather over a size-2 axis) and sin_signed carries the minus
sign of the first partner; that is four tensor ops, each one pass over memory.
Tables are computed once on the host, in float32 as transformers does, for every
position the cache can hold: with numpy where it is installed, in pure Python (values
rounded to float32 at each step, see rope_host.py) in a browser without it.
"""
import math

from .. import dtype as dt
from ..errors import EmberError
from ..tensor import tensor

try:
    import numpy as np
except ImportError:   # Pyodide without numpy: the tables come from rope_host.py
    np = None


def inverse_frequencies(rot_dim, theta, scaling=None, seq_len=None):
    """The rot_dim/2 inverse frequencies in float32, after any rope scaling."""
    exponents = np.arange(0, rot_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(rot_dim)
    inv = (np.float32(1.0) / (np.float32(theta) ** exponents)).astype(np.float32)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind in (None, "default"):
        return inv, 1.0
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return (inv / np.float32(factor)).astype(np.float32), 1.0
    if kind == "dynamic":
        original = int(scaling.get("original_max_position_embeddings") or scaling["max_position_embeddings"])
        if seq_len is not None and seq_len > original:
            base = theta * ((factor * seq_len / original) - (factor - 1)) ** (rot_dim / (rot_dim - 2))
            return inverse_frequencies(rot_dim, base)[0], 1.0
        return inv, 1.0
    if kind == "llama3":
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old = float(scaling["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = (2 * math.pi / inv).astype(np.float32)
        scaled = np.where(wavelen > low_wavelen, inv / np.float32(factor), inv).astype(np.float32)
        smooth = ((old / wavelen - low) / (high - low)).astype(np.float32)
        smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled).astype(np.float32), 1.0
    raise EmberError(f"rope: rope_type {kind!r} is not supported (default, linear, dynamic, "
                     "llama3)", op="rope", rope_type=kind)


def _numpy_tables(rot_dim, max_len, theta, scaling, interleaved, freq_factors):
    """([max_len, rot/2] cos, sin, [max_len, rot] cos, signed sin) as float32 arrays."""
    inv, attention_scale = inverse_frequencies(rot_dim, theta, scaling, seq_len=max_len)
    if freq_factors is not None:   # GGUF llama3 models: per-frequency divisors
        inv = (inv / np.asarray(freq_factors, dtype=np.float32).reshape(-1)).astype(np.float32)
    pos = np.arange(max_len, dtype=np.float32)
    freqs = np.outer(pos, inv).astype(np.float32)                 # [max_len, rot/2]
    cos = np.cos(freqs) * np.float32(attention_scale)
    sin = np.sin(freqs) * np.float32(attention_scale)
    if interleaved:
        cos2 = np.repeat(cos, 2, axis=1)
        sin2 = np.stack([-sin, sin], axis=-1).reshape(max_len, rot_dim)
    else:
        cos2 = np.concatenate([cos, cos], axis=1)
        sin2 = np.concatenate([-sin, sin], axis=1)
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)  # noqa: E731
    return f32(cos), f32(sin), f32(cos2), f32(sin2)


class RotaryEmbedding:
    """cos/sin tables for positions [0, max_len) on a device, and `apply(x, positions)`.

    x is [..., head_dim]; positions is either an int (the first position,
    the same for every row: the tables are narrowed, a view) or a [batch, seq] integer
    Tensor (left-padded batches: rows are gathered).
    """

    def __init__(self, head_dim, max_len, theta=10000.0, scaling=None, rot_dim=None,
                 interleaved=False, device=None, dtype=dt.f32, freq_factors=None):
        self.head_dim = head_dim
        self.rot_dim = rot_dim or head_dim
        if self.rot_dim % 2 or self.rot_dim > head_dim:
            raise EmberError(f"rope: rotary dim {self.rot_dim} must be even and at most the head "
                             f"dim {head_dim}", op="rope")
        self.max_len = max_len
        self.interleaved = interleaved
        if np is None:
            from .rope_host import rope_tables
            cos, sin, cos2, sin2 = rope_tables(self.rot_dim, max_len, theta, scaling,
                                               interleaved, freq_factors)
            as_tensor = lambda rows: tensor(rows, dtype=dt.f32, device=device)  # noqa: E731
        else:
            cos, sin, cos2, sin2 = _numpy_tables(self.rot_dim, max_len, theta, scaling,
                                                 interleaved, freq_factors)
            as_tensor = lambda arr: tensor(arr, dtype=dt.f32, device=device)  # noqa: E731
        self.cos, self.sin = as_tensor(cos2), as_tensor(sin2)
        if dtype is not dt.f32:
            self.cos, self.sin = self.cos.to(dtype), self.sin.to(dtype)
        self._swap = tensor([1, 0], dtype=dt.i64, device=device)
        # ember.functional.rope (Backend.rope) takes plain [T, rot/2] or [B, T, rot/2]
        # tables and rotates whole heads.
        self.fused = self.rot_dim == head_dim
        if self.fused:
            self.cos_half = as_tensor(cos).to(dtype)
            self.sin_half = as_tensor(sin).to(dtype)

    def fused_tables(self, positions, seq_len):
        """(cos, sin) for ember.functional.rope: [T, rot/2] for a first position (int), or
        [batch, T, rot/2] for per-row positions (a [batch, seq] tensor, a left-padded
        batch); None for a partial rotation, which `rotate` does."""
        if not self.fused:
            return None
        if isinstance(positions, int):
            return (self.cos_half.narrow(0, positions, seq_len),
                    self.sin_half.narrow(0, positions, seq_len))
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
                raise EmberError(f"rope: positions {positions}..{positions + seq_len - 1} exceed "
                                 f"the {self.max_len} the cache was built for", op="rope")
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
