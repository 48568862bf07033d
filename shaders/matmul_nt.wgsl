// Float matmul for B read transposed (x @ W.T with W [N, K] row-major, as in a Linear
// layer): A rows and W rows both run along K, so each invocation keeps a {{TM}} x {{TN}}
// register tile of dot products over vec4 runs of K. No shared memory (see matmul_nn).
// Needs: K, a/b offsets and row strides multiples of 4.
// Placeholders: {{S}} storage type (f32 or f16; math in f32), {{ROUND}}, {{TM}}, {{TN}},
// {{WGX}}, {{WGY}}, {{NB}}, EPILOGUE (epilogue.py), STORE_TILE (matmul.py: the tile's
// store and the epilogue pass, shared with matmul_nt_sg).
// Parameters: the "matmul_nt" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> A: array<vec4<{{S}}>>;
@group(0) @binding(2) var<storage, read> B: array<vec4<{{S}}>>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

{{EPILOGUE}}

@compute @workgroup_size({{WGX}}, {{WGY}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n0 = gid.x * {{TN}}u;
    let m0 = gid.y * {{TM}}u;
    let m_total = p(P_M);
    let n_total = p(P_N);
    if (n0 >= n_total || m0 >= m_total) { return; }
    let bi = gid.z;
    let ab = strided(bi, {{NB}}u, P_BATCH, P_A_BS, p(P_A_OFF));
    let bb = strided(bi, {{NB}}u, P_BATCH, P_B_BS, p(P_B_OFF));
    var arow: array<u32, {{TM}}>;
    var brow: array<u32, {{TN}}>;
    for (var r = 0u; r < {{TM}}u; r++) { arow[r] = ab + min(m0 + r, m_total - 1u) * p(P_A_RS); }
    for (var c = 0u; c < {{TN}}u; c++) { brow[c] = bb + min(n0 + c, n_total - 1u) * p(P_B_CS); }
    var acc: array<array<f32, {{TN}}>, {{TM}}>;
    let k4 = p(P_K);
    for (var k = 0u; k < k4; k++) {
        var bv: array<vec4<f32>, {{TN}}>;
        for (var c = 0u; c < {{TN}}u; c++) { bv[c] = vec4<f32>(B[brow[c] + k]); }
        for (var r = 0u; r < {{TM}}u; r++) {
            let a = vec4<f32>(A[arow[r] + k]);
            for (var c = 0u; c < {{TN}}u; c++) { acc[r][c] += dot(a, bv[c]); }
        }
    }
{{STORE_TILE}}
}
