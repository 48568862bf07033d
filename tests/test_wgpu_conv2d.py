"""conv2d's fused path on every device (on WebGPU the implicit-GEMM kernel of
backends/webgpu/conv.py): odd sizes, strides, padding, dilation, groups, bias and a fused
SiLU, strided input views, f32 and f16, against a float64 numpy convolution written
here; and on WebGPU the blocks its planner cuts where a binding, the grid or lavapipe's
loop cap would be passed (a capped binding limit, a lowered loop budget, a small grid)."""
import numpy as np
import pytest

import ember
from ember.backends.webgpu import conv as wgpu_conv
from ember.backends.webgpu import loopcap
from ember.errors import UnsupportedOp
from ember.layout import Layout
from wgpu_device import CAP, capped, wgpu  # noqa: F401  (fixtures)

CASES = [  # (input, weight, kwargs)
    ((1, 3, 17, 19), (16, 3, 3, 3), dict(stride=2, padding=1)),  # YOLO's stem, odd sizes
    ((2, 8, 13, 11), (12, 8, 3, 3), dict(padding=1)),  # 12 channels: a partial channel tile
    ((1, 8, 9, 10), (12, 8, 1, 1), {}),
    ((1, 4, 23, 29), (8, 4, 3, 3), dict(padding=1)),  # 667 pixels: several workgroups
    ((1, 8, 12, 9), (6, 4, 3, 2), dict(groups=2, dilation=(2, 1), padding=(2, 0), stride=(1, 2))),
    ((1, 6, 7, 7), (6, 1, 3, 3), dict(groups=6, padding=1)),  # depthwise
    ((1, 5, 6, 7), (3, 5, 2, 4), dict(stride=(2, 1), padding=(0, 3))),  # windows in the padding
    ((2, 4, 5, 5), (10, 4, 5, 5), dict(padding=2, stride=3)),
]
EPILOGUES = [(True, "silu"), (False, None), (True, None), (False, "silu")]
TOL = {"f32": 1e-4, "f16": 4e-3}
RUNS_HERE = wgpu_conv.runs_here


@pytest.fixture(autouse=True)
def kernel_everywhere(monkeypatch):
    """The kernel for every convolution here, also where CPU adapters keep the composite
    (runs_here, tested by itself below)."""
    monkeypatch.setattr(wgpu_conv, "runs_here", lambda *args: True)


