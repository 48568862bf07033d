"""The dtypes ember knows: names, item sizes and kinds. Pure Python, no numpy."""


class DType:
    __slots__ = ("name", "itemsize", "kind", "numpy_name", "safetensors_name")

    def __init__(self, name, itemsize, kind, numpy_name, safetensors_name):
        self.name = name
        self.itemsize = itemsize
        self.kind = kind  # "f" float, "i" signed int, "u" unsigned int
        # bf16 has no numpy dtype: the CPU keeps its raw bits in uint16.
        self.numpy_name = numpy_name
        self.safetensors_name = safetensors_name

    @property
    def is_float(self):
        return self.kind == "f"

    @property
    def is_int(self):
        return self.kind in ("i", "u")

    def __repr__(self):
        return f"ember.{self.name}"

    __str__ = __repr__

    def __reduce__(self):
        return (from_name, (self.name,))


float32 = f32 = DType("f32", 4, "f", "float32", "F32")
float16 = f16 = DType("f16", 2, "f", "float16", "F16")
bfloat16 = bf16 = DType("bf16", 2, "f", "uint16", "BF16")
float64 = f64 = DType("f64", 8, "f", "float64", "F64")
int64 = i64 = DType("i64", 8, "i", "int64", "I64")
int32 = i32 = DType("i32", 4, "i", "int32", "I32")
uint32 = u32 = DType("u32", 4, "u", "uint32", "U32")
uint8 = u8 = DType("u8", 1, "u", "uint8", "U8")
bool_ = u8  # comparisons return u8 masks, as candle does

ALL = (f32, f16, bf16, f64, i64, i32, u32, u8)
_BY_NAME = {d.name: d for d in ALL}
_ALIASES = {
    "float32": f32,
    "float": f32,
    "float16": f16,
    "half": f16,
    "bfloat16": bf16,
    "float64": f64,
    "double": f64,
    "int64": i64,
    "long": i64,
    "int32": i32,
    "int": i32,
    "uint32": u32,
    "uint8": u8,
    "bool": u8,
}


def from_name(name):
    return _BY_NAME[name]


def as_dtype(value):
    """Accept an ember dtype, a name ('f32', 'float32'), or a numpy dtype."""
    from .errors import UnsupportedDType

    if isinstance(value, DType):
        return value
    name = value if isinstance(value, str) else getattr(value, "name", None) or str(value)
    name = str(name)
    found = _BY_NAME.get(name) or _ALIASES.get(name)
    if found is None:
        raise UnsupportedDType(
            f"dtype: {value!r} is not an ember dtype (known: {', '.join(_BY_NAME)})", dtype=value
        )
    return found


def from_safetensors(name):
    for d in ALL:
        if d.safetensors_name == name:
            return d
    if name == "BOOL":
        return u8
    return None
