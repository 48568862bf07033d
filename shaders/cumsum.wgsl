// Inclusive prefix sum along one dim, in chunks of at most P[6] elements so that no
// invocation loops past lavapipe's cap of 65,535 iterations and long rows run in parallel:
//   mode 0: each invocation scans one (row, chunk) on its own;
//   mode 1: each invocation adds its chunk's carry (the inclusive scan of the totals of
//           the chunks before it, in Cr [rows, chunks - 1]) to the chunk, in place.
// Placeholders: {{S}} storage type, {{ROUND}}, {{NK}} kept dims, {{WG}}.
// P: 0 rows x chunks, 1 length, 2 x offset, 3 mode, 4 x stride of dim, 5 out stride of dim,
// 6 chunk length, 7 chunks per row, 8.. kept shape, kept x strides, kept out strides
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read> Cr: array<{{S}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let slot = flat_index(gid, nwg, {{WG}}u);
    if (slot >= p(0u)) { return; }
    let chunks = p(7u);
    let row = slot / chunks;
    let c = slot % chunks;
    let j0 = c * p(6u);
    let j1 = min(p(1u), j0 + p(6u));
    let ob = strided(row, {{NK}}u, 8u, 8u + 2u * {{NK}}u, 0u);
    let os = p(5u);
    if (p(3u) == 0u) {
        let xb = strided(row, {{NK}}u, 8u, 8u + {{NK}}u, p(2u));
        var acc = T(0);
        for (var j = j0; j < j1; j++) {
            acc = acc + T(X[xb + j * p(4u)]);
            O[ob + j * os] = {{S}}({{ROUND}}(acc));
        }
    } else if (c > 0u) {
        let carry = T(Cr[row * (chunks - 1u) + c - 1u]);
        for (var j = j0; j < j1; j++) {
            O[ob + j * os] = {{S}}({{ROUND}}(T(O[ob + j * os]) + carry));
        }
    }
}