def reference(x, w, b, stride=1, padding=0, dilation=1, groups=1, activation=None):
    """The convolution in float64: one strided slice of the padded input per kernel tap."""
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for a in range(kh):
        for e in range(kw):
            tap = xp[:, :, a * dh : a * dh + sh * (oh - 1) + 1 : sh,
                     e * dw : e * dw + sw * (ow - 1) + 1 : sw]
            for g in range(groups):
                out[:, g * og : (g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", tap[:, g * cg : (g + 1) * cg], w[g * og : (g + 1) * og, :, a, e])
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    if activation == "silu":
        out = out / (1.0 + np.exp(-out))
    return out


def _inputs(case, dtype_name, seed=0):
    xshape, wshape, kw = CASES[case]
    rng = np.random.default_rng([case, seed])
    npd = np.float16 if dtype_name == "f16" else np.float32
    x = rng.standard_normal(xshape).astype(npd)
    w = (rng.standard_normal(wshape) / np.sqrt(np.prod(wshape[1:]))).astype(npd)
    b = rng.standard_normal(wshape[0]).astype(npd)
    return x, w, b, kw


def _view(x, how, device):
    """x on the device as `how` lays it out: contiguous, a channel slice of a wider tensor
    (as C2f's chunks are), or stored with H and W swapped and transposed back."""
    if how == "contiguous":
        return ember.tensor(x, device=device)
    if how == "channels":
        wide = np.zeros((x.shape[0], x.shape[1] + 3) + x.shape[2:], x.dtype)
        wide[:, 2 : 2 + x.shape[1]] = x
        return ember.tensor(wide, device=device)[:, 2 : 2 + x.shape[1]]
    return ember.tensor(np.ascontiguousarray(x.transpose(0, 1, 3, 2)), device=device).transpose(2, 3)


def _check(got, want, dtype_name):
    tol = TOL[dtype_name]
    np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=tol,
                               atol=tol * np.abs(want).max())


@pytest.mark.parametrize("epilogue", EPILOGUES, ids=str)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_conv2d_f32(device, case, epilogue):
    with_bias, activation = epilogue
    x, w, b, kw = _inputs(case, "f32")
    b = b if with_bias else None
    got = ember.conv2d(ember.tensor(x, device=device), ember.tensor(w, device=device),
                       None if b is None else ember.tensor(b, device=device),
                       activation=activation, **kw)
    _check(got, reference(x, w, b, activation=activation, **kw), "f32")


@pytest.mark.parametrize("case", range(len(CASES)))
def test_conv2d_f16(device, case):
    x, w, b, kw = _inputs(case, "f16")
    got = ember.conv2d(ember.tensor(x, device=device), ember.tensor(w, device=device),
                       ember.tensor(b, device=device), activation="silu", **kw)
    assert got.dtype == ember.f16
    _check(got, reference(x, w, b, activation="silu", **kw), "f16")


@pytest.mark.parametrize("how", ["channels", "transposed"])
@pytest.mark.parametrize("case", [0, 4, 6])
def test_conv2d_of_a_strided_input(device, case, how):
    x, w, b, kw = _inputs(case, "f32", seed=1)
    got = ember.conv2d(_view(x, how, device), ember.tensor(w, device=device),
                       ember.tensor(b, device=device), activation="silu", **kw)
    _check(got, reference(x, w, b, activation="silu", **kw), "f32")


@pytest.fixture
def launches(monkeypatch):
    """Records the kernels WebGPU devices build or reuse, and the grids conv2d launches."""
    from ember.backends.webgpu.runtime import Runtime
    names, grids = [], []
    real_kernel, real_launch = Runtime.kernel, Runtime.launch

    def kernel(self, name, t, spec, op=None):
        names.append(name)
        return real_kernel(self, name, t, spec, op)

    def launch(self, pipe, values, ranges, groups):
        if "c" in values and "npix" in values:  # the conv2d block's parameters
            grids.append(groups)
        return real_launch(self, pipe, values, ranges, groups)

    monkeypatch.setattr(Runtime, "kernel", kernel)
    monkeypatch.setattr(Runtime, "launch", launch)
    return names, grids


def test_wgpu_runs_one_fused_kernel_without_im2col(wgpu, launches):
    names, grids = launches
    x, w, b, kw = _inputs(3, "f32")
    got = ember.conv2d(ember.tensor(x, device=wgpu), ember.tensor(w, device=wgpu),
                       ember.tensor(b, device=wgpu), activation="silu", **kw)
    _check(got, reference(x, w, b, activation="silu", **kw), "f32")
    # the weight's transposed copy, then one conv2d launch: no matmul, no bias/silu passes
    assert "conv2d" in names and "matmul" not in names and "unary" not in names
    assert len(grids) == 1


CAPPED = [  # each input larger than a 4 KiB binding, each output plane of 4 channels not
    ((2, 8, 13, 11), (12, 8, 3, 3), dict(padding=1)),
    ((1, 6, 15, 17), (8, 6, 3, 3), dict(padding=1)),
    ((2, 8, 18, 15), (8, 2, 3, 3), dict(groups=4, stride=2, padding=1)),
]


@pytest.mark.parametrize("case", range(len(CAPPED)))
def test_blocks_under_a_capped_binding_limit(capped, launches, case):
    """With 4 KiB bindings the input and output of these convolutions (and each one's
    im2col matrix, many times over) are larger than a binding: the planner cuts them into
    blocks of images, groups, channels and rows that fit."""
    _, grids = launches
    xshape, wshape, kw = CAPPED[case]
    rng = np.random.default_rng([case, 2])
    x = rng.standard_normal(xshape).astype(np.float32)
    w = (rng.standard_normal(wshape) / np.sqrt(np.prod(wshape[1:]))).astype(np.float32)
    b = rng.standard_normal(wshape[0]).astype(np.float32)
    assert x.nbytes > CAP
    got = ember.conv2d(ember.tensor(x, device=capped), ember.tensor(w, device=capped),
                       ember.tensor(b, device=capped), activation="silu", **kw)
    want = reference(x, w, b, activation="silu", **kw)
    assert want.nbytes // 2 > CAP
    _check(got, want, "f32")
    assert len(grids) > 1


def test_input_channels_in_parts_under_a_capped_binding_limit(capped, launches):
    """A weight of 64 input channels x 3x3 (18 KiB transposed) over a 4 KiB binding: input
    channels in parts accumulated into the output, bias and SiLU applied once at the end."""
    _, grids = launches
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 64, 5, 6)).astype(np.float32)
    w = (rng.standard_normal((8, 64, 3, 3)) / 24).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    got = ember.conv2d(ember.tensor(x, device=capped), ember.tensor(w, device=capped),
                       ember.tensor(b, device=capped), padding=1, activation="silu")
    _check(got, reference(x, w, b, padding=1, activation="silu"), "f32")
    assert len(grids) >= 4


