// W [K, N] (unit column stride) copied to [N, K] for matmul_nt_sg (x @ W on CPU adapters),
// one output vec4 (4 consecutive K) per invocation. Lanes run along N, so their reads of
// a W row are neighbours; no index division (which CPU adapters cannot vectorise).
// Placeholders: {{S}} storage type, {{NB}} batch dims, {{WG}}.
// P: 0 K/4, 1 N, 2 w offset, 3 w row stride, 16.. batch shape, w batch strides, out
// batch strides (vec4 units)
@group(0) @binding(1) var<storage, read> W: array<{{S}}>;
@group(0) @binding(2) var<storage, read_write> O: array<vec4<{{S}}>>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = gid.x;
    let q = gid.y;
    if (n >= p(1u) || q >= p(0u)) { return; }
    let ld = p(3u);
    let src = strided(gid.z, {{NB}}u, 16u, 16u + {{NB}}u, p(2u)) + 4u * q * ld + n;
    let o = strided(gid.z, {{NB}}u, 16u, 16u + 2u * {{NB}}u, 0u) + n * p(0u) + q;
    O[o] = vec4<{{S}}>(W[src], W[src + ld], W[src + 2u * ld], W[src + 3u * ld]);
}
