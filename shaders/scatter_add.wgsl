// out = dst with src added at ids along dim {{DIM}}. Without float atomics, each output
// element gathers its contributions: it scans the ids along dim at its other coordinates
// (deterministic, no races).
// Placeholders: {{S}}, {{SI}}, {{ROUND}}, {{ND}}, {{DIM}}, {{WG}}.
// P: 0 n (dst elements), 1 ids length along dim, 2 ids offset, 3 src offset, 4 dst offset,
// 8.. dst shape, dst strides, ids shape, ids strides, src strides
@group(0) @binding(1) var<storage, read> D: array<{{S}}>;
@group(0) @binding(2) var<storage, read> I: array<{{SI}}>;
@group(0) @binding(3) var<storage, read> Src: array<{{S}}>;
@group(0) @binding(4) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(0u)) { return; }
    let nd = {{ND}}u;
    var acc = T(D[strided(i, nd, 8u, 8u + nd, p(4u))]);
    // Coordinates of i; the ids/src base skips dim, and bails out where the ids tensor
    // is smaller than dst along another dim.
    var rem = i;
    var ib = p(2u);
    var sb = p(3u);
    var wanted = 0u;
    var inside = true;
    for (var k = nd; k > 0u; k--) {
        let d = k - 1u;
        let n = p(8u + d);
        let c = rem % n;
        rem = rem / n;
        if (d == {{DIM}}u) { wanted = c; }
        else {
            if (c >= p(8u + 2u * nd + d)) { inside = false; }
            ib += c * p(8u + 3u * nd + d);
            sb += c * p(8u + 4u * nd + d);
        }
    }
    if (inside) {
        let is = p(8u + 3u * nd + {{DIM}}u);
        let ss = p(8u + 4u * nd + {{DIM}}u);
        for (var j = 0u; j < p(1u); j++) {
            if (u32(I[ib + j * is]) == wanted) { acc += T(Src[sb + j * ss]); }
        }
    }
    O[i] = {{S}}({{ROUND}}(acc));
}