def test_input_channels_in_parts_under_the_loop_budget(wgpu, launches, monkeypatch):
    """lavapipe's loop cap: with the budget lowered to 6 input channels of a 3x2 kernel
    per launch, the 8 of each of 2 groups run in parts, bias and SiLU applied once."""
    _, grids = launches
    monkeypatch.setattr(loopcap, "BUDGET", 9 * 5)
    x, w, b, kw = _inputs(4, "f32", seed=4)  # groups=2, 4 input channels per group, 3x2
    x2 = np.concatenate([x, x[:, ::-1]], axis=1)  # 16 channels: 8 per group
    w2 = np.concatenate([w, w[:, ::-1]], axis=1) / 2
    got = ember.conv2d(ember.tensor(x2, device=wgpu), ember.tensor(w2, device=wgpu),
                       ember.tensor(b, device=wgpu), activation="silu", **kw)
    _check(got, reference(x2, w2, b, activation="silu", **kw), "f32")
    assert len(grids) > 1


def test_blocks_under_a_small_grid_limit(wgpu, launches, monkeypatch):
    """At most 2 workgroups along a grid dimension: output rows split until each block's
    pixels fit 2 workgroups, and images x groups until they fit workgroup z."""
    _, grids = launches
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 31, 30)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    xt, wt, bt = (ember.tensor(a, device=wgpu) for a in (x, w, b))
    monkeypatch.setattr(wgpu.backend.runtime, "max_groups", 2)
    got = ember.conv2d(xt, wt, bt, padding=1, groups=2, activation="silu")
    _check(got, reference(x, w, b, padding=1, groups=2, activation="silu"), "f32")
    assert grids and all(max(g) <= 2 for g in grids)


def test_a_block_that_cannot_fit_is_refused_by_name(capped):
    """One output row of one channel wider than the binding: refused, naming conv2d."""
    x = np.ones((1, 1, 1, CAP), np.float32)
    w = np.ones((1, 1, 1, 1), np.float32)
    with pytest.raises(UnsupportedOp, match="conv2d"):
        ember.conv2d(ember.tensor(x, device=capped), ember.tensor(w, device=capped))


def test_block_halves_start_on_whole_channel_tiles():
    """Output channels split only at multiples of 4 (vec4s of the transposed weight)."""
    todo, parts = [wgpu_conv._Block(0, 1, 0, 1, 0, 8, 0, 44, 0, 5)], []
    while todo:
        b = todo.pop()
        if b.can_split("m"):
            todo += b.halves("m")
        else:
            parts.append((b.m0, b.nm))
    parts.sort()
    assert len(parts) > 2 and all(m0 % 4 == 0 for m0, _ in parts)
    assert [m0 for m0, _ in parts] == [0] + [m0 + nm for m0, nm in parts[:-1]]
    assert sum(nm for _, nm in parts) == 44


def test_cpu_adapters_keep_the_composite_where_it_measured_faster(wgpu, monkeypatch):
    """runs_here: on CPU adapters the composite for 1x1 kernels and more than 32 output
    channels a group, unless its im2col matrix would exceed a binding; the gpu kernel set
    always runs the kernel."""
    be, f32, one, none = wgpu.backend, ember.f32, (1, 1), (0, 0)
    wide = (Layout((1, 64, 40, 40)), Layout((64, 64, 3, 3)), one, one, one, 1, f32)
    pointwise = (Layout((1, 64, 40, 40)), Layout((16, 64, 1, 1)), one, none, one, 1, f32)
    stem = (Layout((1, 3, 64, 64)), Layout((16, 3, 3, 3)), (2, 2), one, one, 1, f32)
    depthwise = (Layout((1, 64, 40, 40)), Layout((64, 1, 3, 3)), one, one, one, 64, f32)
    huge = (Layout((1, 64, 600, 600)), Layout((64, 64, 3, 3)), one, one, one, 1, f32)
    monkeypatch.setattr(be.runtime, "kernel_set", "cpu-adapter")
    assert [RUNS_HERE(be, *a) for a in (wide, pointwise, stem, depthwise, huge)] == [
        False, False, True, True, True]
    monkeypatch.setattr(be.runtime, "kernel_set", "gpu")
    assert all(RUNS_HERE(be, *a) for a in (wide, pointwise, stem, depthwise, huge))
