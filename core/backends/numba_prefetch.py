"""A cache prefetch hint for numba code: ``prefetch(a, i, j)`` asks for the cache line
holding ``a[i, j]`` (LLVM's llvm.prefetch: prefetcht0 on x86, PRFM on ARM, nothing where a
target has none). It never faults and changes no value: it only starts a load early.

Imported only with numba (the ``ember[jit]`` extra), by array_qkernels: a decode step's
weights are read once each, straight from memory, and a kernel that asks for rows a few
KiB ahead of the ones it computes keeps more loads in flight than the hardware's own
prefetcher did (SmolLM2-135M's 49152 x 576 Q8_0 head, cold, one thread: 7.3 -> 3.1 ms).
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_READ, _KEEP_IN_ALL_LEVELS, _DATA = 0, 3, 1


@intrinsic
def prefetch(typingctx, array, i, j):
    """prefetch(a, i, j) for a 2-D array and integer indices within it."""
    if not (isinstance(array, types.Array) and array.ndim == 2):
        return None
    if not (isinstance(i, types.Integer) and isinstance(j, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = [
            context.cast(builder, v, t, types.intp)
            for v, t in zip(args[1:], signature.args[1:], strict=True)
        ]
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
        # an i8 pointer: the intrinsic's name then fits typed (LLVM 14) and opaque pointers
        byte_ptr = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte_ptr.type, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [byte_ptr.type], fnty)
        builder.call(fn, [byte_ptr, i32(_READ), i32(_KEEP_IN_ALL_LEVELS), i32(_DATA)])
        return context.get_dummy_value()

    return types.void(array, i, j), codegen
