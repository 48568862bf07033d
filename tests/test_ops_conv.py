"""Convolutions, transposed convolutions, pooling and resizing against torch, on every device."""
import numpy as np
import pytest

import ember
from helpers import require
from strided import FLOATS, VARIANTS, check, on_device, rng_for, sample, variant

TOL = {"f32": (1e-5, 1e-5), "f64": (1e-10, 1e-10), "f16": (4e-3, 4e-3), "bf16": (2e-2, 3e-2)}


def _torch(x):
    torch = require("torch")
    return torch.from_numpy(np.array(x, np.float64))


def _ref(fn, *arrays, **kwargs):
    torch = require("torch")
    args = [None if a is None else _torch(a) for a in arrays]
    return getattr(torch.nn.functional, fn)(*args, **kwargs).numpy()


CONV2D = [  # (input shape, weight shape, kwargs)
    ((2, 4, 7, 6), (6, 4, 3, 3), {}),
    ((1, 4, 7, 6), (6, 4, 3, 2), dict(stride=2, padding=1)),
    ((2, 4, 8, 7), (4, 2, 3, 3), dict(groups=2, dilation=2, padding=(2, 1))),
    ((1, 6, 5, 5), (6, 1, 3, 3), dict(groups=6, stride=(1, 2), padding=1)),
    ((1, 2, 4, 4), (3, 2, 1, 1), {}),
]
CONV1D = [
    ((2, 4, 9), (6, 4, 3), {}),
    ((1, 4, 9), (6, 2, 3), dict(stride=2, padding=2, dilation=2, groups=2)),
    ((2, 3, 5), (3, 1, 2), dict(groups=3, padding=1)),
]
CONVT2D = [
    ((2, 4, 3, 4), (4, 3, 3, 3), {}),
    ((1, 4, 3, 3), (4, 2, 3, 2), dict(stride=2, padding=1, output_padding=1)),
    ((1, 4, 3, 4), (4, 1, 2, 3), dict(stride=(2, 1), groups=2, dilation=2, padding=(0, 1))),
    ((1, 2, 4, 4), (2, 3, 3, 3), dict(stride=3, output_padding=2)),
]
CONVT1D = [
    ((2, 4, 5), (4, 3, 3), {}),
    ((1, 4, 5), (4, 2, 3), dict(stride=2, padding=1, output_padding=1, groups=2, dilation=2)),
]


def _conv_inputs(kind, xshape, wshape, dtype_name, device, tag):
    rng = rng_for(tag, kind, xshape, wshape, dtype_name)
    x, xn = variant(kind, xshape, dtype_name, device, rng)
    w, wn = variant("transposed" if kind == "transposed" else "contiguous", wshape, dtype_name,
                    device, rng)
    bn = sample((wshape[0],), dtype_name, rng)
    return x, xn, w, wn, on_device(bn, dtype_name, device), bn


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
@pytest.mark.parametrize("case", range(len(CONV2D)))
def test_conv2d(device, case, dtype_name, kind):
    xshape, wshape, kw = CONV2D[case]
    x, xn, w, wn, b, bn = _conv_inputs(kind, xshape, wshape, dtype_name, device, "conv2d")
    check(ember.conv2d(x, w, b, **kw), _ref("conv2d", xn, wn, bn, **kw), dtype_name,
          *TOL[dtype_name])
    check(ember.conv2d(x, w, **kw), _ref("conv2d", xn, wn, **kw), dtype_name, *TOL[dtype_name])


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
@pytest.mark.parametrize("case", range(len(CONV1D)))
def test_conv1d(device, case, dtype_name, kind):
    xshape, wshape, kw = CONV1D[case]
    x, xn, w, wn, b, bn = _conv_inputs(kind, xshape, wshape, dtype_name, device, "conv1d")
    check(ember.conv1d(x, w, b, **kw), _ref("conv1d", xn, wn, bn, **kw), dtype_name,
          *TOL[dtype_name])


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
@pytest.mark.parametrize("case", range(len(CONVT2D)))
def test_conv_transpose2d(device, case, dtype_name, kind):
    xshape, wshape, kw = CONVT2D[case]
    groups = kw.get("groups", 1)
    x, xn, w, wn, _, _ = _conv_inputs(kind, xshape, wshape, dtype_name, device, "convt2d")
    bn = sample((wshape[1] * groups,), dtype_name, rng_for("convt2d-bias", case))
    b = on_device(bn, dtype_name, device)
    check(ember.conv_transpose2d(x, w, b, **kw), _ref("conv_transpose2d", xn, wn, bn, **kw),
          dtype_name, *TOL[dtype_name])


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
@pytest.mark.parametrize("case", range(len(CONVT1D)))
def test_conv_transpose1d(device, case, dtype_name, kind):
    xshape, wshape, kw = CONVT1D[case]
    x, xn, w, wn, _, _ = _conv_inputs(kind, xshape, wshape, dtype_name, device, "convt1d")
    check(ember.conv_transpose1d(x, w, **kw), _ref("conv_transpose1d", xn, wn, **kw),
          dtype_name, *TOL[dtype_name])


