"""The array backend's in-place activation forms agree bit for bit with their ops.py rows
(the reference forms), never write their input, and serve every float dtype and shape;
exact GELU and SiLU on float32, where llvm_math's kernels are built, are those kernels',
within 3e-7 of float64."""

import math

import numpy as np
import pytest

import ember
import ember.functional as F
from ember.backends import llvm_math
from ember.backends.array_fast import COMPILED, UNARY_INPLACE
from ember.ops import UNARY

SPECIAL = [0.0, -0.0, 1e-40, -1e-40, 1e-310, np.inf, -np.inf, np.nan, 30.0, -30.0, 1e30, -1e30]


@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", sorted(UNARY_INPLACE))
def test_inplace_form_is_bit_identical_to_the_ops_row(op, np_dtype):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(50_000) * 4, SPECIAL]).astype(np_dtype)
    x.flags.writeable = False  # the form must not write its input (it may be an mmap)
    with np.errstate(all="ignore"):
        got = UNARY_INPLACE[op](np, x)
        want = UNARY[op].array(np, x)
    kernels = llvm_math.kernels()
    if op in COMPILED and np_dtype == np.float32 and kernels is not None:
        want = np.empty_like(x)  # the backend's op is the compiled one, checked below
        kernels.apply(op, x, want)
    assert got.dtype == np_dtype
    bits = np.uint32 if np_dtype == np.float32 else np.uint64
    same = (got.view(bits) == want.view(bits)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("op", sorted(UNARY_INPLACE))
def test_tensor_ops_use_it_on_strided_and_0d_inputs(op, dtype):
    base = np.random.default_rng(1).standard_normal((6, 10)).astype(np.float32)
    dt = ember.as_dtype(dtype)
    x = ember.tensor(base).to(dt)
    for view in (x, x.t(), x[::2, 1::3], x[0, 0]):
        got = getattr(view, op)()
        ref = view.to(ember.f32).numpy() if dt is not ember.f64 else view.numpy()
        with np.errstate(all="ignore"):  # the backend's own form, on contiguous f32/f64
            want = ember.tensor(
                np.asarray(UNARY_INPLACE[op](np, np.ascontiguousarray(ref))), dtype=dt
            )
        assert got.shape == view.shape and got.dtype is dt
        np.testing.assert_array_equal(got.to(ember.f64).numpy(), want.to(ember.f64).numpy())
    assert np.array_equal(x.to(ember.f32).numpy(), ember.tensor(base).to(dt).to(ember.f32).numpy())


def _gelu64(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _mixed(seed, normal, span):
    """float32 values: `normal` draws of 4 N(0, 1), then 20,000 uniform in (-span, span)."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.standard_normal(normal) * 4, rng.uniform(-span, span, 20_000)])
    return x.astype(np.float32)


def _gelu_tanh64(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize("op", ["gelu", "gelu_tanh"])
def test_the_compiled_gelu_forms_are_exact_to_float32_rounding(math_kernels, op):
    """llvm_math's GELU and GELU tanh form (Gemma's), in place and into another array, on
    vector blocks and their tails alike: within 3e-7 relative of float64 for x > 0.01 and
    2e-7 absolute below (as close as numpy's form), the special values as numpy's form
    gives them."""
    x = _mixed(3, 100_003, 25)
    got = np.empty_like(x)
    math_kernels.apply(op, x, got)
    inplace = x.copy()
    math_kernels.apply(op, inplace, inplace)
    assert np.array_equal(got.view(np.uint32), inplace.view(np.uint32))
    want = (_gelu64 if op == "gelu" else _gelu_tanh64)(x.astype(np.float64))
    pos, neg = x > 0.01, x < 0
    assert (np.abs(got - want)[pos] / want[pos]).max() < 3e-7
    assert np.abs(got - want)[neg].max() < 2e-7
    # one value in a vector block or in the tail gives the same bits
    same = np.full(19, x[7], np.float32)
    math_kernels.apply(op, same, same)
    assert len(set(same.view(np.uint32).tolist())) == 1
    special = np.array(SPECIAL, np.float32)
    out = np.empty_like(special)
    math_kernels.apply(op, special, out)
    with np.errstate(all="ignore"):
        numpy_form = UNARY[op].array(np, special)
    np.testing.assert_allclose(out, numpy_form, rtol=3e-7, atol=1e-38)


@pytest.mark.parametrize("op", ["gelu", "gelu_tanh"])
def test_the_compiled_gelu_gives_zero_or_no_value_a_gemm_would_take_into_denormals(
    math_kernels, op
):
    """Every negative x gives a GELU (either form) of 0 or one above 1e-12 in size, never
    a value whose products with a layer's weights fall to float32 denormals (microcode:
    the GEMM after Whisper's GELU ran at 60% speed); and what it zeroes, GELU itself puts
    under 6e-9."""
    x = np.linspace(-40, 0, 400_001, dtype=np.float32)
    got = np.empty_like(x)
    math_kernels.apply(op, x, got)
    tiny = (got != 0) & (np.abs(got) < 1e-12)
    assert not tiny.any(), f"{op}({x[tiny][:3]}) = {got[tiny][:3]}"
    zeroed = got == 0
    exact = _gelu64 if op == "gelu" else _gelu_tanh64
    assert np.abs(exact(x[zeroed].astype(np.float64))).max() < 6e-9


@pytest.mark.parametrize("op", ["gelu", "silu", "gelu_tanh"])
def test_a_gated_pass_has_the_bits_of_the_map_then_the_product(math_kernels, op):
    """llvm_math's gated kernel over rows [gate | up] of a strided view (vector blocks and
    their tails) gives the map's bits times up, as the two steps do; and Backend.
    gated_activation, which takes it, equals the unary op then the product."""
    rng = np.random.default_rng(3)
    wide = (rng.standard_normal((9, 2, 90)) * 4).astype(np.float32)
    x = wide[:, 0, :74]  # rows 180 floats apart: gate 37 wide, then up
    got = np.empty((9, 37), np.float32)
    math_kernels.gated(op, x, got)
    mapped = np.empty((9, 37), np.float32)
    math_kernels.apply(op, x[:, :37], mapped)
    assert np.array_equal(got.view(np.uint32), (mapped * x[:, 37:]).view(np.uint32))
    big = ember.tensor((rng.standard_normal((300, 2 * 700)) * 4).astype(np.float32))
    fused = F.gated_activation(big, op).numpy()
    steps = getattr(big[:, :700], op)() * big[:, 700:]
    assert np.array_equal(fused.view(np.uint32), steps.numpy().view(np.uint32))
    every_other = big[:, ::2]  # a last dim of stride 2: taken through a contiguous copy
    fused = F.gated_activation(every_other, op).numpy()
    steps = getattr(every_other[:, :350], op)() * every_other[:, 350:]
    assert np.array_equal(fused.view(np.uint32), steps.numpy().view(np.uint32))


def test_the_compiled_silu_is_silu_to_float32_rounding(math_kernels):
    """llvm_math's SiLU: within 3e-7 relative of float64 everywhere (numpy's tanh form
    loses digits for x < 0), on rows of a strided view and in place with the same bits,
    and at the special values."""
    x = _mixed(5, 60_001, 99)
    got = np.empty_like(x)
    math_kernels.apply("silu", x, got)
    want = x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64)))
    nonzero = np.abs(want) > 1e-30
    assert (np.abs(got - want)[nonzero] / np.abs(want[nonzero])).max() < 3e-7
    wide = np.random.default_rng(6).standard_normal((7, 2, 50)).astype(np.float32)
    half = wide[:, 0, :33]  # rows 100 floats apart, 33 wide
    out = np.empty((7, 33), np.float32)
    math_kernels.apply("silu", half, out)
    inplace = np.ascontiguousarray(half)
    math_kernels.apply("silu", inplace, inplace)
    assert np.array_equal(out.view(np.uint32), inplace.view(np.uint32))
    special = np.array(SPECIAL, np.float32)
    out = np.empty_like(special)
    math_kernels.apply("silu", special, out)
    with np.errstate(all="ignore"):
        exact = special.astype(np.float64) / (1.0 + np.exp(-special.astype(np.float64)))
    exact[np.isneginf(special)] = np.nan  # -inf * 0, as numpy's form gives it
    np.testing.assert_allclose(out, exact, rtol=3e-7, atol=1e-38)  # SiLU(-30) = -2.8e-12


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("batched_tables", [False, True])
def test_the_compiled_rope_has_the_numpy_passes_bits(
    math_kernels, monkeypatch, batched_tables, interleaved
):
    """Backend.rope through llvm_math's kernel, half-split pairs (Hugging Face's) or
    adjacent ones (GGUF's Llama), on a prompt's q/k heads, a strided view of the
    projection, with tables shared by the rows or one per row: the bits of
    _rotate_into's four numpy passes, and the rotation itself to float32 rounding."""
    from ember.backends import array as array_backend

    rng = np.random.default_rng(21)
    qkv = ember.tensor(rng.standard_normal((2, 9, 7, 40)).astype(np.float32))
    heads = qkv.narrow(2, 0, 5).transpose(1, 2)  # [2, 5, 9, 40], not contiguous
    shape = (2, 9, 20) if batched_tables else (9, 20)
    cos, sin = (ember.tensor(rng.standard_normal(shape).astype(np.float32)) for _ in range(2))
    taken = []
    real = array_backend._compiled_rope
    monkeypatch.setattr(
        array_backend, "_compiled_rope", lambda *a: taken.append(real(*a)) or taken[-1]
    )
    got = F.rope(heads, cos, sin, interleaved=interleaved).numpy()
    assert taken == [True]  # the kernel computed it
    monkeypatch.setattr(array_backend, "_compiled_rope", lambda *a: False)
    want = F.rope(heads, cos, sin, interleaved=interleaved).numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    x64 = heads.numpy().astype(np.float64)
    c, s = (t.numpy().astype(np.float64)[..., None, :, :] for t in (cos, sin))
    if not batched_tables:
        c, s = c[0], s[0]
    a, b = (x64[..., 0::2], x64[..., 1::2]) if interleaved else (x64[..., :20], x64[..., 20:])
    first, second = a * c - b * s, b * c + a * s
    exact = np.empty_like(x64)
    if interleaved:
        exact[..., 0::2], exact[..., 1::2] = first, second
    else:
        exact[..., :20], exact[..., 20:] = first, second
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
