// Strided elementwise unary op: O[i] = OP(X[view(i)]), generated from core/ops.py's table.
// Placeholders: {{S}} storage type, {{OP}} expression in x, p0, p1, {{PARAM}} reader of
// the scalar parameters (pf/pi/p), {{ROUND}} rounding of the stored value, {{ND}} dims, {{WG}}.
// P: 0 n, 1 p0, 2 p1, 3 out offset, 4 x offset, 8.. shape[ND], x strides[ND]
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = first_element(gid, nwg, {{WG}}u, {{EPT}}u);
    for (var e = 0u; e < {{EPT}}u; e++) {
        let i = first + e * {{WG}}u;
        if (i >= p(0u)) { return; }
        let x = T(X[strided(i, {{ND}}u, 8u, 8u + {{ND}}u, p(4u))]);
        let p0 = T({{PARAM}}(1u));
        let p1 = T({{PARAM}}(2u));
        O[p(3u) + i] = {{S}}({{ROUND}}({{OP}}));
    }
}
