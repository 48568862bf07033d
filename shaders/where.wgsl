// O[i] = cond[i] != 0 ? A[i] : B[i], all three read strided (broadcast to the output).
// Placeholders: {{S}} value storage type, {{SC}} condition storage type, {{ND}}, {{WG}}.
// P: 0 n, 3 out offset, 4 cond offset, 5 a offset, 6 b offset, 8.. shape, c, a, b strides
@group(0) @binding(1) var<storage, read> C: array<{{SC}}>;
@group(0) @binding(2) var<storage, read> A: array<{{S}}>;
@group(0) @binding(3) var<storage, read> B: array<{{S}}>;
@group(0) @binding(4) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = first_element(gid, nwg, {{WG}}u, {{EPT}}u);
    for (var e = 0u; e < {{EPT}}u; e++) {
        let i = first + e * {{WG}}u;
        if (i >= p(0u)) { return; }
        let c = C[strided(i, {{ND}}u, 8u, 8u + {{ND}}u, p(4u))];
        let a = A[strided(i, {{ND}}u, 8u, 8u + 2u * {{ND}}u, p(5u))];
        let b = B[strided(i, {{ND}}u, 8u, 8u + 3u * {{ND}}u, p(6u))];
        O[p(3u) + i] = select(b, a, c != {{SC}}(0));
    }
}
