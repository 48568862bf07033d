"""The epilogue of a fused linear, applied by the matmul kernels where they store.

Every matmul template has an {{EPILOGUE}} placeholder at top level and, where
`epilogue_on()`, stores `epilogue(v, row, col)` (`epilogue4` for matmul_nn's vec4 of
columns col..col+3); the tiled kernels do it in a second pass over their own outputs (see
the templates for why). A plain matmul fills the placeholder with an `epilogue_on` that is
false (the pass compiles away); a fused linear with an epilogue that adds the bias,
applies the activation (core/ops.py's UNARY WGSL, an expression in x) and adds the
residual, reading bias and residual from two extra read-only bindings after O (4, 5).

The epilogue's parameters close every matmul block (params.py): epi_on (0 for the
partial products of a split K before the last, which must store the bare sum), the bias
offset and stride, the residual offset and its row and column strides (elements; the
kernel adds row and col of the launch, so split launches move the offsets with O).
"""

from ...ops import UNARY
from .shapes import span

_PLAIN = """fn epilogue_on() -> bool { return false; }
fn epilogue(v: T, row: u32, col: u32) -> T { return v; }
fn epilogue4(v: vec4<T>, row: u32, col: u32) -> vec4<T> { return v; }"""

_VEC4 = """fn epilogue4(v: vec4<f32>, row: u32, col: u32) -> vec4<f32> {
    return vec4<f32>(epilogue(v.x, row, col), epilogue(v.y, row, col + 1u),
                     epilogue(v.z, row, col + 2u), epilogue(v.w, row, col + 3u));
}"""


# The epilogue's parameters of a plain matmul (whose epilogue_on is false) or a bare one.
OFF = {"epi_on": 0, "bias_off": 0, "bias_stride": 0, "res_off": 0, "res_rs": 0, "res_cs": 0}


class Epilogue:
    """bias (storage, offset, stride) or None, activation name or None, residual
    (storage, offset, row stride, col stride) or None."""

    __slots__ = ("bias", "act", "res")

    def __init__(self, bias, act, res):
        row = UNARY.get(act)
        if act is not None and (row is None or row.nparams or "f" not in row.kinds):
            raise ValueError(f"linear: {act!r} is not an activation the WebGPU epilogue can apply")
        self.bias, self.act, self.res = bias, act, res

    def moved(self, rows, cols):
        """The epilogue of the block starting `rows` rows and `cols` columns further on."""
        bias = res = None
        if self.bias is not None:
            st, off, s = self.bias
            bias = (st, off + cols * s, s)
        if self.res is not None:
            st, off, rs, cs = self.res
            res = (st, off + rows * rs + cols * cs, rs, cs)
        return Epilogue(bias, self.act, res)

    def tag(self):
        """Short name for the pipeline's spec and label."""
        return "+".join(
            p
            for p, on in (
                ("bias", self.bias is not None),
                (self.act, self.act),
                ("res", self.res is not None),
            )
            if on
        )

    def spans(self, t, rows, cols):
        """Bytes each extra binding covers for a rows x cols block, by operand name."""
        out = {}
        if self.bias is not None:
            out["bias"] = span([cols], [self.bias[2]]) * t.size
        if self.res is not None:
            out["res"] = span([rows, cols], [self.res[2], self.res[3]]) * t.size
        return out

    def dims(self, name, rows, cols):
        """(dim, stride, size) of the extra operand `name`, as the split planner wants."""
        if name == "bias":
            return (("n", self.bias[2], cols),)
        return (("m", self.res[2], rows), ("n", self.res[3], cols))

    def wgsl(self):
        """The {{EPILOGUE}} text: extra bindings and the functions the templates call."""
        lines = ["fn epilogue_on() -> bool { return p(P_EPI_ON) != 0u; }"]
        body = ["    var x = v;"]
        binding = 4
        if self.bias is not None:
            lines.append(
                f"@group(0) @binding({binding}) var<storage, read> BIAS: array<{{{{S}}}}>;"
            )
            body.append("    x += f32(BIAS[p(P_BIAS_OFF) + col * p(P_BIAS_STRIDE)]);")
            binding += 1
        if self.act is not None:
            body.append(f"    x = {UNARY[self.act].wgsl};")
        if self.res is not None:
            lines.append(f"@group(0) @binding({binding}) var<storage, read> RES: array<{{{{S}}}}>;")
            body.append("    x += f32(RES[p(P_RES_OFF) + row * p(P_RES_RS) + col * p(P_RES_CS)]);")
        body.append("    return x;")
        return "\n".join(
            lines + ["fn epilogue(v: f32, row: u32, col: u32) -> f32 {"] + body + ["}", _VEC4]
        )

    def reads(self):
        return int(self.bias is not None) + int(self.res is not None)

    def bind(self, be, t, rows, cols):
        """Binding ranges and the epilogue's parameters for a rows x cols launch."""
        ranges, params = [], dict(OFF)
        if self.bias is not None:
            st, off, s = self.bias
            r, rel = be.runtime.bind(st, off, off + span([cols], [s]), t.size, "linear")
            ranges.append(r)
            params.update(bias_off=rel, bias_stride=s)
        if self.res is not None:
            st, off, rs, cs = self.res
            r, rel = be.runtime.bind(st, off, off + span([rows, cols], [rs, cs]), t.size, "linear")
            ranges.append(r)
            params.update(res_off=rel, res_rs=rs, res_cs=cs)
        return ranges, params


def spec(epi):
    """Spec entries of a matmul kernel: the plain store, or `epi`'s."""
    if epi is None:
        return {"EPILOGUE": _PLAIN}
    return {"EPILOGUE": epi.wgsl(), "EPI": epi.tag(), "EPI_READS": epi.reads()}
