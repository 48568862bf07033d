// out = x @ dequantize(W).T with W (N, K) kept as its raw ggml blocks: the weights are
// decoded inside the dot products, never stored as f32. With {{MODE}} matmul (CPU
// adapters) one invocation computes one output column n for {{TM}} rows of x (decoding:
// 1 row; a prompt runs tiles of rows, each decoding the weight row again). With {{MODE}}
// gemv (decoding on GPUs) {{LANES}} invocations share one column n, each decoding every
// {{LANES}}-th block of W's row, and their sums meet in workgroup memory.
// W is the file's raw bytes as u32 words, uploaded unchanged. Blocks are not 4-byte aligned
// in most types (Q4_0 18 bytes, Q5_0 22, Q8_0 34, Q3_K 110, Q6_K 210), so fields are read by
// byte offset: `bytes4` assembles 4 bytes from two words. f16 scales are decoded from their
// bits by hand (no shader-f16, and subnormal scales must not flush to zero).
// One decoder per ggml type, `<qtype>_block(base, xk)`: the block at byte `base` holds the
// row's weights from vec4 index `xk`; the float operations are grouped as ember.io.quant's
// (and ggml's) dequantizers group them.
// With {{MODE}} dequant the same decoders write the weights out as f32 instead (for
// prompts: rows of W dequantized into a scratch buffer for the f32 matmul kernels).
// Placeholders: {{MODE}} (matmul, gemv or dequant), {{QTYPE}} (q4_0, q4_1, q5_0, q5_1, q8_0,
// q2_k, q3_k, q4_k, q5_k, q6_k: the block decoder called), {{TS}} bytes per block, {{QK4}} weights per block / 4, {{TM}},
// {{WG}}, {{LANES}} (gemv: invocations per column, a power of 2 dividing {{WG}}; 1 otherwise).
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
// Bits shift .. of each of the 4 bytes of a word, masked by `mask`.
fn fields4(w: u32, shift: u32, mask: u32) -> vec4<u32> {
    return (vec4<u32>(w) >> (vec4<u32>(0u, 8u, 16u, 24u) + shift)) & vec4<u32>(mask);
}
fn nib4(w: u32, shift: u32) -> vec4<u32> { return fields4(w, shift, 15u); }

// The decoded weights k*4 .. k*4+3 of the row: into the dot products (matmul), or stored
// as f32 (dequant).
fn add_rows(k: u32, wv: vec4<f32>) { emit_{{MODE}}(k, wv); }

fn emit_matmul(k: u32, wv: vec4<f32>) {
    for (var r = 0u; r < {{TM}}u; r++) { acc[r] += dot(X[xrow[r] + k], wv); }
}
fn emit_gemv(k: u32, wv: vec4<f32>) { emit_matmul(k, wv); }

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

// Q4_1: f16 d, f16 m, then nibbles as Q4_0; w = q * d + m.
fn q4_1_block(base: u32, xk: u32) {
    let d = half_at(base);
    let m = half_at(base + 2u);
    for (var i = 0u; i < 4u; i++) {
        let w = bytes4(base + 4u + 4u * i);
        add_rows(xk + i, vec4<f32>(nib4(w, 0u)) * d + m);
        add_rows(xk + 4u + i, vec4<f32>(nib4(w, 4u)) * d + m);
    }
}

// Q5_0 / Q5_1: nibbles as Q4_0, and bit j of the 32-bit qh is weight j's fifth bit. The
// 5-bit values of weights 4i .. 4i+3 (high = 0, from the low nibbles of the word `qs`) or
// 16+4i .. 16+4i+3 (high = 1, its high nibbles).
fn q5_values(qh: u32, qs: u32, i: u32, high: u32) -> vec4<f32> {
    let h = (vec4<u32>(qh) >> (vec4<u32>(0u, 1u, 2u, 3u) + 16u * high + 4u * i)) & vec4<u32>(1u);
    return vec4<f32>(nib4(qs, 4u * high) | (h << vec4<u32>(4u)));
}

// Q5_0: f16 d, qh, 16 bytes of nibbles; w = d * (q - 16).
fn q5_0_block(base: u32, xk: u32) {
    let d = half_at(base);
    let qh = bytes4(base + 2u);
    for (var i = 0u; i < 4u; i++) {
        let w = bytes4(base + 6u + 4u * i);
        add_rows(xk + i, d * (q5_values(qh, w, i, 0u) - 16.0));
        add_rows(xk + 4u + i, d * (q5_values(qh, w, i, 1u) - 16.0));
    }
}

// Q5_1: f16 d, f16 m, qh, 16 bytes of nibbles; w = d * q + m.
fn q5_1_block(base: u32, xk: u32) {
    let d = half_at(base);
    let m = half_at(base + 2u);
    let qh = bytes4(base + 4u);
    for (var i = 0u; i < 4u; i++) {
        let w = bytes4(base + 8u + 4u * i);
        add_rows(xk + i, d * q5_values(qh, w, i, 0u) + m);
        add_rows(xk + 4u + i, d * q5_values(qh, w, i, 1u) + m);
    }
}

// Q2_K and Q3_K: 16 groups of 16 weights, each with its own scale; 64 bytes of 2-bit
// values at byte `qs`: weight j = 128h + 32f + l is bits 2f of byte 32h + l, so group
// g = 8h + 2f + (l >> 4) covers bytes 32h + 16(g & 1) .. + 15 at shift 2f. The 2-bit
// values of weights 4i .. 4i+3 of group g (i < 4), and the byte offset within the 32-byte
// half that holds them (Q3_K's hmask is indexed by it too).
fn crumb_byte(g: u32, i: u32) -> u32 { return 16u * (g & 1u) + 4u * i; }
fn crumbs4(qs: u32, g: u32, i: u32) -> vec4<u32> {
    return fields4(bytes4(qs + 32u * (g >> 3u) + crumb_byte(g, i)), 2u * ((g >> 1u) & 3u), 3u);
}

