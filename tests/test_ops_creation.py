"""Creation (tensor, zeros, ones, full, *_like, arange, eye, rand/randn, from_numpy) and
readback (numpy, tolist, item) on every device."""
import numpy as np
import pytest

import ember
from strided import ALL, FLOATS, INTS, RESULT, check, on_device, representable, rng_for, sample
from helpers import require


def _dtype(name):
    return getattr(ember, name)


def test_tensor_infers_dtypes_like_torch(device):
    assert ember.tensor([1.0, 2.0], device=device).dtype is ember.f32
    assert ember.tensor([1, 2], device=device).dtype is ember.i64
    assert ember.tensor([True, False], device=device).dtype is ember.u8
    assert ember.tensor(3.5, device=device).dtype is ember.f32
    assert ember.tensor([[1, 2.5]], device=device).dtype is ember.f32
    # A numpy array keeps its dtype.
    if device.kind == "cpu":
        assert ember.tensor(np.zeros(2, np.float64), device=device).dtype is ember.f64
    assert ember.tensor(np.zeros(2, np.int32), device=device).dtype is ember.i32
    assert ember.tensor(np.zeros(2, np.float16), device=device).dtype is ember.f16


@pytest.mark.parametrize("dtype_name", ALL)
def test_tensor_from_nested_lists(device, dtype_name):
    data = [[1, 2, 3], [4, 5, 6]]
    t = on_device(data, dtype_name, device)
    check(t, np.array(data), dtype_name)
    assert t.shape == (2, 3) and t.tolist() == data
    assert t.device == device


@pytest.mark.parametrize("data", [[], [[]], 7, 2.5, [[[1.5]]]], ids=str)
def test_tensor_0d_and_empty(device, data):
    t = ember.tensor(data, device=device)
    expected = np.array(data, dtype=np.float32 if "." in repr(data) or data in ([], [[]])
                        else np.int64)
    assert t.shape == expected.shape
    assert t.tolist() == expected.tolist()


def test_tensor_copies_its_input(device):
    a = np.arange(4, dtype=np.float32)
    t = ember.tensor(a, device=device)
    a[0] = 100
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]
    u = ember.tensor(t)  # like torch.tensor(t): a copy on t's device
    assert u.tolist() == t.tolist() and u.device == device
    assert u.storage is not t.storage
    v = ember.tensor(t.T, dtype=ember.f16, device="cpu")
    assert v.dtype is ember.f16 and v.device == ember.Device.cpu() and v.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("dtype_name", ALL)
@pytest.mark.parametrize("shape", [(), (0,), (2, 3), (1, 0, 4)], ids=str)
def test_zeros_ones_full(device, dtype_name, shape):
    d = _dtype(dtype_name)
    cd = RESULT[dtype_name]
    try:
        check(ember.zeros(*shape, dtype=d, device=device), np.zeros(shape, cd), dtype_name)
    except ember.UnsupportedDType:
        if device.kind == "cpu":
            raise
        pytest.skip(f"{device} does not hold {dtype_name}")
    check(ember.zeros(shape, dtype=d, device=device), np.zeros(shape, cd), dtype_name)
    check(ember.ones(*shape, dtype=d, device=device), np.ones(shape, cd), dtype_name)
    check(ember.full(shape, 7, dtype=d, device=device), np.full(shape, 7, cd), dtype_name)
    if dtype_name in FLOATS:
        check(ember.full(shape, -2.5, dtype=d, device=device), np.full(shape, -2.5, cd),
              dtype_name)


@pytest.mark.parametrize("dtype_name", ALL)
def test_like_constructors(device, dtype_name):
    t = on_device(np.arange(6).reshape(2, 3), dtype_name, device).t()  # strided source
    cd = RESULT[dtype_name]
    check(ember.zeros_like(t), np.zeros((3, 2), cd), dtype_name)
    check(ember.ones_like(t), np.ones((3, 2), cd), dtype_name)
    check(ember.full_like(t, 4), np.full((3, 2), 4, cd), dtype_name)
    check(ember.zeros_like(t, dtype=ember.f32), np.zeros((3, 2), np.float32), "f32")
    assert ember.ones_like(t).device == device


@pytest.mark.parametrize("args,kw", [
    ((5,), {}), ((2, 9), {}), ((1, 10, 3), {}), ((0.0, 1.0, 0.25), {}), ((3, 0), {}),
    ((-3, 4, 2), {}), ((5, 1, -1), {}), ((4,), {"dtype": "f32"}), ((0.5, 3), {"dtype": "f16"}),
    ((6,), {"dtype": "u8"}), ((1.0, 2.0, 0.1), {}),
], ids=str)
def test_arange(device, args, kw):
    dtype_name = kw.get("dtype")
    out = ember.arange(*args, device=device, **({"dtype": _dtype(dtype_name)} if dtype_name
                                                 else {}))
    if dtype_name is None:
        dtype_name = "f32" if any(isinstance(a, float) for a in args) else "i64"
    expected = np.arange(*args, dtype=np.float64 if dtype_name in FLOATS else np.int64)
    check(out, expected.astype(RESULT[dtype_name]), dtype_name)


