// Float matmul for B with unit column stride (x @ W with W [K, N] row-major): each
// invocation keeps a {{TM}} x 4*{{TC}} register tile, reading B as vec4 columns and A as vec4
// runs along K. No shared memory or barriers: on CPU-backed adapters (lavapipe), the only
// ones that run it, barriers cost more than the reuse they buy (GPUs run matmul_tiled).
// Needs: N, K, b/a offsets and row strides multiples of 4, A unit K-stride.
// Placeholders: {{S}} storage type (f32 or f16; math in f32), {{ROUND}} a vec4 rounding
// (bf16 kept in f32), {{TM}} rows and {{TC}} vec4 columns per invocation, {{WGX}}, {{WGY}}
// workgroup shape, {{NB}}, EPILOGUE (epilogue.py; epilogue4 takes a vec4 of columns).
// Parameters: the "matmul_nn" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> A: array<vec4<{{S}}>>;
@group(0) @binding(2) var<storage, read> B: array<vec4<{{S}}>>;
@group(0) @binding(3) var<storage, read_write> O: array<vec4<{{S}}>>;

{{EPILOGUE}}

@compute @workgroup_size({{WGX}}, {{WGY}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c0 = gid.x * {{TC}}u;
    let m0 = gid.y * {{TM}}u;
    let m_total = p(P_M);
    let c_total = p(P_N);
    if (c0 >= c_total || m0 >= m_total) { return; }
    let bi = gid.z;
    let ab = strided(bi, {{NB}}u, P_BATCH, P_A_BS, p(P_A_OFF));
    let bb = strided(bi, {{NB}}u, P_BATCH, P_B_BS, p(P_B_OFF));
    let lda = p(P_A_RS);
    let ldb = p(P_B_RS);
    var rows: array<u32, {{TM}}>;
    for (var r = 0u; r < {{TM}}u; r++) { rows[r] = ab + min(m0 + r, m_total - 1u) * lda; }
    var cols: array<u32, {{TC}}>;
    for (var c = 0u; c < {{TC}}u; c++) { cols[c] = bb + min(c0 + c, c_total - 1u); }
    var acc: array<array<vec4<f32>, {{TC}}>, {{TM}}>;
    let k4 = p(P_K);
    for (var k = 0u; k < k4; k++) {
        let kb = 4u * k * ldb;
        var b: array<array<vec4<f32>, 4>, {{TC}}>;
        for (var c = 0u; c < {{TC}}u; c++) {
            b[c][0] = vec4<f32>(B[cols[c] + kb]);
            b[c][1] = vec4<f32>(B[cols[c] + kb + ldb]);
            b[c][2] = vec4<f32>(B[cols[c] + kb + 2u * ldb]);
            b[c][3] = vec4<f32>(B[cols[c] + kb + 3u * ldb]);
        }
        for (var r = 0u; r < {{TM}}u; r++) {
            let a = vec4<f32>(A[rows[r] + k]);
            for (var c = 0u; c < {{TC}}u; c++) {
                acc[r][c] += a.x * b[c][0] + a.y * b[c][1] + a.z * b[c][2] + a.w * b[c][3];
            }
        }
    }
    let ob = strided(bi, {{NB}}u, P_BATCH, P_O_BS, p(P_O_OFF));
    for (var r = 0u; r < {{TM}}u; r++) {
        for (var c = 0u; c < {{TC}}u; c++) {
            if (m0 + r < m_total && c0 + c < c_total) {
                let o = ob + (m0 + r) * p(P_O_RS) + c0 + c;
                var v = acc[r][c];
                if (p(P_ACC) != 0u) { v += vec4<f32>(O[o]); }
                O[o] = vec4<{{S}}>({{ROUND}}(v));
            }
        }
    }
    // The epilogue in a second pass over this invocation's outputs (re-read, still in
    // cache): inside the loop above it made lavapipe's kernel slower by more than the
    // separate elementwise passes it replaces (1024x1536 @ 1536x384: 52 ms against 39).
    if (epilogue_on()) {
        for (var r = 0u; r < {{TM}}u; r++) {
            for (var c = 0u; c < {{TC}}u; c++) {
                if (m0 + r < m_total && c0 + c < c_total) {
                    let o = ob + (m0 + r) * p(P_O_RS) + c0 + c;
                    let v = epilogue4(vec4<f32>(O[o]), m0 + r, 4u * (c0 + c));
                    O[o] = vec4<{{S}}>({{ROUND}}(v));
                }
            }
        }
    }
}
