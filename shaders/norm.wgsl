// Fused layer_norm / rms_norm over the last dim (of x + residual where flag 8 is set:
// the residual shares x's strides): mean and variance by two passes (centred, for
// accuracy), then the scaled write. {{LANES}} invocations share a row through
// a workgroup tree; with LANES = 1 (CPU adapters) an invocation owns a row, no barriers.
// Placeholders: {{S}} storage type, {{ROUND}}, {{NK}} kept dims, {{WG}}, {{LANES}}.
// Parameters: the "norm" block of core/backends/webgpu/params.py.
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
    let o = j * p(P_X_STRIDE);
    if (res) { return f32(X[xb + o]) + f32(R[rb + o]); }
    return f32(X[xb + o]);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = (wid.x + wid.y * nwg.x) * ({{WG}}u / {{LANES}}u) + lid.x / {{LANES}}u;
    let lane = lid.x % {{LANES}}u;
    let valid = row < p(P_ROWS);
    let n = select(0u, p(P_N), valid);
    let nf = f32(p(P_N));
    let r = min(row, max(p(P_ROWS), 1u) - 1u);
    let xb = strided(r, {{NK}}u, P_KEPT_SHAPE, P_KEPT_X_STRIDES, p(P_X_OFF));
    // The residual's rows lie where x's do, from its own offset.
    let rb = xb - p(P_X_OFF) + p(P_RES_OFF);
    let flags = p(P_FLAGS);
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
    let inv = inverseSqrt(tree_sum(lid.x, lane, q) / nf + pf(P_EPS));
    for (var j = lane; j < n; j += {{LANES}}u) {
        var y = (load(xb, rb, j, res) - mean) * inv;
        if ((flags & 1u) != 0u) { y = y * f32(Wt[p(P_W_OFF) + j * p(P_W_STRIDE)]); }
        if ((flags & 2u) != 0u) { y = y + f32(Bs[p(P_B_OFF) + j * p(P_B_STRIDE)]); }
        O[p(P_OUT_OFF) + r * p(P_N) + j] = {{S}}({{ROUND}}(y));
    }
}