def test_conv_empty_batch(device):
    x = on_device(np.zeros((0, 2, 5, 5), np.float32), "f32", device)
    w = on_device(np.ones((3, 2, 3, 3), np.float32), "f32", device)
    check(ember.conv2d(x, w, padding=1), np.zeros((0, 3, 5, 5), np.float32), "f32")


POOL = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(2, 3), stride=(1, 2)),
]


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS + ("i32",))
@pytest.mark.parametrize("kw", POOL, ids=str)
def test_max_pool2d(device, kw, dtype_name, kind):
    rng = rng_for("maxpool", str(kw), dtype_name, kind)
    x, xn = variant(kind, (2, 3, 7, 6), dtype_name, device, rng)
    expected = _ref("max_pool2d", xn, **kw).astype(xn.dtype)
    check(ember.max_pool2d(x, **kw), expected, dtype_name)


def test_max_pool2d_dilation(device):
    rng = rng_for("maxpool-dilation")
    x, xn = variant("sliced", (1, 2, 7, 7), "f32", device, rng)
    check(ember.max_pool2d(x, 3, stride=1, dilation=2),
          _ref("max_pool2d", xn, kernel_size=3, stride=1, dilation=2), "f32")


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
@pytest.mark.parametrize("kw", POOL, ids=str)
def test_avg_pool2d(device, kw, dtype_name, kind, count_include_pad):
    rng = rng_for("avgpool", str(kw), dtype_name, kind)
    x, xn = variant(kind, (2, 3, 7, 6), dtype_name, device, rng)
    expected = _ref("avg_pool2d", xn, count_include_pad=count_include_pad, **kw)
    check(ember.avg_pool2d(x, count_include_pad=count_include_pad, **kw), expected, dtype_name,
          *TOL[dtype_name])


RESIZE = [dict(size=(5, 7)), dict(scale_factor=2.0), dict(size=(2, 3)), dict(size=(6, 4)),
          dict(scale_factor=(1.5, 0.5)),
          # whole repeats (the broadcast-copy path), 1/3 among them as a float ratio
          dict(scale_factor=3.0), dict(size=(8, 15)), dict(scale_factor=(2.0, 1.0))]


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
@pytest.mark.parametrize("kw", RESIZE, ids=str)
def test_upsample_nearest2d(device, kw, dtype_name, kind):
    rng = rng_for("nearest", str(kw), dtype_name, kind)
    x, xn = variant(kind, (2, 3, 4, 5), dtype_name, device, rng)
    expected = _ref("interpolate", xn, mode="nearest", **kw)
    check(ember.upsample_nearest2d(x, **kw), expected, dtype_name)
    check(ember.interpolate(x, mode="nearest", **kw), expected, dtype_name)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("dtype_name", FLOATS)
@pytest.mark.parametrize("kw", RESIZE, ids=str)
def test_bilinear_interpolate(device, kw, dtype_name, kind, align_corners):
    rng = rng_for("bilinear", str(kw), dtype_name, kind, align_corners)
    x, xn = variant(kind, (2, 3, 4, 5), dtype_name, device, rng)
    expected = _ref("interpolate", xn, mode="bilinear", align_corners=align_corners, **kw)
    check(ember.interpolate(x, mode="bilinear", align_corners=align_corners, **kw), expected,
          dtype_name, *TOL[dtype_name])


