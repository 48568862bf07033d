"""Direct convolution on the CPU, compiled by LLVM through llvmlite (llvm_build), with the
bias and activation applied in registers before each store.

YOLOv8 is nearly all convolution, and im2col + BLAS loses on most of its layers: the
first one (3 input channels: a GEMM with K = 27), the stride-2 downsamplings (their tap
copies), the 1x1 ones (small K), and everything on the 20x20 maps, plus a separate pass
for SiLU over every output. One core, ms for a layer with SiLU, im2col/Winograd against
this kernel on an AMD EPYC (Zen 3): 3->16 s2 at 640^2 6.1 -> ~1.5, 16->32 s2 at 320^2
7.1 -> 3.8, 32->64 s2 at 160^2 4.9 -> 3.3, 64->64 1x1 at 80^2 1.3 -> 0.9, 192->128
1x1 at 40^2 1.2 -> 1.0. (Winograd F(2x2, 3x3), array_winograd, still wins where a 3x3
stride-1 layer has 64+ channels on a 40x40+ map: it does 2.25x fewer multiplies.)

The kernel, in C terms, for one band of output rows (the caller pads the input band):

    conv(const f32 *x, i64 hb, i64 wq, i64 c,      // x: [c][hb][S][wq], S = stride phases
         const f32 *w, const f32 *bias,            // w: [O][c][KH][KW], bias: [O]
         f32 *out, i64 ldc, i64 ldr, i64 ow,       // out[ch * ldc + oy * ldr + ox]
         i64 oy0, i64 oy1, i64 ob0, i64 ob1, i64 o)
    out[ch][oy][ox] = act(bias[ch] + sum over ci, ky, kx of
                          w[ch][ci][ky][kx] * x[ci][oy * S + ky][kx % S][ox + kx / S])
    for output rows oy in [oy0, oy1), channel blocks [ob0, ob1) (channels below o)

x holds the padded input with each row split into its S phases (column q * S + p at
[p][q]), so that every tap reads consecutive input for consecutive outputs, stride 2
too. A register tile is OB output channels x NV vectors of VL consecutive output pixels
(OB * NV accumulators): per input channel and tap, NV loads of the input, OB weights
broadcast (read where they are: no packed copy of the weight), OB * NV fused
multiply-adds. Each output is one chain of multiply-adds in a
fixed order (input channel, then row, then column of the kernel), so its bits do not
depend on the bands, the tiles or the threads. VL is the host's vector width (16 floats
with AVX-512, else 8); a row's last tile is computed whole (the band is padded to it) and
stored lane by lane up to the row's end.

Unavailable (None) without llvmlite or with EMBER_JIT=0; array_conv then keeps im2col.
"""

import ctypes
import os
import threading
import warnings

from . import compiler_pages

OB, NV = 6, 2  # register tile: 6 output channels x 2 vectors of pixels (12 accumulators)
ACTIVATIONS = (None, "silu", "sigmoid", "relu")
_state: dict = {"kernels": None, "tried": False}
_lock = threading.Lock()
_P, _I = ctypes.c_void_p, ctypes.c_int64
_ARGS = (_P, _I, _I, _I, _P, _P, _P, _I, _I, _I, _I, _I, _I, _I, _I)


def kernels():
    """The ConvKernels of this process, or None where they cannot be had."""
    if os.environ.get("EMBER_JIT", "1") == "0":
        return None
    if not _state["tried"]:
        with _lock:
            if not _state["tried"]:
                from . import llvm_build

                if llvm_build.llvm() is not None:
                    _state["kernels"] = ConvKernels(llvm_build.host()[3])
                _state["tried"] = True
    return _state["kernels"]


class ConvKernels:
    """One compiled function per (kernel height, width, stride, activation), built on
    first use (a build that fails warns once and answers None: the caller keeps its
    im2col path)."""

    def __init__(self, features):
        self.vl = 16 if features.get("avx512f", False) else 8
        self.tile = NV * self.vl  # output pixels of a row per register tile
        self._fns: dict = {}
        self._engines: list = []  # own the machine code: kept alive with the functions
        self._lock = threading.Lock()

    def get(self, kh, kw, stride, activation):
        """The function for this shape of kernel, or None where its build failed."""
        key = (kh, kw, stride, activation)
        fn = self._fns.get(key, False)
        if fn is not False:
            return fn
        with self._lock:
            if key not in self._fns:
                self._fns[key] = self._build(*key)
        return self._fns[key]

    def _build(self, kh, kw, stride, activation):
        from . import llvm_build

        name = f"ember_conv_{kh}x{kw}_s{stride}_{activation or 'none'}"
        try:
            module = _ir_module(llvm_build.host()[0], name, kh, kw, stride, activation, self.vl)
            engine = llvm_build.compile_module("llvm_conv", module)
        except Exception as exc:  # an LLVM that refuses the IR: im2col serves
            warnings.warn(f"llvm_conv: {name} not built ({exc})", stacklevel=3)
            return None
        compiler_pages.release()  # the code is in place: LLVM's pages can go
        self._engines.append(engine)
        return ctypes.CFUNCTYPE(None, *_ARGS)(engine.get_function_address(name))


