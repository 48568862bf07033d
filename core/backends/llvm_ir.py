"""Small llvmlite IR-building helpers shared by ember's hand-written LLVM kernels
(llvm_f16's products, llvm_conv's convolutions): loops in LLVM's canonical form, so its
loop vectorizer recognizes them, argument attributes, broadcasts and a vector exp."""

from llvmlite import ir

I64 = ir.IntType(64)


def no_alias(*args):
    """Mark pointer arguments as not overlapping one another (lets LLVM vectorize)."""
    for a in args:
        a.add_attribute("noalias")


def loop(b, lo, hi, body, name, step=1):
    """for (iv = lo; iv < hi; iv += step) body(b, iv), in LLVM's canonical loop form."""
    before = b.block
    head, done = b.append_basic_block(name + ".loop"), b.append_basic_block(name + ".done")
    b.cbranch(b.icmp_signed("<", lo, hi), head, done)
    b.position_at_end(head)
    iv = b.phi(I64, name)
    iv.add_incoming(lo, before)
    body(b, iv)
    nxt = b.add(iv, I64(step))
    iv.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, hi), head, done)
    b.position_at_end(done)


def reduce(b, n, zeros, step, name):
    """accs = zeros; for (j = 0; j < n; j++) accs = step(b, j, accs); the final accs (a
    tuple of scalars, carried side by side)."""
    before = b.block
    head, done = b.append_basic_block(name + ".loop"), b.append_basic_block(name + ".done")
    b.cbranch(b.icmp_signed("<", I64(0), n), head, done)
    b.position_at_end(head)
    j = b.phi(I64, name)
    j.add_incoming(I64(0), before)
    accs = [b.phi(z.type, f"{name}.acc{a}") for a, z in enumerate(zeros)]
    for acc, z in zip(accs, zeros, strict=True):
        acc.add_incoming(z, before)
    nexts = step(b, j, tuple(accs))
    j_next = b.add(j, I64(1))
    j.add_incoming(j_next, head)
    for acc, nxt in zip(accs, nexts, strict=True):
        acc.add_incoming(nxt, head)
    b.cbranch(b.icmp_signed("<", j_next, n), head, done)
    b.position_at_end(done)
    totals = []
    for z, nxt in zip(zeros, nexts, strict=True):
        total = b.phi(z.type)
        total.add_incoming(z, before)
        total.add_incoming(nxt, head)
        totals.append(total)
    return tuple(totals)


def splat(b, scalar, lanes):
    """A vector of `lanes` copies of a scalar (a broadcast)."""
    vec = ir.VectorType(scalar.type, lanes)
    one = b.insert_element(ir.Constant(vec, ir.Undefined), scalar, I64(0))
    mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
    return b.shuffle_vector(one, ir.Constant(vec, ir.Undefined), mask)


def exp_neg(b, module, v):
    """exp(-v) for a vector of f32 (array_conv_jit's algorithm, in IR): 2^t with t = -v /
    ln 2 clamped to [-126, 127], split into 2^round(t), added to the exponent bits, times
    2^f for |f| <= 1/2 from its Taylor polynomial of degree 6 (relative error below 2e-7).
    NaN gives NaN; the sums may fuse into multiply-adds ("contract")."""
    lanes = v.type.count
    f32 = v.type.element

    def const(x):
        return ir.Constant(v.type, [x] * lanes)

    def contract(instr):
        instr.flags.append("contract")
        return instr

    name = f"llvm.floor.v{lanes}f32"
    floor = module.globals.get(name) or ir.Function(module, ir.FunctionType(v.type, [v.type]), name)
    t = b.fmul(v, const(-1.4426950408889634))
    # "unordered or less": a NaN t becomes -126 here (the result is put right below),
    # so the conversion to an integer never sees a NaN
    t = b.select(b.fcmp_unordered("<", t, const(-126.0)), const(-126.0), t)
    t = b.select(b.fcmp_ordered(">", t, const(127.0)), const(127.0), t)
    r = b.call(floor, [b.fadd(t, const(0.5))])
    f = b.fmul(b.fsub(t, r), const(0.6931471805599453))
    p = const(1.0 / 720.0)
    for k in (1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
        p = contract(b.fadd(contract(b.fmul(p, f)), const(k)))
    ints = ir.VectorType(ir.IntType(32), lanes)
    shift = b.shl(b.fptosi(r, ints), ir.Constant(ints, [23] * lanes))
    e = b.bitcast(b.add(b.bitcast(p, ints), shift), v.type)
    if f32 != ir.FloatType():
        raise ValueError(f"exp_neg: f32 vectors only, got {v.type}")
    return b.select(b.fcmp_unordered("uno", v, v), v, e)
