// out = dst with src added at ids along dim {{DIM}}. Without float atomics, each output
// element gathers its contributions: it scans the ids along dim at its other coordinates
// (deterministic, no races).
// Placeholders: {{S}}, {{SI}}, {{ROUND}}, {{ND}}, {{DIM}}, {{WG}}.
// Parameters: the "scatter_add" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> D: array<{{S}}>;
@group(0) @binding(2) var<storage, read> I: array<{{SI}}>;
@group(0) @binding(3) var<storage, read> Src: array<{{S}}>;
@group(0) @binding(4) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(P_N)) { return; }
    let nd = {{ND}}u;
    var acc = T(D[strided(i, nd, P_DST_SHAPE, P_DST_STRIDES, p(P_DST_OFF))]);
    // Coordinates of i; the ids/src base skips dim, and bails out where the ids tensor
    // is smaller than dst along another dim.
    var rem = i;
    var ib = p(P_IDS_OFF);
    var sb = p(P_SRC_OFF);
    var wanted = 0u;
    var inside = true;
    for (var k = nd; k > 0u; k--) {
        let d = k - 1u;
        let n = p(P_DST_SHAPE + d);
        let c = rem % n;
        rem = rem / n;
        if (d == {{DIM}}u) { wanted = c; }
        else {
            if (c >= p(P_IDS_SHAPE + d)) { inside = false; }
            ib += c * p(P_IDS_STRIDES + d);
            sb += c * p(P_SRC_STRIDES + d);
        }
    }
    if (inside) {
        let is = p(P_IDS_STRIDES + {{DIM}}u);
        let ss = p(P_SRC_STRIDES + {{DIM}}u);
        for (var j = 0u; j < p(P_IDS_LEN); j++) {
            if (u32(I[ib + j * is]) == wanted) { acc += T(Src[sb + j * ss]); }
        }
    }
    O[i] = {{S}}({{ROUND}}(acc));
}
