// conv2d as an implicit GEMM: the input is read through each output pixel's window
// indices (no im2col buffer), bias and activation applied as the result is stored.
// GEMM view per (image, group): M = output channels, N = output pixels, K = input
// channels x KH x KW. An invocation holds a {{TM4}}*4 x {{TN}} register tile: 4*TM4
// consecutive output channels (the weight, transposed to [K][channels], read as vec4s)
// by TN pixels {{WG}} apart, so a workgroup's lanes read neighbouring input pixels
// (coalesced on GPUs, contiguous gathers on CPU adapters) and the same weights (one
// broadcast load). Padding is a select on the window's bounds, never a padded copy.
// One launch covers a block of images x groups (workgroup z), of output channels
// (workgroup y), of output rows (the pixels of workgroup x) and of input channels (K in
// parts accumulated into Y: acc, and epi_on on the last part only); conv.py plans the
// blocks so that no binding exceeds the adapter's limit and no loop runs past lavapipe's
// cap.
// Placeholders: {{S}} storage type (math in f32), {{ROUND}}, {{TM4}}, {{TN}}, {{WG}},
// {{ACT}} (an expression in x: core/ops.py's activation, or x). The kernel's size is a
// parameter, not a constant: one pipeline serves every kernel size (lavapipe compiles a
// pipeline in about half a second).
// Without a bias (has_bias 0) BIAS is bound to any buffer and never read.
// Parameters: the "conv2d" block of core/backends/webgpu/params.py (elements; W's in
// vec4s). X's rows are addressed from x_row0, the first input row its binding holds.
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read> W: array<vec4<{{S}}>>;
@group(0) @binding(3) var<storage, read_write> Y: array<{{S}}>;
@group(0) @binding(4) var<storage, read> BIAS: array<{{S}}>;

const TM4 = {{TM4}}u;
const TN = {{TN}}u;
const WG = {{WG}}u;

fn activation(x: f32) -> f32 { return {{ACT}}; }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let npix = p(P_NPIX);
    let ow = p(P_OW);
    let img = wid.z / p(P_NG);
    let g = wid.z % p(P_NG);
    let xb = p(P_X_OFF) + img * p(P_X_NS) + g * p(P_X_GS);
    let wb = p(P_W_OFF) + g * p(P_W_GS) + wid.y * TM4;
    let q0 = wid.x * TN * WG + lid.x;
    let in_h = i32(p(P_IN_H));
    let in_w = i32(p(P_IN_W));
    // Each pixel's window origin; pixels past the block repeat the last (never stored).
    var iy0: array<i32, TN>;
    var ix0: array<i32, TN>;
    for (var j = 0u; j < TN; j++) {
        let q = min(q0 + j * WG, npix - 1u);
        iy0[j] = i32((p(P_OY0) + q / ow) * p(P_SH)) - i32(p(P_PH)) - i32(p(P_X_ROW0));
        ix0[j] = i32((q % ow) * p(P_SW)) - i32(p(P_PW));
    }
    let row0 = i32(p(P_X_ROW0));
    var acc: array<array<vec4<f32>, TM4>, TN>;
    let kh = p(P_KH);
    let kw = p(P_KW);
    let w_cs = kh * kw * p(P_W_KS);  // vec4s of W from one input channel to the next
    for (var a = 0u; a < kh; a++) {
        for (var b = 0u; b < kw; b++) {
            var off: array<u32, TN>;
            var ok: array<bool, TN>;
            for (var j = 0u; j < TN; j++) {
                let iy = iy0[j] + i32(a * p(P_DH));
                let ix = ix0[j] + i32(b * p(P_DW));
                ok[j] = iy + row0 >= 0 && iy + row0 < in_h && ix >= 0 && ix < in_w;
                // Outside the window's bounds: any element of the binding, not used.
                off[j] = xb + select(0u, u32(iy) * p(P_X_RS) + u32(ix) * p(P_X_WS), ok[j]);
            }
            var wk = wb + (a * kw + b) * p(P_W_KS);
            var xc = 0u;
            for (var c = 0u; c < p(P_C); c++) {
                var wv: array<vec4<f32>, TM4>;
                for (var i = 0u; i < TM4; i++) { wv[i] = vec4<f32>(W[wk + i]); }
                for (var j = 0u; j < TN; j++) {
                    let v = select(0.0, f32(X[off[j] + xc]), ok[j]);
                    for (var i = 0u; i < TM4; i++) { acc[j][i] = fma(vec4<f32>(v), wv[i], acc[j][i]); }
                }
                wk += w_cs;
                xc += p(P_X_CS);
            }
        }
    }
    let m_total = p(P_M);
    let m0 = wid.y * TM4 * 4u;
    let yb = p(P_Y_OFF) + img * p(P_Y_NS) + g * p(P_Y_GS);
    for (var j = 0u; j < TN; j++) {
        let q = q0 + j * WG;
        if (q >= npix) { continue; }
        for (var i = 0u; i < TM4; i++) {
            for (var e = 0u; e < 4u; e++) {
                let m = m0 + 4u * i + e;
                if (m >= m_total) { continue; }
                let o = yb + m * p(P_Y_CS) + q;
                var v = acc[j][i][e];
                if (p(P_ACC) != 0u) { v += f32(Y[o]); }
                // Rounded as stored, then bias and activation each rounded: the values
                // of the composite's separate passes in narrow dtypes.
                v = {{ROUND}}(v);
                if (p(P_EPI_ON) != 0u) {
                    if (p(P_HAS_BIAS) != 0u) {
                        v = {{ROUND}}(v + f32(BIAS[p(P_BIAS_OFF) + g * p(P_BIAS_GS) + m * p(P_BIAS_STRIDE)]));
                    }
                    v = {{ROUND}}(activation(v));
                }
                Y[o] = {{S}}(v);
            }
        }
    }
}
