"""ember: a minimalist ML inference framework: one tensor core, many places to run.

import ember
x = ember.randn(2, 3, device=ember.Device.best())
y = (x @ x.T).softmax(-1)
"""

# First, before anything below can import numpy: OpenBLAS reads its idle-spin setting once,
# when numpy loads it, and ember's CPU threads pay only with that setting (row_parallel). A
# module that imported numpy at load time (the corpus job, the pipelines) used to come first
# and leave ember on one thread.
from .backends.blas_threads import prepare_numpy_import as _prepare_numpy_import

_prepare_numpy_import()

from . import dtype as _dtype_module
from . import (
    errors,
    functional,
    io,  # safetensors needs no numpy at import time
)
from .device import Device, exact_cpu_products, set_cpu_threads
from .dtype import (
    DType,
    bf16,
    bfloat16,
    bool_,
    f16,
    f32,
    f64,
    float16,
    float32,
    float64,
    i32,
    i64,
    int32,
    int64,
    u8,
    u32,
    uint8,
    uint32,
)
from .errors import (
    DeviceError,
    DeviceMismatch,
    DimOutOfRange,
    DTypeMismatch,
    EmberError,
    FormatError,
    InvalidArgument,
    OutOfMemory,
    ShapeMismatch,
    UnsupportedDType,
    UnsupportedOp,
)
from .functional import (
    avg_pool2d,
    conv1d,
    conv2d,
    conv2d_cat,
    conv_transpose1d,
    conv_transpose2d,
    embedding,
    interpolate,
    linear,
    max_pool2d,
    pad,
    upsample_nearest2d,
)
from .layout import Layout
from .random import Generator, manual_seed, rand, rand_like, randint, randn, randn_like
from .tensor import (
    Tensor,
    arange,
    cat,
    default_device,
    eye,
    from_numpy,
    full,
    full_like,
    matmul,
    ones,
    ones_like,
    set_default_device,
    softmax,
    stack,
    tensor,
    where,
    zeros,
    zeros_like,
)

__version__ = "0.1.0"
as_dtype = _dtype_module.as_dtype

# Written out so that linters and type checkers see the public names (a computed list hid
# them and exported every submodule imported along the way).
__all__ = [
    "errors",
    "functional",
    "io",
    "Device",
    "Layout",
    "Tensor",
    "Generator",
    "DType",
    "as_dtype",
    "bf16",
    "bfloat16",
    "bool_",
    "f16",
    "f32",
    "f64",
    "float16",
    "float32",
    "float64",
    "i32",
    "i64",
    "int32",
    "int64",
    "u8",
    "u32",
    "uint8",
    "uint32",
    "DeviceError",
    "DeviceMismatch",
    "DimOutOfRange",
    "DTypeMismatch",
    "EmberError",
    "FormatError",
    "InvalidArgument",
    "OutOfMemory",
    "ShapeMismatch",
    "UnsupportedDType",
    "UnsupportedOp",
    "arange",
    "cat",
    "default_device",
    "eye",
    "from_numpy",
    "full",
    "full_like",
    "matmul",
    "ones",
    "ones_like",
    "set_cpu_threads",
    "exact_cpu_products",
    "set_default_device",
    "softmax",
    "stack",
    "tensor",
    "where",
    "zeros",
    "zeros_like",
    "manual_seed",
    "rand",
    "rand_like",
    "randint",
    "randn",
    "randn_like",
    "avg_pool2d",
    "conv1d",
    "conv2d",
    "conv2d_cat",
    "conv_transpose1d",
    "conv_transpose2d",
    "embedding",
    "interpolate",
    "linear",
    "max_pool2d",
    "pad",
    "upsample_nearest2d",
]
