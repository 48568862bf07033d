"""The numpy backend's decode-step attention in one compiled call (llvm_attention's
attend_step, for a batch of one): the rotation, the cache writes and the attention give
the bits of the path it replaces (numpy's rotation and cache writes around
array_small_attention's call), with and without rope, interleaved or not, grouped or
not; a row with no finite score goes the numpy way as before, and a step the helpers
would share, or a batch, keeps the old path."""

import numpy as np
import pytest

import ember
from ember import dtype as dt
from ember.backends import array_small_attention, llvm_attention
from ember.layout import Layout


@pytest.fixture
def cpu():
    return ember.Device.parse("cpu").backend


def _step(
    be, rng, n_heads, kv, d, length, cap=40, rope=True, interleaved=False, batch=1, poison=None
):
    """(the output, keys, values) of attention_step on random heads and caches, after
    `poison(qkv, keys)` where given."""
    heads = n_heads + 2 * kv
    qkv = rng.standard_normal(batch * heads * d).astype(np.float32)
    keys = rng.standard_normal(batch * kv * cap * d).astype(np.float32)
    values = rng.standard_normal(batch * kv * cap * d).astype(np.float32)
    if poison is not None:
        poison(qkv, keys)
    lc = Layout((1, d // 2))
    tables = None
    if rope:
        cos = rng.standard_normal(d // 2).astype(np.float32)
        sin = rng.standard_normal(d // 2).astype(np.float32)
        tables = (cos, lc, sin, lc)
    lcache = Layout((batch, kv, cap, d))
    out = be.attention_step(
        qkv,
        Layout((batch, 1, heads, d)),
        keys,
        lcache,
        values,
        lcache,
        length,
        n_heads,
        d**-0.5,
        dt.f32,
        tables,
        interleaved,
    )
    return np.asarray(out).copy(), keys, values


def _both_ways(be, monkeypatch, seed, **kw):
    """_step through the compiled step and through the path before it (takes_step off)."""
    calls = []
    real = llvm_attention.AttentionKernels.attend_step

    def counted(self, *a):
        calls.append(a)
        return real(self, *a)

    monkeypatch.setattr(llvm_attention.AttentionKernels, "attend_step", counted)
    fused = _step(be, np.random.default_rng(seed), **kw)
    taken = len(calls)
    with monkeypatch.context() as m:
        m.setattr(array_small_attention, "takes_step", lambda *a: False)
        before = _step(be, np.random.default_rng(seed), **kw)
    assert len(calls) == taken  # the old path made no compiled step
    return fused, before, taken


@pytest.mark.parametrize(
    "n_heads, kv, d, rope, interleaved",
    [
        (9, 3, 64, True, False),
        (4, 1, 256, True, False),
        (8, 8, 64, False, False),
        (4, 2, 16, True, True),
    ],
)
def test_the_compiled_step_has_the_paths_bits(
    cpu, attention_kernels, monkeypatch, n_heads, kv, d, rope, interleaved
):
    for length in (0, 1, 17, 38):
        fused, before, taken = _both_ways(
            cpu,
            monkeypatch,
            length,
            n_heads=n_heads,
            kv=kv,
            d=d,
            length=length,
            rope=rope,
            interleaved=interleaved,
        )
        assert taken == 1
        for a, b in zip(fused, before, strict=True):  # the output, the keys, the values
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_a_row_without_a_finite_score_goes_the_numpy_way(cpu, attention_kernels, monkeypatch):
    """An infinite key (kv head 0, position 3): that head's query rows have no finite
    maximum, the kernel leaves them, and numpy's tile redoes the attention (its NaNs)."""
    d = 16

    def poison(qkv, keys):
        keys[3 * d] = np.inf
        qkv[0] = qkv[d] = 1.0  # kv head 0's query heads see +inf: no finite maximum

    with np.errstate(invalid="ignore"):
        fused, before, taken = _both_ways(
            cpu, monkeypatch, 5, n_heads=4, kv=2, d=d, length=6, cap=10, rope=False, poison=poison
        )
    assert taken == 1
    for a, b in zip(fused, before, strict=True):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    head0 = fused[0][: 2 * d]  # kv head 0's two query heads
    assert not np.isfinite(head0).all() and np.isfinite(fused[0][2 * d :]).all()


@pytest.mark.parametrize("case", ["batch of two", "shared with the helpers"])
def test_a_batch_or_a_long_cache_keeps_the_old_path(cpu, attention_kernels, monkeypatch, case):
    calls = []
    monkeypatch.setattr(
        llvm_attention.AttentionKernels, "attend_step", lambda *a: calls.append(a) or None
    )
    if case == "batch of two":
        _step(cpu, np.random.default_rng(0), n_heads=4, kv=2, d=16, length=5, batch=2)
        assert calls == []
    else:
        assert not array_small_attention.takes_step(9, 3, 1000, 64)  # 3 x 3 x 1000 x 128
        assert array_small_attention.takes_step(9, 3, 150, 64)
