"""Small llvmlite IR-building helpers shared by ember's hand-written LLVM kernels
(llvm_f16's products, llvm_math's elementwise kernels, llvm_norm's norms,
llvm_attention's decode-step attention): loops in LLVM's canonical form, so
its loop vectorizer recognizes them, argument attributes, intrinsics and exp(-v)."""

from llvmlite import ir

I64 = ir.IntType(64)


def new_module(name, triple):
    """An empty llvmlite module for `triple` (the process's, from llvm_build.host)."""
    module = ir.Module(name=name)
    module.triple = triple
    return module


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


def reduce(b, n, zeros, step, name, start=None, stride=1):
    """accs = zeros; for (j = start; j < n; j += stride) accs = step(b, j, accs); the
    final accs (a tuple of scalars, carried side by side); start 0 where None. step may
    hold loops of its own."""
    start = I64(0) if start is None else start
    before = b.block
    head, done = b.append_basic_block(name + ".loop"), b.append_basic_block(name + ".done")
    b.cbranch(b.icmp_signed("<", start, n), head, done)
    b.position_at_end(head)
    j = b.phi(I64, name)
    j.add_incoming(start, before)
    accs = [b.phi(z.type, f"{name}.acc{a}") for a, z in enumerate(zeros)]
    for acc, z in zip(accs, zeros, strict=True):
        acc.add_incoming(z, before)
    nexts = step(b, j, tuple(accs))
    latch = b.block  # the body's last block: step may have made blocks (a nested loop)
    j_next = b.add(j, I64(stride))
    j.add_incoming(j_next, latch)
    for acc, nxt in zip(accs, nexts, strict=True):
        acc.add_incoming(nxt, latch)
    b.cbranch(b.icmp_signed("<", j_next, n), head, done)
    b.position_at_end(done)
    totals = []
    for z, nxt in zip(zeros, nexts, strict=True):
        total = b.phi(z.type)
        total.add_incoming(z, before)
        total.add_incoming(nxt, latch)
        totals.append(total)
    return tuple(totals)


def exp_neg(b, module, v):
    """exp(-v) for f32 (a scalar or a vector), as 2^r e^f: x = -v clamped to [-126 ln 2,
    127 ln 2], r = round(x / ln 2), f = x - r ln 2 in two steps (ln 2 split into a part
    exact in f32 and the rest, so f keeps its digits for large x), e^f for |f| <= ln 2 / 2
    from its Taylor polynomial of degree 7 (truncation 5e-9), and 2^r added to the
    exponent bits: within 2e-7 relative of exp for -v in [-87, 88]. So exp(-v) is never 0
    nor infinite (the clamp gives 2^-126 and 2^127 beyond); NaN gives NaN. The
    polynomial's steps may fuse into multiply-adds (llvm.fmuladd: on every element alike)."""
    lanes = getattr(v.type, "count", None)
    f32 = v.type if lanes is None else v.type.element
    if f32 != ir.FloatType():
        raise ValueError(f"exp_neg: f32 values only, got {v.type}")
    ints = ir.IntType(32) if lanes is None else ir.VectorType(ir.IntType(32), lanes)

    def const(x, typ=v.type):
        return ir.Constant(typ, x if lanes is None else [x] * lanes)

    suffix = "f32" if lanes is None else f"v{lanes}f32"
    floor = intrinsic(module, f"llvm.floor.{suffix}", v.type, 1)
    fmuladd = intrinsic(module, f"llvm.fmuladd.{suffix}", v.type, 3)
    lo, hi = -126.0 * LN2_HI, 127.0 * LN2_HI
    x = b.fsub(const(-0.0), v)
    # "unordered or less": a NaN becomes the low end here (the result is put right below),
    # so the conversion to an integer never sees a NaN
    x = b.select(b.fcmp_unordered("<", x, const(lo)), const(lo), x)
    x = b.select(b.fcmp_ordered(">", x, const(hi)), const(hi), x)
    r = b.call(floor, [b.call(fmuladd, [x, const(1.4426950408889634), const(0.5)])])
    f = b.call(fmuladd, [r, const(-LN2_HI), x])
    f = b.call(fmuladd, [r, const(-LN2_LO), f])
    p = const(1.0 / 5040.0)
    for k in (1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
        p = b.call(fmuladd, [p, f, const(k)])
    shift = b.shl(b.fptosi(r, ints), const(23, ints))
    e = b.bitcast(b.add(b.bitcast(p, ints), shift), v.type)
    return b.select(b.fcmp_unordered("uno", v, v), v, e)


# ln 2 as a float32 whose last 9 bits are clear (r * LN2_HI is exact for |r| < 2^9), and
# the rest
LN2_HI = 0.693145751953125
LN2_LO = 1.4286068202862268e-06


def vector_load(b, ptr, vec):
    """A vector of type `vec` from the f32 pointer `ptr` (aligned as a float only)."""
    return b.load(b.bitcast(ptr, vec.as_pointer()), align=4)


def vector_store(b, value, ptr):
    """Store the vector `value` at the f32 pointer `ptr` (aligned as a float only)."""
    b.store(value, b.bitcast(ptr, value.type.as_pointer()), align=4)


def splat(b, x, vec):
    """The scalar x in every lane of a vector of type `vec`."""
    one = b.insert_element(ir.Constant(vec, ir.Undefined), x, ir.IntType(32)(0))
    lanes = ir.Constant(ir.VectorType(ir.IntType(32), vec.count), [0] * vec.count)
    return b.shuffle_vector(one, ir.Constant(vec, ir.Undefined), lanes)


def intrinsic(module, name, typ, arity):
    """The declaration of an overloaded LLVM intrinsic on `typ`, made once a module."""
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(typ, [typ] * arity), name)


