"""Rotary tables: one path on every device, in float32 as transformers computes them
(the reference formula written out here in numpy), for each rope scaling kind; and
WebGPU's sin/cos hold their accuracy far outside [-pi, pi], where rotary angles live."""
import math

import numpy as np
import pytest

import ember
from ember.models.rope import rope_tables

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _reference(rot, length, theta, scaling):
    """transformers' float32 recipe in numpy (default, linear and llama3 kinds)."""
    exponents = np.arange(0, rot, 2, dtype=np.int64).astype(np.float32) / np.float32(rot)
    # theta ** e correctly rounded to float32, as torch's pow gives it: numpy's own float32
    # power is a SIMD approximation on AVX-512 hosts, an ulp off in 7 of 32 values for
    # theta 500,000, which angles of 3,000 rad turn into cosines 2.4e-4 apart
    powers = (np.float64(np.float32(theta)) ** exponents.astype(np.float64)).astype(np.float32)
    inv = (np.float32(1.0) / powers).astype(np.float32)
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if kind == "linear":
        inv = inv / np.float32(scaling["factor"])
    elif kind == "llama3":
        f, lo, hi = (float(scaling[k]) for k in ("factor", "low_freq_factor",
                                                  "high_freq_factor"))
        old = float(scaling["original_max_position_embeddings"])
        wavelen = np.float32(2 * math.pi) / inv
        scaled = np.where(wavelen > old / lo, inv / np.float32(f), inv).astype(np.float32)
        smooth = ((old / wavelen - lo) / (hi - lo)).astype(np.float32)
        smoothed = (1 - smooth) * scaled / np.float32(f) + smooth * scaled
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = np.where(medium, smoothed, scaled).astype(np.float32)
    freqs = np.outer(np.arange(length, dtype=np.float32), inv).astype(np.float32)
    return np.cos(freqs), np.sin(freqs)


@pytest.mark.parametrize("scaling", [None, {"type": "linear", "factor": 2.0}, LLAMA3],
                         ids=["default", "linear", "llama3"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_tables_match_the_reference_recipe(device, scaling, interleaved):
    rot, length = 64, 3000
    cos_ref, sin_ref = _reference(rot, length, 500000.0, scaling)
    cos, sin, cos2, sin2 = (t.numpy() for t in rope_tables(
        rot, length, 500000.0, scaling, interleaved, device=device))
    # CPU: numpy's own cos of the same float32 angles (the inverse frequencies may differ
    # by an ulp); WebGPU: its cos/sin after range reduction, angles up to 3,000 rad
    atol = 1e-6 if device.kind == "cpu" else 1e-6 + 3e-7
    np.testing.assert_allclose(cos, cos_ref, atol=atol, rtol=0)
    np.testing.assert_allclose(sin, sin_ref, atol=atol, rtol=0)
    if interleaved:
        np.testing.assert_array_equal(cos2[:, 0::2], cos)
        np.testing.assert_array_equal(sin2[:, 1::2], sin)
        np.testing.assert_array_equal(sin2[:, 0::2], -sin)
    else:
        np.testing.assert_array_equal(cos2, np.concatenate([cos, cos], 1))
        np.testing.assert_array_equal(sin2, np.concatenate([-sin, sin], 1))


def test_sin_cos_stay_accurate_far_from_zero(device):
    x = np.concatenate([np.linspace(-20, 20, 1001),
                        np.arange(0, 131072, 7.3), -np.arange(0, 60000, 3.1)]).astype(np.float32)
    t = ember.tensor(x, device=device)
    np.testing.assert_allclose(t.cos().numpy(), np.cos(x.astype(np.float64)), atol=1e-6, rtol=0)
    np.testing.assert_allclose(t.sin().numpy(), np.sin(x.astype(np.float64)), atol=1e-6, rtol=0)
    special = ember.tensor([np.inf, -np.inf, np.nan], device=device)
    assert np.isnan(special.cos().numpy()).all() and np.isnan(special.sin().numpy()).all()
