// Inclusive prefix sum along one dim: one invocation per row (the scan is sequential
// within a row; rows run in parallel).
// Placeholders: {{S}} storage type, {{ROUND}}, {{NK}} kept dims, {{WG}}.
// P: 0 rows, 1 length, 2 x offset, 4 x stride of dim, 5 out stride of dim,
// 8.. kept shape, kept x strides, kept out strides
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = flat_index(gid, nwg, {{WG}}u);
    if (row >= p(0u)) { return; }
    let xb = strided(row, {{NK}}u, 8u, 8u + {{NK}}u, p(2u));
    let ob = strided(row, {{NK}}u, 8u, 8u + 2u * {{NK}}u, 0u);
    var acc = T(0);
    for (var j = 0u; j < p(1u); j++) {
        acc = acc + T(X[xb + j * p(4u)]);
        O[ob + j * p(5u)] = {{S}}({{ROUND}}(acc));
    }
}
