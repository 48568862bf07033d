// Inclusive prefix sum along one dim, in chunks of at most P_CHUNK elements so that no
// invocation loops past lavapipe's cap of 65,535 iterations and long rows run in parallel:
//   mode 0: each invocation scans one (row, chunk) on its own;
//   mode 1: each invocation adds its chunk's carry (the inclusive scan of the totals of
//           the chunks before it, in Cr [rows, chunks - 1]) to the chunk, in place.
// Placeholders: {{S}} storage type, {{ROUND}}, {{NK}} kept dims, {{WG}}, ADD: a + b (or
// its checked form), OVERFLOW: the i64 overflow flag and checked arithmetic
// (overflow.py), or nothing.
// Parameters: the "cumsum" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read> Cr: array<{{S}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;
{{OVERFLOW}}

fn add_t(a: T, b: T) -> T { return {{ADD}}; }

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let slot = flat_index(gid, nwg, {{WG}}u);
    if (slot >= p(P_SLOTS)) { return; }
    let chunks = p(P_CHUNKS);
    let row = slot / chunks;
    let c = slot % chunks;
    let j0 = c * p(P_CHUNK);
    let j1 = min(p(P_N), j0 + p(P_CHUNK));
    let ob = strided(row, {{NK}}u, P_KEPT_SHAPE, P_KEPT_OUT_STRIDES, 0u);
    let os = p(P_OUT_STRIDE);
    if (p(P_MODE) == 0u) {
        let xb = strided(row, {{NK}}u, P_KEPT_SHAPE, P_KEPT_X_STRIDES, p(P_X_OFF));
        var acc = T(0);
        for (var j = j0; j < j1; j++) {
            acc = add_t(acc, T(X[xb + j * p(P_X_STRIDE)]));
            O[ob + j * os] = {{S}}({{ROUND}}(acc));
        }
    } else if (c > 0u) {
        let carry = T(Cr[row * (chunks - 1u) + c - 1u]);
        for (var j = j0; j < j1; j++) {
            O[ob + j * os] = {{S}}({{ROUND}}(add_t(T(O[ob + j * os]), carry)));
        }
    }
}
