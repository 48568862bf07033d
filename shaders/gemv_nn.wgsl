// Float matrix-vector product for GPUs (the "gpu" kernel set), for the few rows of
// decoding, with B's columns contiguous (x @ W, W [K, N]): O[m, n] = sum over K of
// A[m, k] * B[k, n] for {{MR}} rows of A. A workgroup of {{WGX}} x {{WGY}} invocations
// computes 4 * {{WGX}} output columns: invocation (x, y) reads the vec4 of columns x
// from rows y, y + WGY, ... of B (a row of the workgroup reads one contiguous run), and
// the {{WGY}} partial sums of each column are reduced through workgroup memory, a tree of
// barriers. No subgroup operation: correct for every subgroup size.
// Needs: N, B's offset and row stride multiples of 4 (A is read scalar, any strides).
// Placeholders: {{S}}, {{ROUND4}} (a vec4 rounding), {{NB}}, {{MR}} (at most WGY), {{WGX}},
// {{WGY}} (a power of 2), {{WG}} (WGX * WGY),
// EPILOGUE (epilogue.py; epilogue4 takes a vec4 of columns).
// Parameters: the "gemv_nn" block of core/backends/webgpu/params.py (elements).
@group(0) @binding(1) var<storage, read> A: array<{{S}}>;
@group(0) @binding(2) var<storage, read> B: array<vec4<{{S}}>>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

{{EPILOGUE}}

alias Sums = array<vec4<f32>, {{MR}}>;
var<workgroup> sv: array<Sums, {{WG}}>;  // WGX * WGY

@compute @workgroup_size({{WGX}}, {{WGY}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let x = lid.x;
    let y = lid.y;
    let n4 = p(P_N) / 4u;
    let c4 = (wid.x + wid.y * nwg.x) * {{WGX}}u + x;
    let bi = wid.z;
    let ab = strided(bi, {{NB}}u, P_BATCH, P_A_BS, p(P_A_OFF));
    let bb = strided(bi, {{NB}}u, P_BATCH, P_B_BS, p(P_B_OFF)) / 4u;
    let a_rs = p(P_A_RS);
    let a_cs = p(P_A_CS);
    let b_rs = p(P_B_RS) / 4u;
    var acc: Sums;
    if (c4 < n4) {
        for (var k = y; k < p(P_K); k += {{WGY}}u) {
            let w = vec4<f32>(B[bb + k * b_rs + c4]);
            for (var r = 0u; r < {{MR}}u; r++) { acc[r] += f32(A[ab + r * a_rs + k * a_cs]) * w; }
        }
    }
    let t = y * {{WGX}}u + x;
    sv[t] = acc;
    workgroupBarrier();
    for (var s = {{WGY}}u / 2u; s > 0u; s = s / 2u) {
        if (y < s) {
            for (var r = 0u; r < {{MR}}u; r++) { sv[t][r] += sv[t + s * {{WGX}}u][r]; }
        }
        workgroupBarrier();
    }
    // Row y < MR of the workgroup stores its row's 4 columns c4..
    if (y < {{MR}}u && c4 < n4) {
        let o = strided(bi, {{NB}}u, P_BATCH, P_O_BS, p(P_O_OFF)) + y * p(P_O_RS) + 4u * c4;
        var v = sv[x][y];
        if (p(P_ACC) != 0u) {
            v += vec4<f32>(f32(O[o]), f32(O[o + 1u]), f32(O[o + 2u]), f32(O[o + 3u]));
        }
        v = {{ROUND4}}(v);
        if (epilogue_on()) { v = {{ROUND4}}(epilogue4(v, y, 4u * c4)); }
        for (var j = 0u; j < 4u; j++) { O[o + j] = {{S}}(v[j]); }
    }
}
