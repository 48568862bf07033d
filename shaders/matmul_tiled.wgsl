// Float matmul for GPUs (the "gpu" kernel set): a workgroup computes a BM x BN block of
// the output, BM = {{TM}} * {{WGY}} and BN = {{TN}} * {{WGX}}. Per step of {{BK}} along K,
// the workgroup stages A's BM x BK and B's BK x BN tiles into workgroup memory together
// (each invocation loads a few elements, neighbours load neighbours), and each invocation
// accumulates a {{TM}} x {{TN}} register tile from them: rows ty + i * WGY, columns
// tx + j * WGX, so reads of B's tile hit consecutive words and A's are broadcasts, and
// stores are coalesced. No subgroup operation: correct for every subgroup size.
// Operands load along the axis they are contiguous in, 4 elements at a time where the
// layout allows ({{AW}}, {{BW}}: 4 reads vec4 bindings, 1 scalar ones; any strides).
// Needs, where a width is 4: the operand's offset, strides other than the unit one, and
// its extent along the loaded axis multiples of 4.
// Placeholders: {{S}} storage type (f32 or f16; math in f32), {{ROUND}}, {{NB}},
// {{A_T}}/{{B_T}} element type of A's/B's binding, {{LOAD_A}}/{{LOAD_B}} (an expression
// in element index i giving vec4<f32>: 4 elements from i along the loaded axis, or one
// in .x), {{A_ALONG_K}}/{{B_ALONG_K}} (true: the operand is loaded along K, else along M or
// N), {{BM}}, {{BN}} and {{AS_LEN}}, {{BS_LEN}} (BM * BK, BN * BK), EPILOGUE (epilogue.py).
// Parameters: the "matmul_tiled" block of core/backends/webgpu/params.py (elements).
@group(0) @binding(1) var<storage, read> A: array<{{A_T}}>;
@group(0) @binding(2) var<storage, read> B: array<{{B_T}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

{{EPILOGUE}}

const BM = {{BM}}u;
const BN = {{BN}}u;
const BK = {{BK}}u;
const NT = {{WGX}}u * {{WGY}}u;

var<workgroup> As: array<f32, {{AS_LEN}}>;  // [k][m], BM * BK
var<workgroup> Bs: array<f32, {{BS_LEN}}>;  // [k][n], BN * BK

fn load_a(i: u32) -> vec4<f32> { return {{LOAD_A}}; }
fn load_b(i: u32) -> vec4<f32> { return {{LOAD_B}}; }

// A's rows m0.. and columns k0.. into As. Rows past M repeat the last (their sums are
// never stored); columns past K are zeros.
fn stage_a(tid: u32, ab: u32, m0: u32, k0: u32) {
    let m_total = p(P_M);
    let k_total = p(P_K);
    if ({{A_ALONG_K}}) {
        let per = BK / {{AW}}u;
        for (var e = tid; e < BM * per; e += NT) {
            let r = e / per;
            let kk = (e % per) * {{AW}}u;
            var v = vec4<f32>(0.0);
            if (k0 + kk < k_total) {
                v = load_a(ab + min(m0 + r, m_total - 1u) * p(P_A_RS) + (k0 + kk) * p(P_A_CS));
            }
            for (var j = 0u; j < {{AW}}u; j++) { As[(kk + j) * BM + r] = v[j]; }
        }
    } else {
        let per = BM / {{AW}}u;
        for (var e = tid; e < BK * per; e += NT) {
            let kk = e / per;
            let r = (e % per) * {{AW}}u;
            var v = vec4<f32>(0.0);
            if (k0 + kk < k_total && m0 + r < m_total) {
                v = load_a(ab + (m0 + r) * p(P_A_RS) + (k0 + kk) * p(P_A_CS));
            }
            for (var j = 0u; j < {{AW}}u; j++) { As[kk * BM + r + j] = v[j]; }
        }
    }
}

// B's rows k0.. and columns n0.. into Bs, as stage_a.
fn stage_b(tid: u32, bb: u32, n0: u32, k0: u32) {
    let n_total = p(P_N);
    let k_total = p(P_K);
    if ({{B_ALONG_K}}) {
        let per = BK / {{BW}}u;
        for (var e = tid; e < BN * per; e += NT) {
            let c = e / per;
            let kk = (e % per) * {{BW}}u;
            var v = vec4<f32>(0.0);
            if (k0 + kk < k_total) {
                v = load_b(bb + (k0 + kk) * p(P_B_RS) + min(n0 + c, n_total - 1u) * p(P_B_CS));
            }
            for (var j = 0u; j < {{BW}}u; j++) { Bs[(kk + j) * BN + c] = v[j]; }
        }
    } else {
        let per = BN / {{BW}}u;
        for (var e = tid; e < BK * per; e += NT) {
            let kk = e / per;
            let c = (e % per) * {{BW}}u;
            var v = vec4<f32>(0.0);
            if (k0 + kk < k_total && n0 + c < n_total) {
                v = load_b(bb + (k0 + kk) * p(P_B_RS) + (n0 + c) * p(P_B_CS));
            }
            for (var j = 0u; j < {{BW}}u; j++) { Bs[kk * BN + c + j] = v[j]; }
        }
    }
}

@compute @workgroup_size({{WGX}}, {{WGY}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let tx = lid.x;
    let ty = lid.y;
    let tid = ty * {{WGX}}u + tx;
    let n0 = wid.x * BN;
    let m0 = wid.y * BM;
    let bi = wid.z;
    let ab = strided(bi, {{NB}}u, P_BATCH, P_A_BS, p(P_A_OFF));
    let bb = strided(bi, {{NB}}u, P_BATCH, P_B_BS, p(P_B_OFF));
    var acc: array<array<f32, {{TN}}>, {{TM}}>;
    // Every invocation runs every step (no early return): the barriers need them all.
    let steps = (p(P_K) + BK - 1u) / BK;
    for (var s = 0u; s < steps; s++) {
        stage_a(tid, ab, m0, s * BK);
        stage_b(tid, bb, n0, s * BK);
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<f32, {{TM}}>;
            var b: array<f32, {{TN}}>;
            for (var i = 0u; i < {{TM}}u; i++) { a[i] = As[kk * BM + ty + i * {{WGY}}u]; }
            for (var j = 0u; j < {{TN}}u; j++) { b[j] = Bs[kk * BN + tx + j * {{WGX}}u]; }
            for (var i = 0u; i < {{TM}}u; i++) {
                for (var j = 0u; j < {{TN}}u; j++) { acc[i][j] = fma(a[i], b[j], acc[i][j]); }
            }
        }
        workgroupBarrier();
    }
    let m_total = p(P_M);
    let n_total = p(P_N);
    let ob = strided(bi, {{NB}}u, P_BATCH, P_O_BS, p(P_O_OFF));
    for (var i = 0u; i < {{TM}}u; i++) {
        let row = m0 + ty + i * {{WGY}}u;
        for (var j = 0u; j < {{TN}}u; j++) {
            let col = n0 + tx + j * {{WGX}}u;
            if (row < m_total && col < n_total) {
                let o = ob + row * p(P_O_RS) + col;
                var v = acc[i][j];
                if (p(P_ACC) != 0u) { v += f32(O[o]); }
                // Rounded as stored, then the epilogue on the stored value: the same
                // values as the CPU-adapter kernels' separate epilogue pass.
                v = {{ROUND}}(v);
                if (epilogue_on()) { v = {{ROUND}}(epilogue(v, row, col)); }
                O[o] = {{S}}(v);
            }
        }
    }
}
