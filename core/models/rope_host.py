"""Rotary tables in pure Python, for a browser without numpy.

The same arithmetic as rope.py's numpy version, with every intermediate rounded to
float32 (`array("f")` stores the nearest float32), so the tables agree with the numpy
ones to the last bit or two; they are small (positions x rot_dim/2) and built once.
"""
import math
from array import array

from ..errors import EmberError


def _f32(values):
    """Each value rounded to the nearest float32, as Python floats."""
    return list(array("f", values))


def inverse_frequencies(rot_dim, theta, scaling=None, seq_len=None):
    """The rot_dim/2 inverse frequencies (float32-rounded floats) after any rope scaling,
    and the attention scale; rope.inverse_frequencies without numpy."""
    exponents = _f32([i / rot_dim for i in range(0, rot_dim, 2)])
    theta32 = _f32([theta])[0]
    inv = _f32([1.0 / p for p in _f32([theta32 ** e for e in exponents])])
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind in (None, "default"):
        return inv, 1.0
    factor = float(scaling.get("factor", 1.0))
    if kind == "linear":
        return _f32([v / factor for v in inv]), 1.0
    if kind == "dynamic":
        original = int(scaling.get("original_max_position_embeddings")
                       or scaling["max_position_embeddings"])
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
                out.append(scaled)
                continue
            smooth = _f32([(old / wavelen - low) / (high - low)])[0]
            out.append(_f32([(1 - smooth) * scaled / factor + smooth * scaled])[0])
        return out, 1.0
    raise EmberError(f"rope: rope_type {kind!r} is not supported (default, linear, dynamic, "
                     "llama3)", op="rope", rope_type=kind)


def rope_tables(rot_dim, max_len, theta, scaling, interleaved, freq_factors=None):
    """(cos, sin) as [max_len][rot/2] lists and (cos, signed sin) as [max_len][rot] lists,
    laid out as rope.RotaryEmbedding expects them."""
    inv, attention_scale = inverse_frequencies(rot_dim, theta, scaling, seq_len=max_len)
    if freq_factors is not None:   # GGUF llama3 models: per-frequency divisors
        factors = list(freq_factors)
        inv = _f32([f / float(d) for f, d in zip(inv, factors)])
    cos, sin, cos2, sin2 = [], [], [], []
    for pos in range(max_len):
        freqs = _f32([pos * f for f in inv])
        c = _f32([math.cos(a) * attention_scale for a in freqs])
        s = _f32([math.sin(a) * attention_scale for a in freqs])
        cos.append(c)
        sin.append(s)
        if interleaved:
            cos2.append([v for v in c for _ in (0, 1)])
            sin2.append([x for v in s for x in (-v, v)])
        else:
            cos2.append(c + c)
            sin2.append([-v for v in s] + s)
    return cos, sin, cos2, sin2
