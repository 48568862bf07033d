// Readback boundary: narrow a contiguous device array into host words: f32 -> bf16 pairs,
// f32 -> f16 pairs (no shader-f16), u32 -> u8 quads, i32 -> i64 (two words, sign-extended).
// Placeholders: {{SX}} device storage type, {{PACK}} expression in x(k) for word j, {{WG}}.
// Parameters: the "pack" block of core/backends/webgpu/params.py. A tensor larger than one
// binding is packed in ranges of whole words, one dispatch each.
@group(0) @binding(1) var<storage, read> X: array<{{SX}}>;
@group(0) @binding(2) var<storage, read_write> W: array<u32>;

fn x(k: u32) -> {{SX}} {
    if (k >= p(P_N)) { return {{SX}}(0); }
    return X[p(P_X_OFF) + k];
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = flat_index(gid, nwg, {{WG}}u);
    if (j >= p(P_WORDS)) { return; }
    W[p(P_OUT_OFF) + j] = {{PACK}};
}
