// f32 matmul for B with unit column stride (x @ W with W [K, N] row-major): each
// invocation keeps a {{TM}} x 4 register tile, reading B as vec4 columns and A as vec4
// runs along K. No shared memory or barriers: on CPU-backed adapters (lavapipe) barriers
// cost more than the reuse they buy, and on GPUs the caches catch the reuse.
// Needs: N, K, b/a offsets and row strides multiples of 4, A unit K-stride.
// Placeholders: {{TM}} rows per invocation, {{WGX}}, {{WGY}} workgroup shape, {{NB}}.
// P: 0 M, 1 N/4, 2 K/4, 4 a offset/4, 5 b offset/4, 6 out offset/4, 7 accumulate,
// 8 a row stride/4, 10 b row stride/4, 12 out row stride/4,
// 16.. batch shape, a, b and out batch strides (/4 where the operand is vec4)
@group(0) @binding(1) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> O: array<vec4<f32>>;

@compute @workgroup_size({{WGX}}, {{WGY}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c4 = gid.x;
    let m0 = gid.y * {{TM}}u;
    let m_total = p(0u);
    if (c4 >= p(1u) || m0 >= m_total) { return; }
    let bi = gid.z;
    let ab = strided(bi, {{NB}}u, 16u, 16u + {{NB}}u, p(4u));
    let bb = strided(bi, {{NB}}u, 16u, 16u + 2u * {{NB}}u, p(5u)) + c4;
    let lda = p(8u);
    let ldb = p(10u);
    var rows: array<u32, {{TM}}>;
    for (var r = 0u; r < {{TM}}u; r++) { rows[r] = ab + min(m0 + r, m_total - 1u) * lda; }
    var acc: array<vec4<f32>, {{TM}}>;
    let k4 = p(2u);
    for (var k = 0u; k < k4; k++) {
        let kb = bb + 4u * k * ldb;
        let b0 = B[kb];
        let b1 = B[kb + ldb];
        let b2 = B[kb + 2u * ldb];
        let b3 = B[kb + 3u * ldb];
        for (var r = 0u; r < {{TM}}u; r++) {
            let a = A[rows[r] + k];
            acc[r] += a.x * b0 + a.y * b1 + a.z * b2 + a.w * b3;
        }
    }
    let ob = strided(bi, {{NB}}u, 16u, 16u + 3u * {{NB}}u, p(6u)) + c4;
    for (var r = 0u; r < {{TM}}u; r++) {
        if (m0 + r < m_total) {
            let o = ob + (m0 + r) * p(12u);
            var v = acc[r];
            if (p(7u) != 0u) { v += O[o]; }
            O[o] = v;
        }
    }
}
