// O[i] = cond[i] != 0 ? A[i] : B[i], all three read strided (broadcast to the output).
// Placeholders: {{S}} value storage type, {{SC}} condition storage type, {{ND}}, {{WG}}.
// Parameters: the "where" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> C: array<{{SC}}>;
@group(0) @binding(2) var<storage, read> A: array<{{S}}>;
@group(0) @binding(3) var<storage, read> B: array<{{S}}>;
@group(0) @binding(4) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = first_element(gid, nwg, {{WG}}u, {{EPT}}u);
    for (var e = 0u; e < {{EPT}}u; e++) {
        let i = first + e * {{WG}}u;
        if (i >= p(P_N)) { return; }
        let c = C[strided(i, {{ND}}u, P_SHAPE, P_C_STRIDES, p(P_C_OFF))];
        let a = A[strided(i, {{ND}}u, P_SHAPE, P_A_STRIDES, p(P_A_OFF))];
        let b = B[strided(i, {{ND}}u, P_SHAPE, P_B_STRIDES, p(P_B_OFF))];
        O[p(P_OUT_OFF) + i] = select(b, a, c != {{SC}}(0));
    }
}
