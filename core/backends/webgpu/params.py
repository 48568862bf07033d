"""Kernel parameter blocks, each declared once: the names of a kernel's uniform parameters
and their slots, from which both sides are made.

A block is an ordered list of fields: a name (one 32-bit slot) or (name, length), an array
whose length is a number or a key of the kernel's specialisation (e.g. "ND", its dims).
Fields take consecutive slots of the dispatch's uniform block (prelude.wgsl's `P`).

- WGSL: `slots(spec).wgsl()` renders `const P_<NAME>: u32 = <slot>u;` per field (an array's first
  slot) into the kernel before compilation, so shaders read `p(P_ROWS)`, `pf(P_EPS)`,
  `p(P_SHAPE + d)`, and never a slot by number (tests/test_wgpu_params.py scans them);
- Python: `slots(spec).pack({name: value, ...})` (Runtime.launch calls it) gives the 32-bit values in slot order, refusing an
  unknown, a missing or a wrongly sized field with an error naming the kernel.

A slip between the two sides can no longer give wrong numbers on the GPU alone: a name
that one side lacks fails to compile or to pack.
"""

from ...errors import EmberError


class ParamBlockError(EmberError, ValueError):
    """A kernel launched with parameters its block does not declare, or without some."""


class ParamBlock:
    __slots__ = ("kernel", "fields", "_slots")

    def __init__(self, kernel, *fields):
        self.kernel = kernel
        self.fields = tuple((f, None) if isinstance(f, str) else tuple(f) for f in fields)
        names = [n for n, _ in self.fields]
        if len(set(names)) != len(names):
            raise ParamBlockError(f"kernel {kernel}: a parameter is declared twice in {names}")
        self._slots = {}

    def slots(self, spec):
        """The block laid out for the array lengths `spec` gives (cached per lengths)."""
        sizes = tuple(
            None if n is None else spec[n] if isinstance(n, str) else n for _, n in self.fields
        )
        out = self._slots.get(sizes)
        if out is None:
            out = self._slots[sizes] = Slots(
                self.kernel,
                [(name, size) for (name, _), size in zip(self.fields, sizes, strict=True)],
            )
        return out


class Slots:
    """A block laid out: {name: (first slot, length or None for a scalar)}."""

    __slots__ = ("kernel", "where", "total")

    def __init__(self, kernel, sized_fields):
        self.kernel = kernel
        self.where, slot = {}, 0
        for name, size in sized_fields:
            self.where[name] = (slot, size)
            slot += 1 if size is None else size
        self.total = slot

    def wgsl(self):
        return "".join(
            f"const P_{name.upper()}: u32 = {slot}u;\n" for name, (slot, _) in self.where.items()
        )

    def name_of(self, i):
        """The field holding slot i (an array's as name[k])."""
        for name, (slot, size) in self.where.items():
            if slot == i and size is None:
                return name
            if size is not None and slot <= i < slot + size:
                return f"{name}[{i - slot}]"
        return str(i)

    def pack(self, values):
        """The 32-bit values of `values` ({name: int or list of ints}) in slot order."""
        if values.keys() != self.where.keys():
            missing = sorted(self.where.keys() - values.keys())
            unknown = sorted(values.keys() - self.where.keys())
            raise ParamBlockError(
                f"kernel {self.kernel}: parameters missing {missing}, unknown {unknown}"
            )
        out = [0] * self.total
        for name, v in values.items():
            slot, size = self.where[name]
            if size is None:
                out[slot] = v
            elif len(v) == size:
                out[slot : slot + size] = v
            else:
                raise ParamBlockError(
                    f"kernel {self.kernel}: parameter {name} has {len(v)} "
                    f"values, the block declares {size}"
                )
        return out


def _elementwise(kernel, inputs, scalars=(), strided_out=False):
    return ParamBlock(
        kernel,
        "n",
        *scalars,
        "out_off",
        *(f"{x}_off" for x in inputs),
        ("shape", "ND"),
        *((f"{x}_strides", "ND") for x in inputs),
        *((("out_strides", "ND"),) if strided_out else ()),
    )


# The inputs of each elementwise kernel, in the order elementwise.launch binds them.
ELEMENTWISE_INPUTS = {
    "unary": ("x",),
    "binary": ("a", "b"),
    "where": ("c", "a", "b"),
    "copy": ("x",),
}

_ROWS = ("rows", "n", "x_off")
_MATMUL_BATCH = (("batch", "NB"), ("a_bs", "NB"), ("b_bs", "NB"), ("o_bs", "NB"))
# A fused linear's epilogue (epilogue.py): on (0 for a split K's partial products), bias
# offset and stride, residual offset, row and column strides.
_EPILOGUE = ("epi_on", "bias_off", "bias_stride", "res_off", "res_rs", "res_cs")
_MATMUL_TILED = (
    "m",
    "n",
    "k",
    "a_off",
    "b_off",
    "o_off",
    "acc",
    "a_rs",
    "b_cs",
    "o_rs",
    *_MATMUL_BATCH,
    *_EPILOGUE,
)

_MATMUL_GPU = (
    "m",
    "n",
    "k",
    "a_off",
    "b_off",
    "o_off",
    "acc",
    "a_rs",
    "a_cs",
    "b_rs",
    "b_cs",
    "o_rs",
    *_MATMUL_BATCH,
    *_EPILOGUE,
)

