// Numerically stable softmax / log_softmax along one dim: one workgroup per row, three
// strided passes (max, sum of exp, write) with workgroup-shared trees.
// Placeholders: {{S}} storage type, {{ROUND}}, {{NK}} kept dims, {{WG}}.
// P: 0 rows, 1 length, 2 x offset, 3 log flag, 4 x stride of dim, 5 out stride of dim,
// 8.. kept shape, kept x strides, kept out strides
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read_write> O: array<{{S}}>;

var<workgroup> sv: array<f32, {{WG}}>;

fn tree(lid: u32, v: f32, is_max: bool) -> f32 {
    sv[lid] = v;
    workgroupBarrier();
    for (var s = {{WG}}u / 2u; s > 0u; s = s / 2u) {
        if (lid < s) {
            if (is_max) { sv[lid] = max(sv[lid], sv[lid + s]); } else { sv[lid] = sv[lid] + sv[lid + s]; }
        }
        workgroupBarrier();
    }
    let r = sv[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p(0u)) { return; }
    let n = p(1u);
    let xb = strided(row, {{NK}}u, 8u, 8u + {{NK}}u, p(2u));
    let ob = strided(row, {{NK}}u, 8u, 8u + 2u * {{NK}}u, 0u);
    let xs = p(4u);
    let os = p(5u);
    // -FLT_MAX by its bits: Chromium's Tint rejects the decimal literal as out of f32 range.
    var m = bitcast<f32>(0xff7fffffu);
    for (var j = lid.x; j < n; j += {{WG}}u) { m = max(m, f32(X[xb + j * xs])); }
    m = tree(lid.x, m, true);
    var s = 0.0;
    for (var j = lid.x; j < n; j += {{WG}}u) { s += exp(f32(X[xb + j * xs]) - m); }
    s = tree(lid.x, s, false);
    let log_s = log(s);
    let inv_s = 1.0 / s;
    let as_log = p(3u) != 0u;
    for (var j = lid.x; j < n; j += {{WG}}u) {
        let d = f32(X[xb + j * xs]) - m;
        var y = exp(d) * inv_s;
        if (as_log) { y = d - log_s; }
        O[ob + j * os] = {{S}}({{ROUND}}(y));
    }
}
