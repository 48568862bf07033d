// torch.gather: out[idx] = X[idx with idx[dim] = ids[idx]], over the ids' shape.
// A source too large for one binding is bound in ranges [lo, hi) of dim {{DIM}}: a dispatch
// writes only the outputs whose id falls in its range (lo = 0, hi = size: all of them).
// Placeholders: {{S}}, {{SI}}, {{ND}}, {{DIM}}, {{WG}}.
// Parameters: the "gather" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read> I: array<{{SI}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(P_N)) { return; }
    let id = min(u32(I[strided(i, {{ND}}u, P_IDS_SHAPE, P_IDS_STRIDES, p(P_IDS_OFF))]), p(P_SIZE) - 1u);
    if (id < p(P_LO) || id >= p(P_HI)) { return; }
    var rem = i;
    var o = p(P_X_OFF);
    for (var k = {{ND}}u; k > 0u; k--) {
        let d = k - 1u;
        let n = p(P_IDS_SHAPE + d);
        var c = rem % n;
        rem = rem / n;
        if (d == {{DIM}}u) { c = id - p(P_LO); }
        o += c * p(P_X_STRIDES + d);
    }
    O[p(P_OUT_OFF) + i] = X[o];
}
