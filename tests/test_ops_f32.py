"""Fast by construction: f32 stays f32 inside the CPU backend through every op.

A numpy scalar of float64 (e.g. `np.sqrt(64)`) or an f64 temporary silently turns f32
work into f64 work (twice the memory traffic, slower BLAS) even when the result is cast
back. Here the backend runs on a numpy whose every array is an F32Guard, which fails on
any float64 operand or result and on `**`.
"""
import numpy as np
import pytest

import ember
from ember.backends.array import ArrayBackend
from ember.ops import BINARY, COMPARE, UNARY
from strided import F32Guard


class _GuardedNumpy:
    """numpy, except that arrays it makes are F32Guards (ufuncs keep them so)."""
    __name__ = "numpy"

    def __getattr__(self, name):
        attr = getattr(np, name)
        if name == "ndarray":
            return lambda *a, **k: np.ndarray(*a, **k).view(F32Guard)
        if callable(attr) and not isinstance(attr, (type, np.ufunc)):
            def wrapped(*args, **kwargs):
                out = attr(*args, **kwargs)
                return out.view(F32Guard) if type(out) is np.ndarray else out
            return wrapped
        return attr


@pytest.fixture(scope="module")
def guarded():
    return ember.Device("cpu", 7, ArrayBackend(_GuardedNumpy(), "cpu-f32-guard"))


def _plain(t):
    return np.asarray(t.numpy()).view(np.ndarray)


def _ops():
    x = lambda d: ember.tensor(np.linspace(0.1, 2.0, 24, dtype=np.float32).reshape(2, 3, 4),
                               device=d)  # noqa: E731
    cases = {}
    for name, row in UNARY.items():
        params = [0.5, 1.5][:row.nparams]
        cases[f"unary-{name}"] = lambda d, n=name, p=params: x(d)._unary(n, *p)
    for name in BINARY:
        cases[f"binary-{name}"] = lambda d, n=name: x(d)._binary(n, x(d).transpose(1, 2).mT)
        cases[f"binary-{name}-scalar"] = lambda d, n=name: x(d)._binary(n, 1.5)
    for name in COMPARE:
        cases[f"compare-{name}"] = lambda d, n=name: x(d)._compare(n, 1.0)
    cases.update({
        "where": lambda d: ember.where(x(d) > 1, x(d), 0.5),
        "sum": lambda d: x(d).sum((0, 2)),
        "mean": lambda d: x(d).mean(-1),
        "var": lambda d: x(d).var(1),
        "max": lambda d: x(d).max(0),
        "argmax": lambda d: x(d).argmax(-1),
        "cumsum": lambda d: x(d).cumsum(1),
        "softmax": lambda d: x(d).softmax(-1),
        "log_softmax": lambda d: x(d).log_softmax(1),
        "layer_norm": lambda d: x(d).layer_norm(ember.ones(4, device=d), ember.zeros(4, device=d)),
        "rms_norm": lambda d: x(d).rms_norm(ember.ones(4, device=d)),
        "matmul-linear": lambda d: x(d) @ ember.ones(5, 4, device=d).t(),
        "matmul-batched": lambda d: x(d) @ x(d).mT,
        "conv2d": lambda d: ember.conv2d(x(d).reshape(1, 2, 3, 4), ember.ones(3, 2, 2, 2, device=d),
                                         ember.ones(3, device=d), padding=1),
        "conv_transpose2d": lambda d: ember.conv_transpose2d(
            x(d).reshape(1, 2, 3, 4), ember.ones(2, 3, 2, 2, device=d), stride=2),
        "max_pool2d": lambda d: ember.max_pool2d(x(d).reshape(1, 2, 3, 4), 2, padding=1),
        "avg_pool2d": lambda d: ember.avg_pool2d(x(d).reshape(1, 2, 3, 4), 2, padding=1,
                                                 count_include_pad=False),
        "bilinear": lambda d: ember.interpolate(x(d).reshape(1, 2, 3, 4), scale_factor=2.0,
                                                mode="bilinear"),
        "nearest": lambda d: ember.upsample_nearest2d(x(d).reshape(1, 2, 3, 4), size=(5, 7)),
        "index_select": lambda d: x(d).index_select(1, ember.tensor([2, 0], device=d)),
        "gather": lambda d: x(d).gather(2, ember.zeros(2, 3, 1, dtype=ember.i64, device=d)),
        "scatter_add": lambda d: x(d).scatter_add(2, ember.zeros(2, 3, 1, dtype=ember.i64,
                                                                 device=d), x(d)),
        "cat": lambda d: ember.cat([x(d), x(d).mT.mT], 1),
        "pad": lambda d: ember.pad(x(d), (1, 2), value=0.5),
        "pad-replicate": lambda d: ember.pad(x(d), (1, 2), mode="replicate"),
        "cast-f16": lambda d: x(d).to(ember.f16).to(ember.f32),
        "cast-bf16": lambda d: x(d).to(ember.bf16).exp().to(ember.f32),
        "gelu-f16": lambda d: x(d).half().gelu().float(),
    })
    return cases


CASES = _ops()


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_stays_f32_inside_the_cpu_backend(guarded, name):
    out = CASES[name](guarded)
    got = _plain(out)
    assert got.dtype in (np.float32, np.uint8, np.int64)
    # The same op on the ordinary CPU device gives the same values.
    np.testing.assert_array_equal(got, _plain(CASES[name](ember.Device.cpu())))