// Q2_K: 16 bytes of scale (low nibble) / min (high nibble) per group, the 2-bit values,
// f16 d, f16 dmin; w = (d * sc) * q - dmin * m.
fn q2_k_block(base: u32, xk: u32) {
    let d = half_at(base + 80u);
    let dmin = half_at(base + 82u);
    for (var g = 0u; g < 16u; g++) {
        let sm = byte_at(base + g);
        let dl = d * f32(sm & 15u);
        let ml = dmin * f32(sm >> 4u);
        for (var i = 0u; i < 4u; i++) {
            add_rows(xk + 4u * g + i, dl * vec4<f32>(crumbs4(base + 16u, g, i)) - ml);
        }
    }
}

// Q3_K: 32 bytes hmask (bit 4h + f of byte l: the third bit of weight 128h + 32f + l), the
// 2-bit values, 16 6-bit scales in 12 bytes, f16 d. Scale g: low 4 bits from byte g & 7
// (high nibble for g >= 8), high 2 bits from byte 8 + (g & 3) at shift 2(g >> 2), minus 32;
// w = (d * sc) * (q - 4), q the 3-bit value.
fn q3_k_scale(base: u32, g: u32) -> f32 {
    let s = base + 96u;
    let lo = (byte_at(s + (g & 7u)) >> (4u * (g >> 3u))) & 15u;
    let hi = (byte_at(s + 8u + (g & 3u)) >> (2u * (g >> 2u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}

fn q3_k_block(base: u32, xk: u32) {
    let d = half_at(base + 108u);
    for (var g = 0u; g < 16u; g++) {
        let dl = d * q3_k_scale(base, g);
        let bit = 4u * (g >> 3u) + ((g >> 1u) & 3u);
        for (var i = 0u; i < 4u; i++) {
            let h = fields4(bytes4(base + crumb_byte(g, i)), bit, 1u);
            let q = crumbs4(base + 32u, g, i) | (h << vec4<u32>(2u));
            add_rows(xk + 4u * g + i, dl * (vec4<f32>(q) - 4.0));
        }
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

// Q5_K: Q4_K's d, dmin and scales, 32 bytes qh, then Q4_K's nibbles (at byte 48): the
// fifth bit of weight 32s + l (sub-block s) is bit s of qh byte l; w = (d * sc) * q - dmin * m.
fn q5_k_block(base: u32, xk: u32) {
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
            let w = bytes4(base + 48u + 32u * c + 4u * i);
            let h = bytes4(base + 16u + 4u * i);
            let q0 = nib4(w, 0u) | (fields4(h, 2u * c, 1u) << vec4<u32>(4u));
            let q1 = nib4(w, 4u) | (fields4(h, 2u * c + 1u, 1u) << vec4<u32>(4u));
            add_rows(xk + 16u * c + i, ds0 * vec4<f32>(q0) - dm0);
            add_rows(xk + 16u * c + 8u + i, ds1 * vec4<f32>(q1) - dm1);
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
                let q = nib4(ql, 4u * (g >> 1u)) | (fields4(qh, 2u * g, 3u) << vec4<u32>(4u));
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

// gemv (decoding on GPUs, {{TM}} <= 4 rows of x): a workgroup holds {{WG}} / {{LANES}}
// columns n; lane l of a column decodes its row's blocks l, l + {{LANES}}, ... (neighbouring
// lanes read neighbouring blocks), then the lanes' sums are added in a tree through
// workgroup memory. No subgroup operations: right for any subgroup size. Barriers are
// reached by every invocation (the column and row guards wrap the work, not the tree).
var<workgroup> partial: array<vec4<f32>, {{WG}}>;

fn main_gemv(gid: vec3<u32>, nwg: vec3<u32>) {
    let li = gid.x % {{WG}}u;
    let lane = li % {{LANES}}u;
    let n = gid.x / {{LANES}}u;
    let m0 = gid.y * {{TM}}u;
    let m_total = p(P_M);
    for (var r = 0u; r < {{TM}}u; r++) {
        xrow[r] = p(P_X_OFF) + min(m0 + r, m_total - 1u) * p(P_X_RS);
        acc[r] = 0.0;
    }
    let live = n < p(P_N);
    if (live) {
        let row = p(P_W_OFF) + n * p(P_W_ROW);
        let nblocks = p(P_BLOCKS);
        for (var b = lane; b < nblocks; b += {{LANES}}u) {
            {{QTYPE}}_block(row + b * {{TS}}u, b * {{QK4}}u);
        }
    }
    var v = vec4<f32>(0.0);
    for (var r = 0u; r < {{TM}}u; r++) { v[r] = acc[r]; }
    partial[li] = v;
    for (var s = {{LANES}}u / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lane < s) { partial[li] += partial[li + s]; }
    }
    if (!live || lane != 0u) { return; }
    let sum = partial[li];
    for (var r = 0u; r < {{TM}}u; r++) {
        if (m0 + r < m_total) {
            let o = p(P_O_OFF) + (m0 + r) * p(P_O_RS) + n;
            var y = sum[r];
            if (p(P_ACC) != 0u) { y += O[o]; }
            O[o] = y;
        }
    }
}
