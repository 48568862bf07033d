// General strided batched matmul, one output per invocation: any dtype, any strides
// (broadcast batch dims have stride 0). The fast f32 paths are matmul_nn / matmul_nt.
// Placeholders: {{S}} storage type, {{ROUND}}, {{NB}} batch dims, {{WG}}, EPILOGUE
// (epilogue.py: fn epilogue(value, row, col), bias/activation/residual of a fused linear).
// ADD / MUL: a + b and a * b or their checked forms, with OVERFLOW the i64 overflow flag
// (overflow.py), or nothing.
// Parameters: the "matmul" block of core/backends/webgpu/params.py.
@group(0) @binding(1) var<storage, read> A: array<{{S}}>;
@group(0) @binding(2) var<storage, read> B: array<{{S}}>;
@group(0) @binding(3) var<storage, read_write> O: array<{{S}}>;

{{EPILOGUE}}
{{OVERFLOW}}

fn add_t(a: T, b: T) -> T { return {{ADD}}; }
fn mul_t(a: T, b: T) -> T { return {{MUL}}; }

@compute @workgroup_size({{WG}})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg, {{WG}}u);
    if (i >= p(P_TOTAL)) { return; }
    let m_n = p(P_M) * p(P_N);
    let bi = i / m_n;
    let m = (i % m_n) / p(P_N);
    let n = i % p(P_N);
    let ab = strided(bi, {{NB}}u, P_BATCH, P_A_BS, p(P_A_OFF)) + m * p(P_A_RS);
    let bb = strided(bi, {{NB}}u, P_BATCH, P_B_BS, p(P_B_OFF)) + n * p(P_B_CS);
    var acc = T(0);
    for (var k = 0u; k < p(P_K); k++) {
        acc = add_t(acc, mul_t(T(A[ab + k * p(P_A_CS)]), T(B[bb + k * p(P_B_RS)])));
    }
    let o = strided(bi, {{NB}}u, P_BATCH, P_O_BS, p(P_O_OFF)) + m * p(P_O_RS) + n;
    if (p(P_ACC) != 0u) { acc = add_t(acc, T(O[o])); }
    if (epilogue_on()) { acc = epilogue(acc, m, n); }
    O[o] = {{S}}({{ROUND}}(acc));
}
