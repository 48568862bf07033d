// Upload boundary: widen host words (as uploaded, little-endian) into the device form of
// a dtype that WGSL cannot store natively: bf16 -> f32, f16 -> f32 (no shader-f16),
// u8 -> u32, i64 -> i32 (the range was checked on the host).
// Placeholders: {{SO}} device storage type, {{UNPACK}} expression in word(k) and i, {{WG}}.
// Parameters: the "unpack" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> W: array<u32>;
@group(0) @binding(2) var<storage, read_write> O: array<{{SO}}>;

fn word(k: u32) -> u32 { return W[p(P_FIRST_WORD) + k]; }

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(P_N)) { return; }
    O[p(P_OUT_OFF) + i] = {{UNPACK}};
}