BLOCKS = {
    b.kernel: b
    for b in (
        _elementwise("unary", ELEMENTWISE_INPUTS["unary"], ("p0", "p1")),
        _elementwise("binary", ELEMENTWISE_INPUTS["binary"], ("b",)),
        _elementwise("where", ELEMENTWISE_INPUTS["where"]),
        _elementwise("copy", ELEMENTWISE_INPUTS["copy"], strided_out=True),
        ParamBlock("fill", "n", "value", "out_off"),
        ParamBlock("unpack", "n", "out_off", "first_word"),
        ParamBlock("pack", "words", "n", "out_off", "x_off"),
        ParamBlock(
            "softmax",
            *_ROWS,
            "log",
            "x_stride",
            "out_stride",
            "out_off",
            ("kept_shape", "NK"),
            ("kept_x_strides", "NK"),
            ("kept_out_strides", "NK"),
        ),
        # flags: 1 weight, 2 bias, 4 rms, 8 residual (which shares x's strides).
        ParamBlock(
            "norm",
            *_ROWS,
            "eps",
            "x_stride",
            "flags",
            "w_off",
            "b_off",
            "w_stride",
            "b_stride",
            "out_off",
            "res_off",
            ("kept_shape", "NK"),
            ("kept_x_strides", "NK"),
        ),
        ParamBlock(
            "cumsum",
            "slots",
            "n",
            "x_off",
            "mode",
            "x_stride",
            "out_stride",
            "chunk",
            "chunks",
            ("kept_shape", "NK"),
            ("kept_x_strides", "NK"),
            ("kept_out_strides", "NK"),
        ),
        # index_base: added to argmax/argmin's indices (a part of a split reduction reports
        # global indices); scale: mean's 1/count as f32 bits.
        ParamBlock(
            "reduce",
            "slots",
            "k",
            "x_off",
            "scale",
            "chunk",
            "chunks",
            "out_off",
            "index_base",
            ("kept_shape", "NK"),
            ("kept_strides", "NK"),
            ("red_shape", "NR"),
            ("red_strides", "NR"),
        ),
        ParamBlock(
            "rope",
            "n",
            "d",
            "t",
            "x_off",
            "cos_off",
            "sin_off",
            "cos_ts",
            "cos_is",
            "sin_ts",
            "sin_is",
            ("x_shape", "ND"),
            ("x_strides", "ND"),
        ),
        ParamBlock(
            "index_select",
            "n",
            "size",
            "ids_off",
            "ids_stride",
            "x_off",
            "lo",
            "hi",
            "out_off",
            ("out_shape", "ND"),
            ("x_strides", "ND"),
        ),
        ParamBlock(
            "gather",
            "n",
            "size",
            "ids_off",
            "x_off",
            "lo",
            "hi",
            "out_off",
            ("ids_shape", "ND"),
            ("x_strides", "ND"),
            ("ids_strides", "ND"),
        ),
        ParamBlock(
            "scatter_add",
            "n",
            "ids_len",
            "ids_off",
            "src_off",
            "dst_off",
            ("dst_shape", "ND"),
            ("dst_strides", "ND"),
            ("ids_shape", "ND"),
            ("ids_strides", "ND"),
            ("src_strides", "ND"),
        ),
        ParamBlock(
            "matmul",
            "m",
            "n",
            "k",
            "total",
            "a_off",
            "b_off",
            "o_off",
            "acc",
            "a_rs",
            "a_cs",
            "b_rs",
            "b_cs",
            "o_rs",
            *_MATMUL_BATCH,
            *_EPILOGUE,
        ),
        # matmul_nn counts n, k, offsets and strides in vec4s; matmul_nt k, B's and A's (not
        # matmul_nt_sg's) offsets and strides.
        ParamBlock(
            "matmul_nn",
            "m",
            "n",
            "k",
            "a_off",
            "b_off",
            "o_off",
            "acc",
            "a_rs",
            "b_rs",
            "o_rs",
            *_MATMUL_BATCH,
            *_EPILOGUE,
        ),
        ParamBlock("matmul_nt", *_MATMUL_TILED),
        # The gpu kernel set's (matmul_gpu.py): offsets and strides in elements.
        *(ParamBlock(name, *_MATMUL_GPU) for name in ("matmul_tiled", "gemv_nt", "gemv_nn")),
        ParamBlock("matmul_nt_sg", *_MATMUL_TILED),
        # k4: K / 4; out batch strides in vec4s.
        ParamBlock(
            "matmul_transpose",
            "k4",
            "n",
            "w_off",
            "w_rs",
            ("batch", "NB"),
            ("w_bs", "NB"),
            ("o_bs", "NB"),
        ),
        # blocks: quant blocks per row (this part of K); x offset and stride in vec4s; w_off:
        # byte offset of W's row 0 in the binding; w_row: W's row stride in bytes.
        ParamBlock(
            "qmatmul", "m", "n", "blocks", "x_off", "x_rs", "w_off", "w_row", "o_off", "o_rs", "acc"
        ),
        # conv.py: a block of images x groups x output channels x output rows x input
        # channels; x_row0 the first input row X's binding holds; W's offset and strides
        # (per group, per K row) in vec4s; bias_gs its stride per group.
        ParamBlock(
            "conv2d",
            "npix",
            "ow",
            "ng",
            "x_off",
            "x_ns",
            "x_gs",
            "x_cs",
            "x_rs",
            "x_ws",
            "x_row0",
            "in_h",
            "in_w",
            "oy0",
            "kh",
            "kw",
            "sh",
            "sw",
            "ph",
            "pw",
            "dh",
            "dw",
            "c",
            "w_off",
            "w_gs",
            "w_ks",
            "m",
            "y_off",
            "y_ns",
            "y_gs",
            "y_cs",
            "acc",
            "epi_on",
            "has_bias",
            "bias_off",
            "bias_gs",
            "bias_stride",
        ),
    )
}
