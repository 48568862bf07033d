// Strided copy with conversion: O[view_o(i)] = convert(X[view_x(i)]). Serves contiguous(),
// cat and slice assignment (a strided destination), and casts between dtypes.
// Placeholders: {{SX}} / {{SO}} storage types, {{CONVERT}} expression in x (already in
// the source compute type T), {{ND}}, {{WG}}.
// P: 0 n, 3 out offset, 4 x offset, 8.. shape, x strides, out strides
@group(0) @binding(1) var<storage, read> X: array<{{SX}}>;
@group(0) @binding(2) var<storage, read_write> O: array<{{SO}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = first_element(gid, nwg, {{WG}}u, {{EPT}}u);
    for (var e = 0u; e < {{EPT}}u; e++) {
        let i = first + e * {{WG}}u;
        if (i >= p(0u)) { return; }
        let x = T(X[strided(i, {{ND}}u, 8u, 8u + {{ND}}u, p(4u))]);
        O[strided(i, {{ND}}u, 8u, 8u + 2u * {{ND}}u, p(3u))] = {{SO}}({{CONVERT}});
    }
}