def prefetch_row(b, module, base, row_bytes, r, nbytes):
    """Ask for every 64-byte line of row r (`nbytes` long) of the rows `row_bytes` apart
    from the i8 pointer `base`, as LLVM's prefetch hints (read, kept in every cache): a
    decode step reads each weight once, from memory, and asking for its rows a few KiB
    ahead keeps more loads in flight than the hardware prefetcher does."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    prefetch = module.globals.get("llvm.prefetch") or module.declare_intrinsic(
        "llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
    )
    row = b.gep(base, [b.mul(r, row_bytes)])
    loop(
        b,
        I64(0),
        nbytes,
        lambda b, c: b.call(prefetch, [b.gep(row, [c]), i32(0), i32(3), i32(1)]),
        "pf",
        step=64,
    )


def row_pairs(b, module, weights, row_stride, row_bytes, r0, r1, ahead_bytes, body):
    """for (ra = r0; ra < r1; ra += 2) body(b, ra, rb): the weight rows of a product two
    at a time (they share each load of x), rb = ra + 1 or, past the last row, ra again
    (whose result is then stored twice, the same value: no branch). Before each pair the
    rows `ahead_bytes` on (at least a pair) are asked for (prefetch_row: a decode step
    reads each weight once, from memory). `weights` is the rows' i8 pointer, rows
    `row_stride` bytes apart and `row_bytes` long."""
    wide = b.select(b.icmp_signed(">", row_bytes, I64(0)), row_bytes, I64(1))
    ahead = b.udiv(I64(ahead_bytes), wide)
    ahead = b.select(b.icmp_signed("<", ahead, I64(2)), I64(2), ahead)
    last = b.sub(r1, I64(1))

    def ask_for(b, r):
        r = b.select(b.icmp_signed("<", r, last), r, last)
        prefetch_row(b, module, weights, row_stride, r, row_bytes)

    def pair(b, ra):
        rb = b.select(b.icmp_signed("<", b.add(ra, I64(1)), r1), b.add(ra, I64(1)), ra)
        ask_for(b, b.add(ra, ahead))
        ask_for(b, b.add(b.add(ra, ahead), I64(1)))
        body(b, ra, rb)

    loop(b, r0, r1, pair, "r", step=2)
