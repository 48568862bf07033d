// matmul_nt for CPU adapters with subgroups (lavapipe): a {{TM}} x {{TN}} register tile of
// dot products along K per invocation, with A read once per subgroup. Every lane of a
// subgroup needs the same A values (lanes differ only in N), and lavapipe loads a storage
// value lane by lane inside loops, so A's loads cost more than the arithmetic: here lane j
// loads A's value j of each block of 8 along K (scalar, to spare registers for a taller
// tile), and subgroupBroadcast (a register shuffle) hands it to every lane. Needs a
// subgroup size of at least 8, else only the plain loop at the end runs. Invocations never
// return early: a broadcast from an inactive lane is undefined.
// Placeholders: as matmul_nt, EPILOGUE included (workgroup 1-D: {{WG}} invocations
// along N). Parameters: the "matmul_nt_sg" block of core/backends/webgpu/params.py (as
// matmul_nt's, except that A's offset, row stride and batch strides are in elements: A is
// read scalar).
@group(0) @binding(1) var<storage, read> A: array<{{S}}>;
@group(0) @binding(2) var<storage, read> B: array<vec4<{{S}}>>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

alias Tile = array<f32, {{TN}}>;
alias BRuns = array<vec4<f32>, {{TN}}>;

fn load_b(brow: array<u32, {{TN}}>, k: u32) -> BRuns {
    var b: BRuns;
    for (var c = 0u; c < {{TN}}u; c++) { b[c] = vec4<f32>(B[brow[c] + k]); }
    return b;
}

fn madd(acc: Tile, a: vec4<f32>, b: BRuns) -> Tile {
    var r = acc;
    for (var c = 0u; c < {{TN}}u; c++) { r[c] += dot(a, b[c]); }
    return r;
}

{{EPILOGUE}}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(subgroup_invocation_id) sid: u32, @builtin(subgroup_size) sgs: u32) {
    let m_total = p(P_M);
    let n_total = p(P_N);
    let n0 = gid.x * {{TN}}u;
    let m0 = wid.y * {{TM}}u;
    let bi = wid.z;
    let ab = strided(bi, {{NB}}u, P_BATCH, P_A_BS, p(P_A_OFF));
    let bb = strided(bi, {{NB}}u, P_BATCH, P_B_BS, p(P_B_OFF));
    let lane = sid & 7u;
    var arow: array<u32, {{TM}}>;
    var brow: array<u32, {{TN}}>;
    for (var r = 0u; r < {{TM}}u; r++) { arow[r] = ab + min(m0 + r, m_total - 1u) * p(P_A_RS); }
    for (var c = 0u; c < {{TN}}u; c++) { brow[c] = bb + min(n0 + c, n_total - 1u) * p(P_B_CS); }
    var acc: array<Tile, {{TM}}>;
    let k4 = p(P_K);
    let blocks = select(0u, k4 / 2u, sgs >= 8u);
    for (var kk = 0u; kk < blocks; kk++) {
        var av: array<f32, {{TM}}>;
        for (var r = 0u; r < {{TM}}u; r++) { av[r] = f32(A[arow[r] + 8u * kk + lane]); }
        var b = load_b(brow, 2u * kk);
        for (var r = 0u; r < {{TM}}u; r++) {
            let a = vec4<f32>(subgroupBroadcast(av[r], 0u), subgroupBroadcast(av[r], 1u),
                              subgroupBroadcast(av[r], 2u), subgroupBroadcast(av[r], 3u));
            acc[r] = madd(acc[r], a, b);
        }
        b = load_b(brow, 2u * kk + 1u);
        for (var r = 0u; r < {{TM}}u; r++) {
            let a = vec4<f32>(subgroupBroadcast(av[r], 4u), subgroupBroadcast(av[r], 5u),
                              subgroupBroadcast(av[r], 6u), subgroupBroadcast(av[r], 7u));
            acc[r] = madd(acc[r], a, b);
        }
    }
    for (var k = 2u * blocks; k < k4; k++) {
        let b = load_b(brow, k);
        for (var r = 0u; r < {{TM}}u; r++) {
            let o = arow[r] + 4u * k;
            acc[r] = madd(acc[r], vec4<f32>(f32(A[o]), f32(A[o + 1u]), f32(A[o + 2u]),
                                            f32(A[o + 3u])), b);
        }
    }
{{STORE_TILE}}
}
