"""How dtypes live on a WebGPU device (core/backends/webgpu/dtypes.py): f16 with and
without `shader-f16`, bf16 and u8 stored widened, i64 stored as i32 with checked uploads."""
import numpy as np
import pytest
from helpers import require

import ember
from wgpu_device import wgpu  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def no_f16(wgpu):
    """A second device on the same adapter that behaves as if it lacked shader-f16 (as
    Chromium's SwiftShader does): f16 is then stored as f32 and rounded on every store."""
    from ember.backends.webgpu.backend import WebGPUBackend
    from ember.backends.webgpu.native import NativeDriver
    driver = NativeDriver(wgpu.backend.driver.adapter)
    driver.features.discard("shader-f16")
    backend = WebGPUBackend(driver, "wgpu:no-f16")
    assert not backend.has_f16 and backend.types["f16"].storage == "f32"
    return ember.Device("wgpu", 99, backend)


def _f16_cases():
    x = np.array([0.1, -2.5, 1e-5, 70000.0, -70000.0, 65504.0, 1.0 / 3, 0.0, np.nan, np.inf],
                 np.float32)
    y = np.array([3.3, 0.25, 1e-5, 1.0, -1.0, 32.0, 3.0, -0.0, 1.0, -np.inf], np.float32)
    return x, y


@pytest.mark.parametrize("which", ["native_f16", "no_f16"])
def test_f16_matches_numpy_float16(request, which):
    dev = request.getfixturevalue("wgpu" if which == "native_f16" else "no_f16")
    x, y = _f16_cases()
    with np.errstate(over="ignore"):   # 70000 -> inf in f16 is the point
        hx, hy = x.astype(np.float16), y.astype(np.float16)
    tx = ember.tensor(x, device=dev).to(ember.f16)            # rounding on the device
    ty = ember.tensor(hy, device=dev)                         # f16 bits uploaded
    np.testing.assert_array_equal(tx.numpy(), hx)
    with np.errstate(all="ignore"):
        expected_mul = (hx.astype(np.float32) * hy.astype(np.float32)).astype(np.float16)
        expected_add = (hx.astype(np.float32) + hy.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal((tx * ty).numpy(), expected_mul)
    np.testing.assert_array_equal((tx + ty).numpy(), expected_add)
    assert (tx * ty).tolist()[3] == float("inf")              # 70000 overflows to inf
    # odd element counts pack and unpack through whole words
    np.testing.assert_array_equal(tx[:3].contiguous().numpy(), hx[:3])


def test_bf16_stays_exactly_bf16(wgpu):
    torch = require("torch")
    x = np.random.default_rng(2).standard_normal(37).astype(np.float32) * 100
    tb = ember.tensor(x, device=wgpu).to(ember.bf16)
    ref = torch.from_numpy(x).to(torch.bfloat16)
    np.testing.assert_array_equal(tb.numpy(), ref.float().numpy())
    np.testing.assert_array_equal((tb * tb).numpy(), (ref * ref).float().numpy())
    # a bf16 tensor uploaded from raw bits comes back bit-identical through the CPU
    back = tb.to("cpu").to(wgpu)
    np.testing.assert_array_equal(back.numpy(), tb.numpy())


def test_u8_wraps_like_numpy(wgpu):
    a = np.array([250, 3, 128, 0, 255], np.uint8)
    b = np.array([10, 5, 128, 1, 255], np.uint8)
    ta, tb = ember.tensor(a, device=wgpu), ember.tensor(b, device=wgpu)
    np.testing.assert_array_equal((ta + tb).numpy(), a + b)
    np.testing.assert_array_equal((ta * tb).numpy(), a * b)
    np.testing.assert_array_equal((ta - tb).numpy(), a - b)
    assert (ta + tb).numpy().dtype == np.uint8


def test_i64_is_i32_on_the_device_with_checked_uploads(wgpu):
    x = np.array([-2 ** 31, -7, 0, 9, 2 ** 31 - 1], np.int64)
    t = ember.tensor(x, device=wgpu)
    np.testing.assert_array_equal(t.numpy(), x)               # sign-extended on readback
    assert t.numpy().dtype == np.int64
    np.testing.assert_array_equal((t[1:4] * 3).numpy(), x[1:4] * 3)
    with pytest.raises(ember.UnsupportedDType, match="32 bits"):
        ember.tensor(np.array([2 ** 31]), device=wgpu)
    with pytest.raises(ember.UnsupportedDType, match="32 bits"):
        ember.tensor(np.array([-2 ** 31 - 1]), device=wgpu)


@pytest.mark.parametrize("which", ["native_f16", "no_f16"])
@pytest.mark.parametrize("dtype_name", ["f16", "bf16"])
@pytest.mark.parametrize("layout", ["x_at_w", "x_at_w_t"])
def test_half_matmul_fast_paths_match_the_cpu(request, which, dtype_name, layout):
    """The vec4 matmul kernels read f16 (or f32-held bf16/f16) and round on store; the CPU
    computes in f32 and rounds once, so the results agree exactly."""
    dev = request.getfixturevalue("wgpu" if which == "native_f16" else "no_f16")
    cpu = ember.Device.cpu()
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2, 9, 16)).astype(np.float32)
    b = rng.standard_normal((16, 12)).astype(np.float32)

    def weight(device):
        if layout == "x_at_w":
            return ember.tensor(b, dtype=dtype_name, device=device)
        return ember.tensor(np.ascontiguousarray(b.T), dtype=dtype_name, device=device).t()

    got = ember.tensor(a, dtype=dtype_name, device=dev) @ weight(dev)
    ref = ember.tensor(a, dtype=dtype_name, device=cpu) @ weight(cpu)
    np.testing.assert_array_equal(got.to(ember.f32).numpy(), ref.to(ember.f32).numpy())
    # M = 18 >= 8 takes the subgroup kernel on lavapipe (matmul_nt_sg), else the vec4 tiles;
    # the gpu kernel set (forced by EMBER_WGPU_KERNELS=gpu) its shared-memory tiles.
    fast = {"cpu-adapter": ("matmul_nn", "matmul_nt", "matmul_nt_sg"),
            "gpu": ("matmul_tiled",)}[dev.backend.kernel_set]
    assert any(k[0] in fast for k in dev.backend.pipelines)
