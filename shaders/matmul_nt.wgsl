// Float matmul for B read transposed (x @ W.T with W [N, K] row-major, as in a Linear
// layer): A rows and W rows both run along K, so each invocation keeps a {{TM}} x {{TN}}
// register tile of dot products over vec4 runs of K. No shared memory (see matmul_nn).
// Needs: K, a/b offsets and row strides multiples of 4.
// Placeholders: {{S}} storage type (f32 or f16; math in f32), {{ROUND}}, {{TM}}, {{TN}},
// {{WGX}}, {{WGY}}, {{NB}}, EPILOGUE (epilogue.py), STORE_TILE (matmul.py: the tile's
// store and the epilogue pass, shared with matmul_nt_sg).
// P: 0 M, 1 N, 2 K/4, 4 a offset/4, 5 b offset/4, 6 out offset, 7 accumulate,
// 8 a row stride/4, 11 b row (n) stride/4, 12 out row stride,
// 16.. batch shape, a, b and out batch strides (/4 where the operand is vec4)
@group(0) @binding(1) var<storage, read> A: array<vec4<{{S}}>>;
@group(0) @binding(2) var<storage, read> B: array<vec4<{{S}}>>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

{{EPILOGUE}}

@compute @workgroup_size({{WGX}}, {{WGY}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n0 = gid.x * {{TN}}u;
    let m0 = gid.y * {{TM}}u;
    let m_total = p(0u);
    let n_total = p(1u);
    if (n0 >= n_total || m0 >= m_total) { return; }
    let bi = gid.z;
    let ab = strided(bi, {{NB}}u, 16u, 16u + {{NB}}u, p(4u));
    let bb = strided(bi, {{NB}}u, 16u, 16u + 2u * {{NB}}u, p(5u));
    var arow: array<u32, {{TM}}>;
    var brow: array<u32, {{TN}}>;
    for (var r = 0u; r < {{TM}}u; r++) { arow[r] = ab + min(m0 + r, m_total - 1u) * p(8u); }
    for (var c = 0u; c < {{TN}}u; c++) { brow[c] = bb + min(n0 + c, n_total - 1u) * p(11u); }
    var acc: array<array<f32, {{TN}}>, {{TM}}>;
    let k4 = p(2u);
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
