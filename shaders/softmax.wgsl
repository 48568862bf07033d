// Numerically stable softmax / log_softmax along one dim, three strided passes (max, sum
// of exp, write). {{LANES}} invocations share a row and combine through a workgroup tree;
// with LANES = 1 (CPU adapters) each invocation owns a row and no barrier runs, since
// barriers cost more than they save there.
// Placeholders: {{S}} storage type, {{ROUND}}, {{NK}} kept dims, {{WG}}, {{LANES}}.
// Parameters: the "softmax" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read_write> O: array<{{S}}>;

var<workgroup> sv: array<f32, {{WG}}>;

fn tree(lid: u32, lane: u32, v: f32, is_max: bool) -> f32 {
    if ({{LANES}}u == 1u) { return v; }
    sv[lid] = v;
    workgroupBarrier();
    for (var s = {{LANES}}u / 2u; s > 0u; s = s / 2u) {
        if (lane < s) {
            if (is_max) {
                sv[lid] = max(sv[lid], sv[lid + s]);
            } else {
                sv[lid] = sv[lid] + sv[lid + s];
            }
        }
        workgroupBarrier();
    }
    let r = sv[lid - lane];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = (wid.x + wid.y * nwg.x) * ({{WG}}u / {{LANES}}u) + lid.x / {{LANES}}u;
    let lane = lid.x % {{LANES}}u;
    let valid = row < p(P_ROWS);
    // Invalid rows still reach every barrier (uniform control flow); they just do no work.
    let n = select(0u, p(P_N), valid);
    let r = min(row, max(p(P_ROWS), 1u) - 1u);
    let xb = strided(r, {{NK}}u, P_KEPT_SHAPE, P_KEPT_X_STRIDES, p(P_X_OFF));
    let ob = strided(r, {{NK}}u, P_KEPT_SHAPE, P_KEPT_OUT_STRIDES, p(P_OUT_OFF));
    let xs = p(P_X_STRIDE);
    let os = p(P_OUT_STRIDE);
    var m = bitcast<f32>(0xff7fffffu);   // -FLT_MAX; Tint rejects -3.4028235e38
    for (var j = lane; j < n; j += {{LANES}}u) { m = max(m, f32(X[xb + j * xs])); }
    m = tree(lid.x, lane, m, true);
    var s = 0.0;
    for (var j = lane; j < n; j += {{LANES}}u) { s += exp(f32(X[xb + j * xs]) - m); }
    s = tree(lid.x, lane, s, false);
    let log_s = log(s);
    let inv_s = 1.0 / s;
    let as_log = p(P_LOG) != 0u;
    for (var j = lane; j < n; j += {{LANES}}u) {
        let d = f32(X[xb + j * xs]) - m;
        var y = exp(d) * inv_s;
        if (as_log) { y = d - log_s; }
        O[ob + j * os] = {{S}}({{ROUND}}(y));
    }
}
