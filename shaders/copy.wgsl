// Strided copy with conversion: O[view_o(i)] = convert(X[view_x(i)]). Serves contiguous(),
// cat and slice assignment (a strided destination), and casts between dtypes.
// Placeholders: {{SX}} / {{SO}} storage types, {{CONVERT}} expression in x (already in
// the source compute type T), {{ND}}, {{WG}}.
// Parameters: the "copy" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<{{SX}}>;
@group(0) @binding(2) var<storage, read_write> O: array<{{SO}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = first_element(gid, nwg, {{WG}}u, {{EPT}}u);
    for (var e = 0u; e < {{EPT}}u; e++) {
        let i = first + e * {{WG}}u;
        if (i >= p(P_N)) { return; }
        let x = T(X[strided(i, {{ND}}u, P_SHAPE, P_X_STRIDES, p(P_X_OFF))]);
        O[strided(i, {{ND}}u, P_SHAPE, P_OUT_STRIDES, p(P_OUT_OFF))] = {{SO}}({{CONVERT}});
    }
}
