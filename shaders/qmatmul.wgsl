// out = x @ dequantize(W).T with W (N, K) kept as its raw ggml blocks: the weights are
// decoded inside the dot products, never stored as f32. One invocation computes one output
// column n for {{TM}} rows of x (decoding: 1 row; a prompt runs tiles of rows, each
// decoding the weight row again).
// W is the raw bytes as u32 words. Blocks are not 4-byte aligned in every type (Q8_0 34
// bytes, Q6_K 210), so fields are read by byte offset: `bytes4` assembles 4 bytes from two
// words. f16 scales are decoded from their bits by hand (no shader-f16, and subnormal
// scales must not flush to zero).
// With {{MODE}} dequant the same decoders write the weights out as f32 instead (for
// prompts: rows of W dequantized into a scratch buffer for the f32 matmul kernels).
// Placeholders: {{MODE}} (matmul or dequant), {{QTYPE}} (q8_0, q4_0, q4_k, q6_k: the
// block decoder called), {{TS}} bytes per block, {{QK4}} weights per block / 4, {{TM}},
// {{WG}}.
// Parameters: the "qmatmul" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> O: array<f32>;

var<private> xrow: array<u32, {{TM}}>;   // each row's first vec4 of x
var<private> acc: array<f32, {{TM}}>;

// 4 bytes starting at byte b, little-endian (b need not be 4-aligned).
fn bytes4(b: u32) -> u32 {
    let w = b >> 2u;
    let s = (b & 3u) * 8u;
    let lo = W[w];
    if (s == 0u) { return lo; }
    return (lo >> s) | (W[w + 1u] << (32u - s));
}

