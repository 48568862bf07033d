// O[offset + i] = value, for full(), zeros() and ones().
// Placeholders: {{S}} storage type, {{PARAM}} reader of the value (pf/pi/p), {{WG}}.
// Parameters: the "fill" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let first = first_element(gid, nwg, {{WG}}u, {{EPT}}u);
    for (var e = 0u; e < {{EPT}}u; e++) {
        let i = first + e * {{WG}}u;
        if (i >= p(P_N)) { return; }
        O[p(P_OUT_OFF) + i] = {{S}}({{PARAM}}(P_VALUE));
    }
}
