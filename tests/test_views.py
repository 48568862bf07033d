"""Views copy nothing and read the same values as numpy: property tests over random chains
of narrow, slicing with steps, transpose, permute, unsqueeze, squeeze, broadcast_to,
reshape, flatten and indexing, plus fixed cases on every device."""
import math

import numpy as np
import pytest

import ember
from strided import check, on_device

import hypothesis
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _factorizations(n, max_dims):
    """Every ordered way to write n as a product of up to max_dims factors (n > 0)."""
    if max_dims == 0:
        return [()] if n == 1 else []
    out = [()] if n == 1 else []
    for f in range(1, n + 1):
        if n % f == 0:
            if f == 1 and n != 1:
                continue  # size-1 dims are added separately, to keep the list short
            out += [(f,) + rest for rest in _factorizations(n // f, max_dims - 1)]
    return out


def _reshape_target(data, shape):
    n = math.prod(shape)
    if n == 0:
        target = list(data.draw(st.sampled_from([(0,), (0, 3), (2, 0), (1, 0, 1)])))
    else:
        target = list(data.draw(st.sampled_from(_factorizations(n, 4))))
    # Sprinkle size-1 dims (their strides are free) and maybe a -1.
    for _ in range(data.draw(st.integers(0, 2))):
        target.insert(data.draw(st.integers(0, len(target))), 1)
    if target and n and data.draw(st.booleans()):
        target[data.draw(st.integers(0, len(target) - 1))] = -1
    return tuple(target)


def _index(data, shape):
    """A random __getitem__ index: ints, slices with positive steps, None and Ellipsis."""
    parts = []
    ndim = len(shape)
    used = data.draw(st.integers(0, ndim))
    for d in range(used):
        n = shape[d]
        choice = data.draw(st.sampled_from(["int", "slice", "slice", "none"] if n else
                                           ["slice", "none"]))
        if choice == "int":
            parts.append(data.draw(st.integers(-n, n - 1)))
        elif choice == "slice":
            start = data.draw(st.one_of(st.none(), st.integers(-n - 2, n + 2)))
            stop = data.draw(st.one_of(st.none(), st.integers(-n - 2, n + 2)))
            step = data.draw(st.one_of(st.none(), st.integers(1, 3)))
            parts.append(slice(start, stop, step))
        else:
            parts.append(None)
            parts.append(slice(None))
    if data.draw(st.booleans()):
        # An Ellipsis in the middle stands for nothing only when every dim is indexed.
        where = data.draw(st.integers(0, len(parts))) if used == ndim else len(parts)
        parts.insert(where, Ellipsis)
    if data.draw(st.booleans()):
        parts.append(None)
    return tuple(parts)


def _step(data, t, a):
    """Apply one random view op to ember tensor t and numpy array a; return both and
    whether ember must have made a view (True) or may copy (None)."""
    ndim = a.ndim
    ops = ["getitem", "unsqueeze", "reshape", "flatten"]
    if ndim:
        ops += ["narrow", "transpose", "permute", "squeeze", "broadcast", "chunk"]
    op = data.draw(st.sampled_from(ops))
    if op == "narrow":
        d = data.draw(st.integers(-ndim, ndim - 1))
        n = a.shape[d]
        start = data.draw(st.integers(0, n))
        length = data.draw(st.integers(0, n - start))
        index = [slice(None)] * ndim
        index[d] = slice(start, start + length)
        return t.narrow(d, start, length), a[tuple(index)], True
    if op == "getitem":
        index = _index(data, a.shape)
        return t[index], a[index], True
    if op == "transpose":
        d0, d1 = (data.draw(st.integers(-ndim, ndim - 1)) for _ in range(2))
        return t.transpose(d0, d1), np.swapaxes(a, d0, d1), True
    if op == "permute":
        order = data.draw(st.permutations(range(ndim)))
        return t.permute(*order), np.transpose(a, order), True
    if op == "unsqueeze":
        d = data.draw(st.integers(-ndim - 1, ndim))
        return t.unsqueeze(d), np.expand_dims(a, d), True
    if op == "squeeze":
        if data.draw(st.booleans()):
            return t.squeeze(), np.squeeze(a), True
        d = data.draw(st.integers(-ndim, ndim - 1))
        # PyTorch semantics: squeezing a dim that is not 1 changes nothing.
        return t.squeeze(d), (np.squeeze(a, d) if a.shape[d] == 1 else a), True
    if op == "broadcast":
        target = [data.draw(st.integers(1, 3)) if n == 1 else n for n in a.shape]
        target = [data.draw(st.integers(1, 2)) for _ in range(data.draw(st.integers(0, 1)))] \
            + target
        if data.draw(st.booleans()):
            return t.broadcast_to(target), np.broadcast_to(a, target), True
        return t.expand(*target), np.broadcast_to(a, target), True
    if op == "chunk":
        d = data.draw(st.integers(0, ndim - 1))
        if a.shape[d] == 0:
            return t, a, True
        chunks = data.draw(st.integers(1, 3))
        pieces_t = t.chunk(chunks, d)
        pieces_a = np.array_split(a, range(-(-a.shape[d] // chunks), a.shape[d],
                                           -(-a.shape[d] // chunks)), axis=d)
        assert len(pieces_t) == len(pieces_a)
        i = data.draw(st.integers(0, len(pieces_t) - 1))
        return pieces_t[i], pieces_a[i], True
    if op == "flatten":
        if ndim == 0:
            return t.flatten(), a.reshape(1), None
        s = data.draw(st.integers(0, ndim - 1))
        e = data.draw(st.integers(s, ndim - 1))
        shape = a.shape[:s] + (math.prod(a.shape[s:e + 1]),) + a.shape[e + 1:]
        return t.flatten(s, e), a.reshape(shape), None
    target = _reshape_target(data, a.shape)
    _check_reshape_view_rule(t, target)
    return t.reshape(target), a.reshape(target), None


def _check_reshape_view_rule(t, target):
    """Layout.reshape gives a view exactly when numpy's reshape of the same strided array
    is a view (it copies otherwise)."""
    shape = tuple(target)
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape = tuple(t.numel() // known if d == -1 else d for d in shape)
    arr = t.numpy()
    if arr.size == 0:
        return  # empty arrays share no memory; both sides view them anyway
    np_view = np.shares_memory(arr.reshape(shape), t.storage)
    assert (t.layout.reshape(shape) is not None) == np_view, (
        f"layout {t.layout} -> {shape}: numpy view={np_view}")


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_view_chains_match_numpy(data):
    shape = tuple(data.draw(st.lists(st.integers(0, 4) if data.draw(st.booleans()) else
                                     st.integers(1, 4), min_size=0, max_size=4)))
    base = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    t = ember.tensor(base)
    storage = t.storage
    a = base
    for _ in range(data.draw(st.integers(1, 6))):
        t, a, must_view = _step(data, t, a)
        assert t.shape == a.shape, (t.shape, a.shape)
        np.testing.assert_array_equal(t.numpy(), a)
        if must_view:
            assert t.storage is storage, "a view copied its data"
        storage = t.storage
    assert t.tolist() == a.tolist()
    c = t.contiguous()
    assert c.is_contiguous()
    np.testing.assert_array_equal(c.numpy(), a)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_reshape_view_rule_on_strided_layouts(data):
    """Random strided layouts (permuted, sliced, broadcast) reshaped to random targets."""
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    base = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    t = ember.tensor(base)
    order = data.draw(st.permutations(range(len(shape))))
    index = tuple(slice(None, None, data.draw(st.integers(1, 2))) for _ in shape)
    t = t.permute(*order)[index]
    a = np.transpose(base, order)[index]
    if data.draw(st.booleans()):
        d = data.draw(st.integers(0, t.ndim))
        target = [-1] * (t.ndim + 1)
        target[d] = 2
        t = t.unsqueeze(d).expand(*target)
        a = np.broadcast_to(np.expand_dims(a, d), t.shape)
    target = _reshape_target(data, t.shape)
    _check_reshape_view_rule(t, target)
    np.testing.assert_array_equal(t.reshape(target).numpy(), a.reshape(target))


def test_fixed_reshape_cases():
    x = ember.arange(24, dtype=ember.f32).reshape(2, 3, 4)
    assert x.reshape(6, 4).storage is x.storage
    t = x.transpose(1, 2)  # (2, 4, 3)
    assert t.layout.reshape((8, 3)) is None  # merging the swapped dims needs a copy
    assert t.layout.reshape((2, 12)) is None
    assert t.layout.reshape((2, 1, 4, 3)) is not None
    b = ember.tensor([1.0, 2.0, 3.0]).broadcast_to(4, 3)
    assert b.layout.reshape((2, 2, 3)) is not None  # splitting a stride-0 dim is a view
    assert b.layout.reshape((12,)) is None
    np.testing.assert_array_equal(b.reshape(12).numpy(), np.tile([1.0, 2.0, 3.0], 4))
    assert x.view(4, -1).shape == (4, 6)


def test_views_on_every_device(device):
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = on_device(base, "f32", device)
    cases = [
        (t.narrow(1, 1, 2), base[:, 1:3]),
        (t[..., ::2], base[..., ::2]),
        (t[1:, None, ::3, 2], base[1:, None, ::3, 2]),
        (t.transpose(0, 2), base.transpose(2, 1, 0)),
        (t.permute(1, 2, 0), base.transpose(1, 2, 0)),
        (t.mT, base.swapaxes(-1, -2)),
        (t.T, base.T),
        (t[0].t(), base[0].T),
        (t[:, :1].expand(3, 4, 5), np.broadcast_to(base[:, :1], (3, 4, 5))),
        (t.unsqueeze(1).squeeze(1), base),
        (t.flatten(1), base.reshape(3, 20)),
        (t.transpose(0, 1).reshape(4, 15), base.transpose(1, 0, 2).reshape(4, 15)),
        (t.unfold(2, 2, 2), np.stack([base[..., 0:2], base[..., 2:4]], axis=2)),
    ]
    for view, expected in cases:
        check(view, expected, "f32")
        check(view.contiguous(), expected, "f32")
    first, second = t.split([1, 2], dim=0)
    check(second, base[1:], "f32")
    assert [c.shape for c in t.chunk(2, dim=2)] == [(3, 4, 3), (3, 4, 2)]
    assert [c.shape for c in t.split(2, dim=1)] == [(3, 2, 5), (3, 2, 5)]
    check(t.transpose(1, 2).contiguous(), base.transpose(0, 2, 1), "f32")
    assert t.transpose(1, 2).contiguous().is_contiguous()


def test_contiguous_returns_self_when_already_contiguous():
    t = ember.zeros(2, 3)
    assert t.contiguous() is t
    s = t[:, 1:]
    assert not s.is_contiguous() and s.contiguous().is_contiguous()
