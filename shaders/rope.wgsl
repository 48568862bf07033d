// Rotary embedding over x [..., T, D] with cos/sin [T, D/2] (read strided): pairs are
// (2i, 2i+1) when interleaved, else (i, i + D/2) (half-split, as in Llama).
//   out_first = a * cos - b * sin,  out_second = b * cos + a * sin
// Placeholders: {{S}} storage type, {{ROUND}}, {{ND}} dims of x (>= 2), {{INTERLEAVED}}, {{WG}}.
// Parameters: the "rope" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read> Cs: array<{{S}}>;
@group(0) @binding(3) var<storage, read> Sn: array<{{S}}>;
@group(0) @binding(4) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(P_N)) { return; }
    let dd = p(P_D);
    let d = i % dd;
    let t = (i / dd) % p(P_T);
    let off = strided(i, {{ND}}u, P_X_SHAPE, P_X_STRIDES, p(P_X_OFF));
    let ls = p(P_X_STRIDES + {{ND}}u - 1u);
    var pair: u32;
    var first: bool;
    var k: u32;
    if ({{INTERLEAVED}}) {
        first = (d % 2u) == 0u;
        k = d / 2u;
        pair = select(d - 1u, d + 1u, first);
    } else {
        let h = dd / 2u;
        first = d < h;
        k = select(d - h, d, first);
        pair = select(d - h, d + h, first);
    }
    let x = f32(X[off]);
    let y = f32(X[off - d * ls + pair * ls]);
    let c = f32(Cs[p(P_COS_OFF) + t * p(P_COS_TS) + k * p(P_COS_IS)]);
    let s = f32(Sn[p(P_SIN_OFF) + t * p(P_SIN_TS) + k * p(P_SIN_IS)]);
    var r: f32;
    if (first) { r = x * c - y * s; } else { r = x * c + y * s; }
    O[i] = {{S}}({{ROUND}}(r));
}
