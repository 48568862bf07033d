// out[..., j, ...] = X[..., ids[j], ...] along dim {{DIM}}; ids are read strided.
// Out-of-range ids were rejected on the host; the clamp only keeps reads in bounds.
// A source too large for one binding is bound in ranges [lo, hi) of dim {{DIM}}: a dispatch
// writes only the outputs whose id falls in its range (lo = 0, hi = size: all of them).
// Placeholders: {{S}} storage type, {{SI}} id storage type, {{ND}}, {{DIM}}, {{WG}}.
// Parameters: the "index_select" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read> I: array<{{SI}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(P_N)) { return; }
    var rem = i;
    var o = p(P_X_OFF);
    var inside = true;
    for (var k = {{ND}}u; k > 0u; k--) {
        let d = k - 1u;
        let n = p(P_OUT_SHAPE + d);
        var c = rem % n;
        rem = rem / n;
        if (d == {{DIM}}u) {
            let id = min(u32(I[p(P_IDS_OFF) + c * p(P_IDS_STRIDE)]), p(P_SIZE) - 1u);
            inside = id >= p(P_LO) && id < p(P_HI);
            c = id - p(P_LO);   // wraps outside the range, where nothing is read
        }
        o += c * p(P_X_STRIDES + d);
    }
    if (inside) { O[p(P_OUT_OFF) + i] = X[o]; }
}
