// Fused layer_norm / rms_norm over the last dim (of x + residual where flag 8 is set:
// the residual shares x's strides): mean and variance by two passes (centred, for
// accuracy), then the scaled write. {{LANES}} invocations share a row through
// a workgroup tree; with LANES = 1 (CPU adapters) an invocation owns a row, no barriers.
// Placeholders: {{S}} storage type, {{ROUND}}, {{NK}} kept dims, {{WG}}, {{LANES}}.
// P: 0 rows, 1 length, 2 x offset, 3 eps (f32), 4 x stride of the last dim, 5 flags
// (1 weight, 2 bias, 4 rms, 8 residual), 6 w offset, 7 b offset, 8 w stride, 9 b stride,
// 10 out offset, 11 residual offset, 12.. kept shape, kept x strides
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read> Wt: array<{{S}}>;
@group(0) @binding(3) var<storage, read> Bs: array<{{S}}>;
@group(0) @binding(4) var<storage, read_write> O: array<{{S}}>;
@group(0) @binding(5) var<storage, read> R: array<{{S}}>;

var<workgroup> sv: array<f32, {{WG}}>;

fn tree_sum(lid: u32, lane: u32, v: f32) -> f32 {
    if ({{LANES}}u == 1u) { return v; }
    sv[lid] = v;
    workgroupBarrier();
    for (var s = {{LANES}}u / 2u; s > 0u; s = s / 2u) {
        if (lane < s) { sv[lid] = sv[lid] + sv[lid + s]; }
        workgroupBarrier();
    }
    let r = sv[lid - lane];
    workgroupBarrier();
    return r;
}

// Element j of the row at x offset xb (residual offset rb), residual added when flagged.
fn load(xb: u32, rb: u32, j: u32, res: bool) -> f32 {
    let o = j * p(4u);
    if (res) { return f32(X[xb + o]) + f32(R[rb + o]); }
    return f32(X[xb + o]);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = (wid.x + wid.y * nwg.x) * ({{WG}}u / {{LANES}}u) + lid.x / {{LANES}}u;
    let lane = lid.x % {{LANES}}u;
    let valid = row < p(0u);
    let n = select(0u, p(1u), valid);
    let nf = f32(p(1u));
    let r = min(row, max(p(0u), 1u) - 1u);
    let xb = strided(r, {{NK}}u, 12u, 12u + {{NK}}u, p(2u));
    // The residual's rows lie where x's do, from its own offset.
    let rb = xb - p(2u) + p(11u);
    let flags = p(5u);
    let rms = (flags & 4u) != 0u;
    let res = (flags & 8u) != 0u;
    var mean = 0.0;
    if (!rms) {
        var s = 0.0;
        for (var j = lane; j < n; j += {{LANES}}u) { s += load(xb, rb, j, res); }
        mean = tree_sum(lid.x, lane, s) / nf;
    }
    var q = 0.0;
    for (var j = lane; j < n; j += {{LANES}}u) {
        let d = load(xb, rb, j, res) - mean;
        q += d * d;
    }
    let inv = inverseSqrt(tree_sum(lid.x, lane, q) / nf + pf(3u));
    for (var j = lane; j < n; j += {{LANES}}u) {
        var y = (load(xb, rb, j, res) - mean) * inv;
        if ((flags & 1u) != 0u) { y = y * f32(Wt[p(6u) + j * p(8u)]); }
        if ((flags & 2u) != 0u) { y = y + f32(Bs[p(7u) + j * p(9u)]); }
        O[p(10u) + r * p(1u) + j] = {{S}}({{ROUND}}(y));
    }
}
