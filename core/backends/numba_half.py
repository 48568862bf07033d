"""IEEE half floats in numba code: ``half_to_f32(bits)`` is the float32 value of the
float16 whose bit pattern is the 16-bit integer ``bits`` (LLVM's fpext from half: exact
for every pattern, infinities and NaNs included).

numba has no float16 type on the CPU. ggml's block scales go through a 65,536-entry table
(array_qkernels.F16), which is fine for one scale a block; an F16 weight has one half per
element, and a table lookup each is a gather LLVM cannot vectorize. fpext compiles to the
hardware's conversion (x86 F16C's vcvtph2ps, ARM's fcvtl), eight or sixteen lanes at a
time inside a vectorized loop. Imported only with numba (the ``ember[jit]`` extra).
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def half_to_f32(typingctx, bits):
    """float32 of the float16 bit pattern `bits` (a 16-bit integer)."""
    if not (isinstance(bits, types.Integer) and bits.bitwidth == 16):
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(bits), codegen
