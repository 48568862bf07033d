// W [K, N] (unit column stride) copied to [N, K] for matmul_nt_sg (x @ W on CPU adapters),
// one output vec4 (4 consecutive K) per invocation. Lanes run along N, so their reads of
// a W row are neighbours; no index division (which CPU adapters cannot vectorise).
// Placeholders: {{S}} storage type, {{NB}} batch dims, {{WG}}.
// Parameters: the "matmul_transpose" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> W: array<{{S}}>;
@group(0) @binding(2) var<storage, read_write> O: array<vec4<{{S}}>>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let n = gid.x;
    let q = gid.y;
    if (n >= p(P_N) || q >= p(P_K4)) { return; }
    let ld = p(P_W_RS);
    let src = strided(gid.z, {{NB}}u, P_BATCH, P_W_BS, p(P_W_OFF)) + 4u * q * ld + n;
    let o = strided(gid.z, {{NB}}u, P_BATCH, P_O_BS, 0u) + n * p(P_K4) + q;
    O[o] = vec4<{{S}}>(W[src], W[src + ld], W[src + 2u * ld], W[src + 3u * ld]);
}
