// Float matrix-vector product for GPUs (the "gpu" kernel set), for the few rows of
// decoding: O[m, n] = sum over K of A[m, k] * B[k, n] for {{MR}} rows of A, with B read
// transposed (x @ W.T of a Linear layer: W [N, K], K contiguous). One workgroup of {{WG}}
// invocations computes {{NC}} output columns for all {{MR}} rows: its invocations stride
// over K in vec4 runs (neighbours read neighbouring runs), then reduce their partial sums
// through workgroup memory, a tree of barriers. No subgroup operation: correct for every
// subgroup size.
// Needs: K, A's and B's offsets and strides along the rows multiples of 4; A unit K-stride.
// Placeholders: {{S}}, {{ROUND}}, {{NB}}, {{MR}}, {{NC}}, {{MC}} (MR * NC), {{WG}} (a power of 2),
// EPILOGUE (epilogue.py).
// Parameters: the "gemv_nt" block of core/backends/webgpu/params.py (elements).
@group(0) @binding(1) var<storage, read> A: array<vec4<{{S}}>>;
@group(0) @binding(2) var<storage, read> B: array<vec4<{{S}}>>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

{{EPILOGUE}}

alias Sums = array<f32, {{MC}}>;  // MR * NC
var<workgroup> sv: array<Sums, {{WG}}>;

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = lid.x;
    let n_total = p(P_N);
    let n0 = (wid.x + wid.y * nwg.x) * {{NC}}u;
    let bi = wid.z;
    let ab = strided(bi, {{NB}}u, P_BATCH, P_A_BS, p(P_A_OFF)) / 4u;
    let bb = strided(bi, {{NB}}u, P_BATCH, P_B_BS, p(P_B_OFF)) / 4u;
    let a_rs = p(P_A_RS) / 4u;
    let b_cs = p(P_B_CS) / 4u;
    var brow: array<u32, {{NC}}>;
    for (var c = 0u; c < {{NC}}u; c++) { brow[c] = bb + min(n0 + c, n_total - 1u) * b_cs; }
    var acc: Sums;
    let k4 = p(P_K) / 4u;
    for (var k = t; k < k4; k += {{WG}}u) {
        var w: array<vec4<f32>, {{NC}}>;
        for (var c = 0u; c < {{NC}}u; c++) { w[c] = vec4<f32>(B[brow[c] + k]); }
        for (var r = 0u; r < {{MR}}u; r++) {
            let a = vec4<f32>(A[ab + r * a_rs + k]);
            for (var c = 0u; c < {{NC}}u; c++) { acc[r * {{NC}}u + c] += dot(a, w[c]); }
        }
    }
    sv[t] = acc;
    workgroupBarrier();
    for (var s = {{WG}}u / 2u; s > 0u; s = s / 2u) {
        if (t < s) {
            for (var q = 0u; q < {{MC}}u; q++) { sv[t][q] += sv[t + s][q]; }
        }
        workgroupBarrier();
    }
    // Invocation q < MR * NC stores output q of the workgroup's block.
    let r = t / {{NC}}u;
    let col = n0 + t % {{NC}}u;
    if (t < {{MC}}u && col < n_total) {
        let o = strided(bi, {{NB}}u, P_BATCH, P_O_BS, p(P_O_OFF)) + r * p(P_O_RS) + col;
        var v = sv[0][t];
        if (p(P_ACC) != 0u) { v += f32(O[o]); }
        v = {{ROUND}}(v);
        if (epilogue_on()) { v = {{ROUND}}(epilogue(v, r, col)); }
        O[o] = {{S}}(v);
    }
}
