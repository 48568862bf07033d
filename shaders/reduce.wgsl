// Reduction over trailing (permuted) dims, per (output element, chunk of the reduced
// range): {{LANES}} invocations fold strided slices, then a workgroup-shared tree
// combines them. Large reductions run in two passes (chunks, then their partials), which
// also keeps every invocation under lavapipe's cap of 65,535 loop iterations.
// Placeholders: {{S}} input storage type, {{SO}} output storage type, {{NK}} kept dims,
// {{NR}} reduced dims, {{COMBINE}} fold of (acc, ai) with (v, vi) -> keeps in acc/ai,
// {{INIT}} the initial accumulator (may read `first`), {{RESULT}} stored value from acc, ai,
// {{ISNAN}} a NaN test of v (`false` for integers), {{WG}}, {{LANES}}.
// The OVERFLOW placeholder: the i64 overflow flag and checked arithmetic (overflow.py), or nothing.
// Parameters: the "reduce" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> X: array<{{S}}>;
@group(0) @binding(2) var<storage, read_write> O: array<{{SO}}>;
{{OVERFLOW}}

var<workgroup> sv: array<T, {{WG}}>;
var<workgroup> si: array<u32, {{WG}}>;

fn is_nan(v: T) -> bool { return {{ISNAN}}; }

fn better_max(v: T, vi: u32, a: T, ai: u32) -> bool {
    if (is_nan(a)) { return is_nan(v) && vi < ai; }
    if (is_nan(v)) { return true; }
    return v > a || (v == a && vi < ai);
}

fn better_min(v: T, vi: u32, a: T, ai: u32) -> bool {
    if (is_nan(a)) { return is_nan(v) && vi < ai; }
    if (is_nan(v)) { return true; }
    return v < a || (v == a && vi < ai);
}

fn fold(acc: ptr<function, T>, ai: ptr<function, u32>, v: T, vi: u32) {
    {{COMBINE}}
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    // {{LANES}} invocations share one (output, chunk) slot; with LANES = 1 (CPU adapters)
    // each invocation owns a slot and no barrier runs.
    let slot = (wid.x + wid.y * nwg.x) * ({{WG}}u / {{LANES}}u) + lid.x / {{LANES}}u;
    let lane = lid.x % {{LANES}}u;
    let valid = slot < p(P_SLOTS);
    let row = min(slot, p(P_SLOTS) - 1u);
    let chunks = p(P_CHUNKS);
    let k0 = (row % chunks) * p(P_CHUNK);
    let k1 = select(k0, min(p(P_K), k0 + p(P_CHUNK)), valid);
    let base = strided(row / chunks, {{NK}}u, P_KEPT_SHAPE, P_KEPT_STRIDES, p(P_X_OFF));
    let first = T(X[strided(k0, {{NR}}u, P_RED_SHAPE, P_RED_STRIDES, base)]);
    var acc: T = {{INIT}};
    var ai: u32 = k0;
    for (var k = k0 + lane; k < k1; k += {{LANES}}u) {
        fold(&acc, &ai, T(X[strided(k, {{NR}}u, P_RED_SHAPE, P_RED_STRIDES, base)]), k);
    }
    if ({{LANES}}u > 1u) {
        sv[lid.x] = acc;
        si[lid.x] = ai;
        workgroupBarrier();
        for (var s = {{LANES}}u / 2u; s > 0u; s = s / 2u) {
            if (lane < s) {
                var a = sv[lid.x];
                var b = si[lid.x];
                fold(&a, &b, sv[lid.x + s], si[lid.x + s]);
                sv[lid.x] = a;
                si[lid.x] = b;
            }
            workgroupBarrier();
        }
        acc = sv[lid.x];
        ai = si[lid.x];
    }
    if (lane == 0u && valid) {
        let acc_final = acc;
        let ai_final = ai;
        O[p(P_OUT_OFF) + row] = {{SO}}({{RESULT}});
    }
}