def test_resize_to_one_pixel(device):
    rng = rng_for("one-pixel")
    x, xn = variant("contiguous", (1, 2, 3, 4), "f32", device, rng)
    for align in (False, True):
        check(ember.interpolate(x, size=(1, 1), mode="bilinear", align_corners=align),
              _ref("interpolate", xn, size=(1, 1), mode="bilinear", align_corners=align), "f32")


def test_pool_and_resize_empty_batch(device):
    x = on_device(np.zeros((0, 2, 4, 4), np.float32), "f32", device)
    check(ember.max_pool2d(x, 2), np.zeros((0, 2, 2, 2), np.float32), "f32")
    check(ember.avg_pool2d(x, 2), np.zeros((0, 2, 2, 2), np.float32), "f32")
    check(ember.upsample_nearest2d(x, scale_factor=2.0), np.zeros((0, 2, 8, 8), np.float32), "f32")
    check(ember.interpolate(x, size=(3, 5), mode="bilinear"), np.zeros((0, 2, 3, 5), np.float32),
          "f32")


def test_max_pool2d_propagates_nan_as_torch(device):
    """A NaN in a window makes that window's maximum NaN (torch's max_pool2d), also when a
    later tap of the window is larger; the padding never wins over a real value."""
    torch = require("torch")
    xn = np.arange(2 * 6 * 5, dtype=np.float32).reshape(1, 2, 6, 5) - 30.0
    xn[0, 0, 2, 1] = np.nan
    x = on_device(xn, "f32", device)
    got = ember.max_pool2d(x, 3, stride=1, padding=1).numpy()
    want = torch.nn.functional.max_pool2d(torch.from_numpy(xn), 3, stride=1, padding=1).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want).sum() == 9
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


CONV2D_CAT = [  # (part shapes, weight shape, kwargs): the parts joined along channels
    ([(2, 3, 5, 6), (2, 1, 5, 6), (2, 4, 5, 6)], (5, 8, 1, 1), {}),  # C2f's end
    ([(1, 2, 6, 5), (1, 2, 6, 5)], (3, 4, 3, 3), dict(padding=1, stride=2)),  # the default
    ([(1, 4, 4, 4)], (2, 4, 1, 1), dict(activation="silu")),
]


@pytest.mark.parametrize("case", range(len(CONV2D_CAT)))
def test_conv2d_cat(device, case):
    """conv2d of the parts' channel concatenation, whether or not the backend makes it."""
    shapes, wshape, kw = CONV2D_CAT[case]
    rng = rng_for("conv2d_cat", case)
    parts = [sample(s, "f32", rng) for s in shapes]
    wn, bn = sample(wshape, "f32", rng), sample((wshape[0],), "f32", rng)
    got = ember.conv2d_cat([on_device(p, "f32", device) for p in parts], on_device(wn, "f32", device),
                           on_device(bn, "f32", device), **kw)  # fmt: skip
    act = kw.pop("activation", None)
    want = _ref("conv2d", np.concatenate(parts, 1), wn, bn, **kw)
    if act == "silu":
        want = want / (1 + np.exp(-want))
    check(got, want, "f32", *TOL["f32"])


def test_conv2d_cat_refuses_parts_that_do_not_join(device):
    a = on_device(np.zeros((1, 2, 4, 4), np.float32), "f32", device)
    b = on_device(np.zeros((1, 2, 4, 5), np.float32), "f32", device)
    w = on_device(np.zeros((3, 4, 1, 1), np.float32), "f32", device)
    with pytest.raises(ember.ShapeMismatch, match="differ outside dim 1"):
        ember.conv2d_cat([a, b], w)
    with pytest.raises(ember.ShapeMismatch, match=r"in_channels 2 = 4"):
        ember.conv2d_cat([a], w)
    with pytest.raises(ValueError, match="non-empty"):
        ember.conv2d_cat([], w)
