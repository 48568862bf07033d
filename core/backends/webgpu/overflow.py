"""i64 on WebGPU never wraps silently.

WGSL has no 64-bit integers, so an i64 tensor is held as i32 (dtypes.py); uploads, fills
and scalars outside i32 are refused before they reach the device. What remains are
results: the i64 forms of the arithmetic ops below compute in checked functions that test
their operands *before* the operation (on magnitudes as u32, never by looking at a wrapped
result) and, when the exact result leaves i32, set the op's bit in a flag word owned by
the runtime (atomicOr). The runtime reads the flags at the next readback and raises
`error()` naming the ops, then clears them (Runtime.read). i32 keeps wrapping as numpy's
int32 does: that is the dtype's meaning, and the CPU backend's.

The flag word is one extra read_write storage binding after a kernel's own (unary 3,
binary 4, reduce 3, cumsum 4, the general matmul 4 or after a fused linear's 2 epilogue
operands 6: within WebGPU's 8 per stage).
"""

from ... import dtype as dt
from ...errors import UnsupportedDType
from . import kernels

# Ops whose i64 form is checked, each with its bit in the flag word.
OPS = (
    "add",
    "sub",
    "mul",
    "neg",
    "abs",
    "square",
    "affine",
    "sum",
    "prod",
    "cumsum",
    "matmul",
    "div",
)

# Checked WGSL forms, in the variables of core/ops.py's expressions (a, b; x, p0, p1) and
# of reduce.wgsl's fold (acc, v) and cumsum.wgsl's add_t (a, b).
EXPR = {
    "add": "add_i(a, b)",
    "sub": "sub_i(a, b)",
    "mul": "mul_i(a, b)",
    "neg": "sub_i(0i, x)",
    "abs": "select(x, sub_i(0i, x), x < 0i)",
    "square": "mul_i(x, x)",
    "affine": "add_i(mul_i(x, p0), p1)",
    "sum": "*acc = add_i(*acc, v);",
    "prod": "*acc = mul_i(*acc, v);",
    "cumsum": "add_i(a, b)",
    "div": "div_i(a, b)",
}
# The general matmul kernel's multiply-add, checked and plain.
MATMUL = ({"ADD": "add_i(a, b)", "MUL": "mul_i(a, b)"}, {"ADD": "a + b", "MUL": "a * b"})

_FUNCTIONS = """const I32_LO: i32 = -2147483647i - 1i;
fn overflowed() { atomicOr(&OVF[0], BIT); }
// |a| as u32 (exact for I32_LO: 2^31).
fn mag_i(a: i32) -> u32 { return select(0u - bitcast<u32>(a), bitcast<u32>(a), a >= 0i); }
fn add_i(a: i32, b: i32) -> i32 {
    if ((b > 0i && a > 2147483647i - b) || (b < 0i && a < I32_LO - b)) { overflowed(); }
    return bitcast<i32>(bitcast<u32>(a) + bitcast<u32>(b));
}
fn sub_i(a: i32, b: i32) -> i32 {
    if ((b < 0i && a > 2147483647i + b) || (b > 0i && a < I32_LO + b)) { overflowed(); }
    return bitcast<i32>(bitcast<u32>(a) - bitcast<u32>(b));
}
fn mul_i(a: i32, b: i32) -> i32 {
    // |a * b| <= 2^31 - 1 for a positive product, 2^31 for a negative one.
    let ma = mag_i(a);
    let limit = select(2147483647u, 2147483648u, (a < 0i) != (b < 0i));
    if (ma != 0u && mag_i(b) > limit / ma) { overflowed(); }
    return bitcast<i32>(bitcast<u32>(a) * bitcast<u32>(b));
}
fn div_i(a: i32, b: i32) -> i32 {
    // Floor division leaves i32 only for the minimum // -1 (2^31).
    if (a == I32_LO && b == -1i) { overflowed(); }
    return idiv(a, b);
}
"""


def checked(op, dtype):
    return dtype is dt.i64 and op in OPS


def spec(kernel, op, dtype, extra_reads=0):
    """The OVERFLOW fragment of `kernel` for `op` on `dtype`: the flag binding (after the
    kernel's own and `extra_reads` more, kernels.bindings) and the checked functions for a
    checked op, else nothing."""
    if not checked(op, dtype):
        return {"OVERFLOW": ""}
    binding = len(kernels.BINDINGS[kernel]) + extra_reads + 1
    return {
        "OVERFLOW": f"@group(0) @binding({binding}) var<storage, read_write> OVF: "
        f"array<atomic<u32>>;\nconst BIT: u32 = {1 << OPS.index(op)}u;\n" + _FUNCTIONS
    }


def error(word):
    ops = [op for i, op in enumerate(OPS) if word >> i & 1]
    return UnsupportedDType(
        f"i64 values past 32 bits on WebGPU: {', '.join(ops)} gave a result outside i32, in "
        f"which WebGPU holds i64 (WGSL has no 64-bit integers); compute on the CPU for the "
        f"full range",
        op=ops[0] if ops else "i64",
        dtype=dt.i64,
    )