# --- the IR ------------------------------------------------------------------------------------
def _ir_module(triple, name, kh, kw, stride, activation, vl):
    from llvmlite import ir

    from .llvm_ir import I64, exp_neg, loop, no_alias, reduce, splat

    if activation not in ACTIVATIONS:
        raise ValueError(f"llvm_conv: no activation {activation!r}")
    f32 = ir.FloatType()
    vec = ir.VectorType(f32, vl)
    pf, pv = f32.as_pointer(), vec.as_pointer()
    module = ir.Module(name=name)
    module.triple = triple
    fmuladd = ir.Function(module, ir.FunctionType(vec, [vec] * 3), f"llvm.fmuladd.v{vl}f32")
    fn = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [pf, I64, I64, I64, pf, pf, pf] + [I64] * 8), name
    )
    x, hb, wq, c, w, bias, out, ldc, ldr, ow, oy0, oy1, ob0, ob1, o = fn.args
    no_alias(x, w, bias, out)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    taps, s = kh * kw, stride
    row_len = b.mul(wq, I64(s))  # one input row: its S phases
    plane = b.mul(hb, row_len)
    zero = ir.Constant(vec, [0.0] * vl)
    one = ir.Constant(vec, [1.0] * vl)

    def activate(b, v):
        if activation in ("silu", "sigmoid"):
            sig = b.fdiv(one, b.fadd(one, exp_neg(b, module, v)))
            return b.fmul(v, sig) if activation == "silu" else sig
        if activation == "relu":  # NaN passes, as numpy's maximum(v, 0) does not drop it
            return b.select(b.fcmp_ordered("<", v, zero), zero, v)
        return v

    def block(b, ob):
        first = b.mul(ob, I64(OB))
        last = b.sub(o, I64(1))
        # each channel's weights and bias; past the last channel, the last one's (read,
        # never stored), so that no load leaves the arrays
        chans = [b.add(first, I64(q)) for q in range(OB)]
        kept = [b.select(b.icmp_signed("<", ch, o), ch, last) for ch in chans]
        w_rows = [b.gep(w, [b.mul(ch, b.mul(c, I64(taps)))]) for ch in kept]
        biases = [splat(b, b.load(b.gep(bias, [ch])), vl) for ch in kept]

        def row(b, oy):
            def tile(b, x0):
                def channel(b, ci, accs):
                    accs = list(accs)
                    w_ci = [b.gep(r, [b.mul(ci, I64(taps))]) for r in w_rows]
                    x_ci = b.gep(x, [b.mul(ci, plane)])
                    for ky in range(kh):
                        x_row = b.gep(x_ci, [b.mul(b.add(b.mul(oy, I64(s)), I64(ky)), row_len)])
                        for kx in range(kw):
                            at = b.add(b.mul(wq, I64(kx % s)), b.add(x0, I64(kx // s)))
                            src = b.gep(x_row, [at])
                            xs = [
                                b.load(b.bitcast(b.gep(src, [I64(j * vl)]), pv), align=4)
                                for j in range(NV)
                            ]
                            for q in range(OB):
                                wv = splat(b, b.load(b.gep(w_ci[q], [I64(ky * kw + kx)])), vl)
                                for j in range(NV):
                                    accs[q * NV + j] = b.call(
                                        fmuladd, [xs[j], wv, accs[q * NV + j]]
                                    )
                    return accs

                accs = reduce(b, c, (zero,) * (OB * NV), channel, "ci")
                outs = []
                for q, ch in enumerate(chans):
                    dst = b.gep(out, [b.add(b.add(b.mul(ch, ldc), b.mul(oy, ldr)), x0)])
                    outs += [
                        (ch, dst, j, activate(b, b.fadd(accs[q * NV + j], biases[q])))
                        for j in range(NV)
                    ]
                whole = b.and_(
                    b.icmp_signed("<=", b.add(x0, I64(NV * vl)), ow),
                    b.icmp_signed("<=", b.add(first, I64(OB)), o),
                )
                with b.if_else(whole) as (then, otherwise):
                    with then:
                        for _, dst, j, v in outs:
                            b.store(v, b.bitcast(b.gep(dst, [I64(j * vl)]), pv), align=4)
                    with otherwise:  # a row's last tile, or the last block's channels
                        for ch, dst, j, v in outs:
                            for lane in range(vl):
                                inside = b.and_(
                                    b.icmp_signed("<", b.add(x0, I64(j * vl + lane)), ow),
                                    b.icmp_signed("<", ch, o),
                                )
                                with b.if_then(inside):
                                    b.store(
                                        b.extract_element(v, I64(lane)),
                                        b.gep(dst, [I64(j * vl + lane)]),
                                    )

            loop(b, I64(0), ow, tile, "x", step=NV * vl)

        loop(b, oy0, oy1, row, "oy")

    loop(b, ob0, ob1, block, "ob")
    b.ret_void()
    return module