fn byte_at(b: u32) -> u32 { return (W[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu; }

fn half_to_f32(h: u32) -> f32 {
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    var v: f32;
    if (e == 0u) {
        v = f32(m) * 5.9604644775390625e-8;                // subnormal: m * 2^-24, exact
    } else if (e == 31u) {
        v = bitcast<f32>(0x7f800000u | (m << 13u));
    } else {
        v = bitcast<f32>(((e + 112u) << 23u) | (m << 13u));
    }
    return select(v, -v, (h & 0x8000u) != 0u);
}

// f16 fields sit at even byte offsets in every block layout here (all block sizes are even).
fn half_at(b: u32) -> f32 { return half_to_f32((W[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu); }

// The 4 bytes of a word as signed / unsigned values.
fn i8x4(w: u32) -> vec4<f32> {
    return vec4<f32>(vec4<i32>(bitcast<i32>(w << 24u), bitcast<i32>(w << 16u),
                               bitcast<i32>(w << 8u), bitcast<i32>(w)) >> vec4<u32>(24u));
}
fn nib4(w: u32, shift: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(15u);
}

// The decoded weights k*4 .. k*4+3 of the row: into the dot products (matmul), or stored
// as f32 (dequant).
fn add_rows(k: u32, wv: vec4<f32>) { emit_{{MODE}}(k, wv); }

fn emit_matmul(k: u32, wv: vec4<f32>) {
    for (var r = 0u; r < {{TM}}u; r++) { acc[r] += dot(X[xrow[r] + k], wv); }
}

var<private> obase: u32;    // dequant: where the row's weights go in O

fn emit_dequant(k: u32, wv: vec4<f32>) {
    let o = obase + 4u * k;
    O[o] = wv.x;
    O[o + 1u] = wv.y;
    O[o + 2u] = wv.z;
    O[o + 3u] = wv.w;
}

// Q8_0: f16 d, 32 int8 q; w = q * d.
fn q8_0_block(base: u32, xk: u32) {
    let d = half_at(base);
    for (var i = 0u; i < 8u; i++) { add_rows(xk + i, i8x4(bytes4(base + 2u + 4u * i)) * d); }
}

// Q4_0: f16 d, 16 bytes; weight j < 16 is the low nibble of byte j, j >= 16 the high
// nibble of byte j - 16; w = (q - 8) * d.
fn q4_0_block(base: u32, xk: u32) {
    let d = half_at(base);
    for (var i = 0u; i < 4u; i++) {
        let w = bytes4(base + 2u + 4u * i);
        add_rows(xk + i, (vec4<f32>(nib4(w, 0u)) - 8.0) * d);
        add_rows(xk + 4u + i, (vec4<f32>(nib4(w, 4u)) - 8.0) * d);
    }
}

// Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks of 32, 128 bytes
// of nibbles: chunk c of 32 bytes holds sub-block 2c (low nibbles) and 2c + 1 (high);
// w = (d * sc) * q - dmin * m.
fn k_scale_min(base: u32, j: u32) -> vec2<f32> {
    let s = base + 4u;
    if (j < 4u) { return vec2<f32>(f32(byte_at(s + j) & 63u), f32(byte_at(s + j + 4u) & 63u)); }
    let hi = byte_at(s + j + 4u);
    let sc = (hi & 15u) | ((byte_at(s + j - 4u) >> 6u) << 4u);
    let mn = (hi >> 4u) | ((byte_at(s + j) >> 6u) << 4u);
    return vec2<f32>(f32(sc), f32(mn));
}

fn q4_k_block(base: u32, xk: u32) {
    let d = half_at(base);
    let dmin = half_at(base + 2u);
    for (var c = 0u; c < 4u; c++) {
        let lo = k_scale_min(base, 2u * c);
        let hi = k_scale_min(base, 2u * c + 1u);
        let ds0 = d * lo.x;
        let dm0 = dmin * lo.y;
        let ds1 = d * hi.x;
        let dm1 = dmin * hi.y;
        for (var i = 0u; i < 8u; i++) {
            let w = bytes4(base + 16u + 32u * c + 4u * i);
            add_rows(xk + 16u * c + i, ds0 * vec4<f32>(nib4(w, 0u)) - dm0);
            add_rows(xk + 16u * c + 8u + i, ds1 * vec4<f32>(nib4(w, 4u)) - dm1);
        }
    }
}

// Q6_K: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 scales, f16 d.
// Weight j = 128h + 32g + l: low bits from ql byte 64h + 32(g & 1) + l (high nibble when
// g >= 2), high bits (qh byte 32h + l) >> 2g; scale j / 16; w = (d * sc) * (q - 32).
fn q6_k_block(base: u32, xk: u32) {
    let d = half_at(base + 208u);
    for (var h = 0u; h < 2u; h++) {
        for (var g = 0u; g < 4u; g++) {
            for (var l4 = 0u; l4 < 8u; l4++) {
                let ql = bytes4(base + 64u * h + 32u * (g & 1u) + 4u * l4);
                let qh = bytes4(base + 128u + 32u * h + 4u * l4);
                let sb = byte_at(base + 192u + 8u * h + 2u * g + (l4 >> 2u));
                let sc = f32(bitcast<i32>(sb << 24u) >> 24u);
                let q = nib4(ql, 4u * (g >> 1u)) |
                    (((vec4<u32>(qh) >> (vec4<u32>(0u, 8u, 16u, 24u) + 2u * g)) & vec4<u32>(3u)) << vec4<u32>(4u));
                add_rows(xk + 32u * h + 8u * g + l4, (d * sc) * (vec4<f32>(q) - 32.0));
            }
        }
    }
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) { main_{{MODE}}(gid, nwg); }

// dequant: one invocation per block; rows n of W (the dispatch's P1 rows of P2 blocks)
// go to O at P7 + n * P8. X is bound but not read.
fn main_dequant(gid: vec3<u32>, nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    let nblocks = p(P_BLOCKS);
    let n = i / nblocks;
    if (n >= p(P_N)) { return; }
    let b = i % nblocks;
    obase = p(P_O_OFF) + n * p(P_O_RS);
    {{QTYPE}}_block(p(P_W_OFF) + n * p(P_W_ROW) + b * {{TS}}u, b * {{QK4}}u);
}

fn main_matmul(gid: vec3<u32>, nwg: vec3<u32>) {
    let n = gid.x;
    let m0 = gid.y * {{TM}}u;
    let m_total = p(P_M);
    if (n >= p(P_N) || m0 >= m_total) { return; }
    for (var r = 0u; r < {{TM}}u; r++) {
        xrow[r] = p(P_X_OFF) + min(m0 + r, m_total - 1u) * p(P_X_RS);
        acc[r] = 0.0;
    }
    let row = p(P_W_OFF) + n * p(P_W_ROW);
    let nblocks = p(P_BLOCKS);
    for (var b = 0u; b < nblocks; b++) { {{QTYPE}}_block(row + b * {{TS}}u, b * {{QK4}}u); }
    for (var r = 0u; r < {{TM}}u; r++) {
        if (m0 + r < m_total) {
            let o = p(P_O_OFF) + (m0 + r) * p(P_O_RS) + n;
            var v = acc[r];
            if (p(P_ACC) != 0u) { v += O[o]; }
            O[o] = v;
        }
    }
}
