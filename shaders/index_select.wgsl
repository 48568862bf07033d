// out[..., j, ...] = X[..., ids[j], ...] along dim {{DIM}}; ids are read strided.
// Out-of-range ids were rejected on the host; the clamp only keeps reads in bounds.
// A source too large for one binding is bound in ranges [lo, hi) of dim {{DIM}}: a dispatch
// writes only the outputs whose id falls in its range (lo = 0, hi = size: all of them).
// Placeholders: {{S}} storage type, {{SI}} id storage type, {{ND}}, {{DIM}}, {{WG}}.
// P: 0 n, 1 size of dim in X, 2 ids offset, 3 ids stride, 4 x offset (of row lo), 5 lo,
// 6 hi, 7 out offset, 8.. out shape, x strides
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read> I: array<{{SI}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(0u)) { return; }
    var rem = i;
    var o = p(4u);
    var inside = true;
    for (var k = {{ND}}u; k > 0u; k--) {
        let d = k - 1u;
        let n = p(8u + d);
        var c = rem % n;
        rem = rem / n;
        if (d == {{DIM}}u) {
            let id = min(u32(I[p(2u) + c * p(3u)]), p(1u) - 1u);
            inside = id >= p(5u) && id < p(6u);
            c = id - p(5u);   // wraps outside the range, where nothing is read
        }
        o += c * p(8u + {{ND}}u + d);
    }
    if (inside) { O[p(7u) + i] = X[o]; }
}
