// matmul_nn for CPU adapters with subgroups (lavapipe): the same {{TM}} x 4*{{TC}} register
// tile per invocation, but A is read once per subgroup instead of once per invocation.
// Every invocation of a subgroup needs the same A values (they differ only in columns), and
// lavapipe loads a storage value lane by lane inside loops, so A's loads cost more than the
// arithmetic. Here lane j of each group of 8 loads the vec4 of K run j of a block of 8 runs
// and subgroupBroadcast hands it to every lane (a register shuffle). Needs a subgroup size
// of at least 8 (else the plain loop below runs alone); invocations never return early,
// since a broadcast from an inactive lane is undefined.
// Placeholders and P: as matmul_nn (workgroup 1-D: {{WG}} invocations along the columns).
@group(0) @binding(1) var<storage, read> A: array<vec4<{{S}}>>;
@group(0) @binding(2) var<storage, read> B: array<vec4<{{S}}>>;
@group(0) @binding(3) var<storage, read_write> O: array<vec4<{{S}}>>;

alias Tile = array<vec4<f32>, {{TC}}>;
alias BRows = array<array<vec4<f32>, 4>, {{TC}}>;

// B's 4 rows k..k+3 (k at element `kb`) of this invocation's columns.
fn load_b(cols: array<u32, {{TC}}>, kb: u32, ldb: u32) -> BRows {
    var b: BRows;
    for (var c = 0u; c < {{TC}}u; c++) {
        b[c][0] = vec4<f32>(B[cols[c] + kb]);
        b[c][1] = vec4<f32>(B[cols[c] + kb + ldb]);
        b[c][2] = vec4<f32>(B[cols[c] + kb + 2u * ldb]);
        b[c][3] = vec4<f32>(B[cols[c] + kb + 3u * ldb]);
    }
    return b;
}

fn madd(acc: Tile, a: vec4<f32>, b: BRows) -> Tile {
    var r = acc;
    for (var c = 0u; c < {{TC}}u; c++) {
        r[c] += a.x * b[c][0] + a.y * b[c][1] + a.z * b[c][2] + a.w * b[c][3];
    }
    return r;
}

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(subgroup_invocation_id) sid: u32, @builtin(subgroup_size) sgs: u32) {
    let c_total = p(1u);
    let m_total = p(0u);
    let c0 = gid.x * {{TC}}u;
    let m0 = wid.y * {{TM}}u;
    let bi = wid.z;
    let ab = strided(bi, {{NB}}u, 16u, 16u + {{NB}}u, p(4u));
    let bb = strided(bi, {{NB}}u, 16u, 16u + 2u * {{NB}}u, p(5u));
    let lda = p(8u);
    let ldb = p(10u);
    let lane = sid & 7u;
    var rows: array<u32, {{TM}}>;
    for (var r = 0u; r < {{TM}}u; r++) { rows[r] = ab + min(m0 + r, m_total - 1u) * lda; }
    var cols: array<u32, {{TC}}>;
    for (var c = 0u; c < {{TC}}u; c++) { cols[c] = bb + min(c0 + c, c_total - 1u); }
    var acc: array<Tile, {{TM}}>;
    let k4 = p(2u);
    let blocks = select(0u, k4 / 8u, sgs >= 8u);
    let l4 = 4u * ldb;
    for (var kk = 0u; kk < blocks; kk++) {
        var av: array<vec4<f32>, {{TM}}>;
        for (var r = 0u; r < {{TM}}u; r++) { av[r] = vec4<f32>(A[rows[r] + 8u * kk + lane]); }
        let kb = 8u * kk * l4;
        var b = load_b(cols, kb, ldb);
        for (var r = 0u; r < {{TM}}u; r++) {
            acc[r] = madd(acc[r], subgroupBroadcast(av[r], 0u), b);
        }
        b = load_b(cols, kb + l4, ldb);
        for (var r = 0u; r < {{TM}}u; r++) {
            acc[r] = madd(acc[r], subgroupBroadcast(av[r], 1u), b);
        }
        b = load_b(cols, kb + 2u * l4, ldb);
        for (var r = 0u; r < {{TM}}u; r++) {
            acc[r] = madd(acc[r], subgroupBroadcast(av[r], 2u), b);
        }
        b = load_b(cols, kb + 3u * l4, ldb);
        for (var r = 0u; r < {{TM}}u; r++) {
            acc[r] = madd(acc[r], subgroupBroadcast(av[r], 3u), b);
        }
        b = load_b(cols, kb + 4u * l4, ldb);
        for (var r = 0u; r < {{TM}}u; r++) {
            acc[r] = madd(acc[r], subgroupBroadcast(av[r], 4u), b);
        }
        b = load_b(cols, kb + 5u * l4, ldb);
        for (var r = 0u; r < {{TM}}u; r++) {
            acc[r] = madd(acc[r], subgroupBroadcast(av[r], 5u), b);
        }
        b = load_b(cols, kb + 6u * l4, ldb);
        for (var r = 0u; r < {{TM}}u; r++) {
            acc[r] = madd(acc[r], subgroupBroadcast(av[r], 6u), b);
        }
        b = load_b(cols, kb + 7u * l4, ldb);
        for (var r = 0u; r < {{TM}}u; r++) {
            acc[r] = madd(acc[r], subgroupBroadcast(av[r], 7u), b);
        }
    }
    for (var k = 8u * blocks; k < k4; k++) {
        let b = load_b(cols, k * l4, ldb);
        for (var r = 0u; r < {{TM}}u; r++) { acc[r] = madd(acc[r], vec4<f32>(A[rows[r] + k]), b); }
    }
    let ob = strided(bi, {{NB}}u, 16u, 16u + 3u * {{NB}}u, p(6u));
    for (var r = 0u; r < {{TM}}u; r++) {
        for (var c = 0u; c < {{TC}}u; c++) {
            if (m0 + r < m_total && c0 + c < c_total) {
                let o = ob + (m0 + r) * p(12u) + c0 + c;
                var v = acc[r][c];
                if (p(7u) != 0u) { v += vec4<f32>(O[o]); }
                O[o] = vec4<{{S}}>({{ROUND}}(v));
            }
        }
    }
}
