// Strided elementwise unary op: O[i] = OP(X[view(i)]), generated from core/ops.py's table.
// Placeholders: {{S}} storage type, {{OP}} expression in x, p0, p1, {{PARAM}} reader of
// the scalar parameters (pf/pi/p), {{ROUND}} rounding of the stored value, {{ND}} dims, {{WG}}.
// The OVERFLOW placeholder: the i64 overflow flag and checked arithmetic (overflow.py), or nothing.
// Parameters: the "unary" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read_write> O: array<{{S}}>;
{{OVERFLOW}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = first_element(gid, nwg, {{WG}}u, {{EPT}}u);
    for (var e = 0u; e < {{EPT}}u; e++) {
        let i = first + e * {{WG}}u;
        if (i >= p(P_N)) { return; }
        let x = T(X[strided(i, {{ND}}u, P_SHAPE, P_X_STRIDES, p(P_X_OFF))]);
        let p0 = T({{PARAM}}(P_P0));
        let p1 = T({{PARAM}}(P_P1));
        O[p(P_OUT_OFF) + i] = {{S}}({{ROUND}}({{OP}}));
    }
}
