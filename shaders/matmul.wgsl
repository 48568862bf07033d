// General strided batched matmul, one output per invocation: any dtype, any strides
// (broadcast batch dims have stride 0). The fast f32 paths are matmul_nn / matmul_nt.
// Placeholders: {{S}} storage type, {{ROUND}}, {{NB}} batch dims, {{WG}}, EPILOGUE
// (epilogue.py: fn epilogue(value, row, col), bias/activation/residual of a fused linear).
// P: 0 M, 1 N, 2 K, 3 outputs, 4 a offset, 5 b offset, 6 out offset, 7 accumulate,
// 8 a row stride, 9 a k stride, 10 b k stride, 11 b col stride, 12 out row stride,
// 16.. batch shape, a, b and out batch strides
@group(0) @binding(1) var<storage, read> A: array<{{S}}>;
@group(0) @binding(2) var<storage, read> B: array<{{S}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

{{EPILOGUE}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(3u)) { return; }
    let m_n = p(0u) * p(1u);
    let bi = i / m_n;
    let m = (i % m_n) / p(1u);
    let n = i % p(1u);
    let ab = strided(bi, {{NB}}u, 16u, 16u + {{NB}}u, p(4u)) + m * p(8u);
    let bb = strided(bi, {{NB}}u, 16u, 16u + 2u * {{NB}}u, p(5u)) + n * p(11u);
    var acc = T(0);
    for (var k = 0u; k < p(2u); k++) {
        acc += T(A[ab + k * p(9u)]) * T(B[bb + k * p(10u)]);
    }
    let o = strided(bi, {{NB}}u, 16u, 16u + 3u * {{NB}}u, p(6u)) + m * p(12u) + n;
    if (p(7u) != 0u) { acc += T(O[o]); }
    if (epilogue_on()) { acc = epilogue(acc, m, n); }
    O[o] = {{S}}({{ROUND}}(acc));
}
