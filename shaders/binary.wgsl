// Strided elementwise binary op or comparison over operands broadcast to the output shape.
// Placeholders: {{S}} operand storage type, {{SO}} output storage type, {{RESULT}} the
// stored expression in a, b (the op from core/ops.py, rounded or turned into 0/1),
// {{LOAD_B}} how b is read (a tensor element, or a scalar from P_B), {{ND}}, {{WG}}.
// The OVERFLOW placeholder: the i64 overflow flag and checked arithmetic (overflow.py), or nothing.
// Parameters: the "binary" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> A: array<{{S}}>;
@group(0) @binding(2) var<storage, read> B: array<{{S}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{SO}}>;
{{OVERFLOW}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = first_element(gid, nwg, {{WG}}u, {{EPT}}u);
    for (var e = 0u; e < {{EPT}}u; e++) {
        let i = first + e * {{WG}}u;
        if (i >= p(P_N)) { return; }
        let a = T(A[strided(i, {{ND}}u, P_SHAPE, P_A_STRIDES, p(P_A_OFF))]);
        let b = {{LOAD_B}};
        O[p(P_OUT_OFF) + i] = {{SO}}({{RESULT}});
    }
}
