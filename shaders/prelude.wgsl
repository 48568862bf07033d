// Shared by every ember kernel; the backend prepends a header with `alias T = ...;`
// (the compute type of the kernel's main operand) and `enable f16;` where needed.
//
// Binding 0 of group 0 is one 256-byte block of the per-batch uniform arena, selected by
// a dynamic offset: shapes, strides, offsets and scalars travel there, so no dispatch
// creates a buffer of its own.
@group(0) @binding(0) var<uniform> P: array<vec4<u32>, 16>;

fn p(i: u32) -> u32 { return P[i >> 2u][i & 3u]; }
fn pf(i: u32) -> f32 { return bitcast<f32>(p(i)); }
fn pi(i: u32) -> i32 { return bitcast<i32>(p(i)); }

// Flat invocation index of a grid folded into 2-D (at most 65,535 groups per dimension).
fn flat_index(gid: vec3<u32>, nwg: vec3<u32>, wg: u32) -> u32 {
    return gid.x + gid.y * nwg.x * wg;
}

// First flat element of an invocation of the elementwise kernels, which handle `ept`
// elements each, a workgroup (`wg`) apart (element e is first + e * wg): neighbouring
// invocations touch neighbouring elements, so there are fewer invocations (whose fixed
// cost dominates on CPU adapters) and accesses stay coalesced on GPUs.
fn first_element(gid: vec3<u32>, nwg: vec3<u32>, wg: u32, ept: u32) -> u32 {
    let g = flat_index(gid, nwg, wg);
    return (g / wg) * wg * ept + g % wg;
}

// Element offset of flat (row-major) index i in a strided view whose `nd` dims sit at
// P[shp..] and strides at P[str..]; `off` is the view's offset.
fn strided(i: u32, nd: u32, shp: u32, str: u32, off: u32) -> u32 {
    // One dim (every contiguous operand after collapsing): no division, which CPU
    // adapters cannot vectorise.
    if (nd == 1u) { return off + i * p(str); }
    var rem = i;
    var o = off;
    for (var k = nd; k > 0u; k--) {
        let d = k - 1u;
        let n = p(shp + d);
        o += (rem % n) * p(str + d);
        rem = rem / n;
    }
    return o;
}

// --- rounding of stored results, so narrow dtypes kept widened on the device behave
// like their host counterparts ------------------------------------------------------
fn round_bf16(v: f32) -> f32 {
    let u = bitcast<u32>(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) { return bitcast<f32>((u | 0x00400000u) & 0xffff0000u); }
    return bitcast<f32>((u + 0x7fffu + ((u >> 16u) & 1u)) & 0xffff0000u);
}
// pack2x16float is indeterminate outside f16's finite range (WGSL spec), and adapters
// without shader-f16 (SwiftShader) do return garbage there: values that round past 65504
// become +-inf explicitly, as numpy's float16 gives, and the rest is clamped before packing.
fn round_f16(v: f32) -> f32 {
    if (nan_f(v)) { return v; }   // clamp() below would turn NaN into a finite value
    if (abs(v) >= 65520.0) { return bitcast<f32>((bitcast<u32>(v) & 0x80000000u) | 0x7f800000u); }
    return unpack2x16float(pack2x16float(vec2<f32>(clamp(v, -65504.0, 65504.0), 0.0))).x;
}
// The f16 bits of a value already rounded by round_f16 (so finite, or exactly +-inf).
fn f16_bits(v: f32) -> u32 {
    if (nan_f(v)) { return 0x7e00u; }
    if (abs(v) > 65504.0) { return ((bitcast<u32>(v) >> 16u) & 0x8000u) | 0x7c00u; }
    return pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu;
}
fn wrap_u8(v: u32) -> u32 { return v & 0xffu; }
fn round_bf16_4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(round_bf16(v.x), round_bf16(v.y), round_bf16(v.z), round_bf16(v.w));
}
fn round_f16_4(v: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(round_f16(v.x), round_f16(v.y), round_f16(v.z), round_f16(v.w));
}

// NaN test on the bits: WGSL lets compilers assume floats are never NaN, and lavapipe
// folds `x != x` to false.
fn nan_f(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }

// --- math helpers named by core/ops.py's WGSL expressions -------------------------------
fn tanh_f(x: f32) -> f32 {
    // Clamped: some drivers compute tanh through exp and return NaN for large |x|.
    if (nan_f(x)) { return x; }
    return tanh(clamp(x, -20.0, 20.0));
}

// sin/cos of any finite f32: WGSL promises its builtins' accuracy only on [-pi, pi]
// (rotary tables reach angles of thousands of radians, where some GPUs' fast cos drifts),
// so the argument is first reduced by k multiples of 2*pi, with 2*pi split into constants
// of at most 8 significant bits (Cody-Waite): each k * c is exact for |k| < 2^16 and each
// subtraction nearly so, leaving the reduced angle within about 1e-7 of the true one.
fn reduce_2pi(x: f32) -> f32 {
    let k = round(x * 0.15915494309189535);
    var r = x - k * 6.28125;
    r = r - k * 0.0019378662109375;
    r = r - k * -2.562999725341797e-06;
    r = r - k * 3.958120942115784e-09;
    return r - k * 1.0253376273028358e-11;
}
fn sin_f(x: f32) -> f32 { return sin(reduce_2pi(x)); }
fn cos_f(x: f32) -> f32 { return cos(reduce_2pi(x)); }

fn erfc_tail(ax: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * ax);
    let poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
        -0.82215223 + t * 0.17087277))))))));
    return t * exp(poly - ax * ax);
}

fn erf_f(x: f32) -> f32 {
    let ax = abs(x);
    if (ax < 0.5) {
        let x2 = x * x;
        return 1.1283791670955126 * x * (1.0 + x2 * (-1.0 / 3.0 + x2 * (0.1 + x2 * (
            -1.0 / 42.0 + x2 * (1.0 / 216.0 + x2 * (-1.0 / 1320.0))))));
    }
    return sign(x) * (1.0 - erfc_tail(min(ax, 10.0)));
}

fn gelu_tanh(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_f(0.7978845608028654 * (x + 0.044715 * (x * x * x))));
}

// pow with numpy's meaning for a negative base and an integral exponent.
fn pow_f(a: f32, b: f32) -> f32 {
    if (a >= 0.0 || b != floor(b)) { return pow(a, b); }
    let m = pow(-a, b);
    if (fract(b * 0.5) != 0.0) { return -m; }
    return m;
}

// Integer division that floors like Python's //, and gives 0 for a zero divisor as numpy
// does. Written on magnitudes: `%` and `/` of negative integers differ between drivers.
fn idiv(a: T, b: T) -> T {
    if (b == T(0)) { return T(0); }
    // On magnitudes as u32: abs() of the i32 minimum does not fit an i32 (it gave
    // -2147483648 // 2 = +1073741824). The minimum // -1 wraps as numpy's int32 does.
    let ma = select(0u - bitcast<u32>(a), bitcast<u32>(a), a >= T(0));
    let mb = select(0u - bitcast<u32>(b), bitcast<u32>(b), b >= T(0));
    let q = ma / mb;
    if ((a < T(0)) == (b < T(0))) { return bitcast<T>(q); }
    return bitcast<T>(0u - q - select(0u, 1u, ma - q * mb != 0u));
}