@pytest.mark.parametrize("dtype_name", ["f32", "f16", "i64", "u8"])
@pytest.mark.parametrize("n,m", [(3, None), (2, 4), (4, 1), (0, None)])
def test_eye(device, n, m, dtype_name):
    check(ember.eye(n, m, dtype=_dtype(dtype_name), device=device),
          np.eye(n, m, dtype=RESULT[dtype_name]), dtype_name)


@pytest.mark.parametrize("fn", ["rand", "randn"])
def test_random_is_seeded_and_reproducible(device, fn):
    make = getattr(ember, fn)
    a = make(3, 4, generator=ember.Generator(42), device=device).numpy()
    b = make(3, 4, generator=ember.Generator(42), device=device).numpy()
    c = make(3, 4, generator=ember.Generator(43), device=device).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    ember.manual_seed(7)
    d = make((3, 4), device=device).numpy()
    ember.manual_seed(7)
    e = make(3, 4, device=device).numpy()
    np.testing.assert_array_equal(d, e)
    assert a.dtype == np.float32 and a.shape == (3, 4)
    # Same seed, same values on every device of this host.
    np.testing.assert_array_equal(a, make(3, 4, generator=ember.Generator(42)).numpy())


def test_random_distributions(device):
    g = ember.Generator(0)
    u = ember.rand(4000, generator=g, device=device).numpy()
    n = ember.randn(4000, generator=g, device=device).numpy()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.03
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    r = ember.randint(2, 5, (100,), generator=g, device=device).numpy()
    assert r.min() >= 2 and r.max() <= 4 and r.dtype == np.int64
    h = ember.randn(2, 3, generator=g, dtype=ember.f16, device=device)
    assert h.dtype is ember.f16 and h.shape == (2, 3)
    like = ember.randn_like(h, generator=g)
    assert like.dtype is ember.f16 and like.device == device
    assert ember.rand(0, 3, device=device).shape == (0, 3)
    assert ember.randn(generator=g, device=device).shape == ()


@pytest.mark.parametrize("dtype_name", ["f32", "f16", "f64", "i64", "i32", "u32", "u8"])
def test_from_numpy_shares_memory_on_the_cpu(dtype_name):
    a = np.arange(6).reshape(2, 3).astype(RESULT[dtype_name])
    t = ember.from_numpy(a)
    assert t.dtype is _dtype(dtype_name) and t.device == ember.Device.cpu()
    a[0, 1] = 9
    assert t.tolist()[0][1] == 9, "from_numpy copied the array"
    back = t.numpy()
    assert np.shares_memory(back, a)
    back[1, 2] = 5
    assert a[1, 2] == 5


def test_from_numpy_bool_and_strided():
    t = ember.from_numpy(np.array([True, False, True]))
    assert t.dtype is ember.u8 and t.tolist() == [1, 0, 1]
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    t = ember.from_numpy(a)
    np.testing.assert_array_equal(t.numpy(), a)


def test_from_numpy_to_another_device(device):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ember.from_numpy(a, device=device)
    assert t.device == device
    check(t, a, "f32")


@pytest.mark.parametrize("dtype_name", ALL)
def test_numpy_tolist_item(device, dtype_name):
    rng = rng_for("readback", dtype_name)
    x = sample((2, 3), dtype_name, rng)
    t = on_device(x, dtype_name, device)
    got = t.numpy()
    assert got.dtype == RESULT[dtype_name]
    np.testing.assert_array_equal(got.astype(np.float64), x.astype(np.float64))
    assert t.tolist() == x.astype(RESULT[dtype_name]).tolist()
    assert t.T.tolist() == x.T.astype(RESULT[dtype_name]).tolist()
    one = t[1, 2]
    value = one.item()
    assert value == x[1, 2].item() and type(value) is type(x[1, 2].item())
    assert t[1:, 2:].item() == x[1, 2].item()
    assert ember.tensor(x[0, 0], dtype=_dtype(dtype_name), device=device).shape == ()
    with pytest.raises(ember.ShapeMismatch, match=r"item.*\[2, 3\]"):
        t.item()


def test_python_number_conversions(device):
    t = ember.tensor(2.5, device=device)
    assert float(t) == 2.5 and int(t) == 2 and bool(t) is True
    i = ember.tensor(3, device=device)
    assert [10, 20, 30, 40][i] == 40
    assert len(ember.zeros(4, 2, device=device)) == 4
    rows = list(ember.tensor([[1, 2], [3, 4]], device=device))
    assert [r.tolist() for r in rows] == [[1, 2], [3, 4]]


def test_empty_readback(device):
    t = ember.zeros(0, 3, device=device)
    assert t.numpy().shape == (0, 3) and t.tolist() == []
    assert ember.zeros(2, 0, device=device).tolist() == [[], []]


@pytest.mark.parametrize("dtype_name", ["f16", "bf16"])
def test_half_precision_values_round_to_nearest(device, dtype_name):
    """Values that are not representable round to nearest even when a tensor is made."""
    x = np.array([1.0 + 2 ** -12, 1.0 + 3 * 2 ** -9, 65504.0, 1e-3, -7.3], np.float32)
    if dtype_name == "f16":
        expected = x.astype(np.float16).astype(np.float32)
    else:
        torch = require("torch")
        expected = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    t = on_device(x, dtype_name, device)
    np.testing.assert_array_equal(t.numpy().astype(np.float32), expected)
    assert representable(expected, dtype_name).tolist() == expected.tolist()


@pytest.mark.parametrize("dtype_name", INTS)
def test_integer_extremes_survive(device, dtype_name):
    info = np.iinfo(RESULT[dtype_name])
    x = np.array([info.min, info.max, 0], RESULT[dtype_name])
    if dtype_name == "i64" and device.kind == "wgpu":
        # WebGPU keeps i64 as i32 (core/backends/webgpu/dtypes.py): values beyond 32 bits
        # are refused on upload, naming the range; 32-bit extremes survive.
        with pytest.raises(ember.UnsupportedDType, match="do not fit in 32 bits"):
            ember.tensor(x, dtype=ember.i64, device=device)
        i32 = np.iinfo(np.int32)
        x = np.array([i32.min, i32.max, 0], np.int64)
    check(on_device(x, dtype_name, device), x, dtype_name)


# --- arange and eye are built on the device, their size checked first (issue 10.6) ---------
@pytest.mark.parametrize("args,dtype_name", [
    ((5000,), "i64"), ((-7, 9000, 3), "i32"), ((255, -1, -1), "u8"), ((2 ** 31, 2 ** 31 + 3000), "u32"),
    ((4000, 0, -2), "u32"), ((-2.5, 300.0, 0.125), "f32"), ((0, 1500), "f16"), ((1, -2, -0.001), "f32"),
    ((2 ** 31 - 3000, 2 ** 31 - 1), "i32"),
], ids=str)
def test_arange_matches_numpy_past_one_scan_chunk(device, args, dtype_name):
    """Sizes of thousands (several scan chunks on WebGPU), signed and unsigned, counting up
    and down, up to the edge of the dtype's range."""
    out = ember.arange(*args, dtype=_dtype(dtype_name), device=device)
    compute = np.float64 if dtype_name in FLOATS else np.int64
    check(out, np.arange(*args, dtype=compute).astype(RESULT[dtype_name]), dtype_name)


@pytest.mark.parametrize("dtype_name", ["f32", "i32", "u8"])
def test_eye_matches_numpy_at_a_larger_size(device, dtype_name):
    for n, m in ((37, 50), (300, 7)):
        check(ember.eye(n, m, dtype=_dtype(dtype_name), device=device),
              np.eye(n, m, dtype=RESULT[dtype_name]), dtype_name)


@pytest.mark.parametrize("call", [
    lambda d: ember.arange(2 ** 40, device=d),
    lambda d: ember.arange(0.0, 2.0 ** 41, 1.0, device=d),
    lambda d: ember.eye(2 ** 21, device=d),
], ids=["arange-int", "arange-float", "eye"])
def test_arange_and_eye_refuse_a_size_no_device_holds_before_building(device, call):
    """The size is refused up front, by the device's allocation check: before this, arange
    grew a Python list of 2**40 values until MemoryError (here it would never finish)."""
    with pytest.raises(ember.OutOfMemory) as info:
        call(device)
    msg = str(info.value)
    assert msg.startswith(("arange: ", "eye: ")) and info.value.op in ("arange", "eye")
    assert device.kind in msg and " bytes" in msg  # the device says how much it refused


@pytest.mark.parametrize("args,kw,error,pattern", [
    ((0, 5, 0), {}, ember.InvalidArgument, r"arange: step must not be 0"),
    ((float("nan"),), {}, ember.InvalidArgument, r"arange: end must be a finite number, got nan"),
    ((0, float("inf")), {}, ember.InvalidArgument, r"arange: end must be a finite number"),
    ((0, 300), {"dtype": "u8"}, ember.DTypeMismatch, r"arange: scalar 299 out of range for dtype u8"),
    ((-1, 3), {"dtype": "u32"}, ember.DTypeMismatch, r"arange: scalar -1 out of range for dtype u32"),
    ((0, 3, 0.5), {"dtype": "i32"}, ember.DTypeMismatch, r"arange: scalar 0.5 is not representable"),
], ids=str)
def test_arange_refuses_bad_arguments(device, args, kw, error, pattern):
    kw = {k: _dtype(v) for k, v in kw.items()}
    with pytest.raises(error, match=pattern):
        ember.arange(*args, device=device, **kw)


@pytest.mark.parametrize("call,pattern", [
    (lambda d: ember.eye(-2, device=d), r"eye: negative size in shape \[-2, -2\]"),
    (lambda d: ember.eye(3, -1, device=d), r"eye: negative size in shape \[3, -1\]"),
    (lambda d: ember.eye(2.5, device=d), r"eye: sizes must be integers"),
], ids=["n", "m", "float"])
def test_eye_refuses_bad_sizes(device, call, pattern):
    with pytest.raises(ember.ShapeMismatch, match=pattern):
        call(device)
