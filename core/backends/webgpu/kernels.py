"""WGSL kernels: sources from shaders/*.wgsl, filled placeholders, cached pipelines.

A kernel is (file, specialisation): placeholders such as {{S}} (storage type), {{OP}}
(an expression from core/ops.py), {{ND}} (dims) or {{WG}} (workgroup size) are replaced
by text, and the result is compiled once per distinct specialisation.
"""

import re
from importlib import resources

from . import params

# File -> (number of storage bindings, which of them are read-only). No kernel binds more
# than 8 storage buffers, WebGPU's default per-stage limit; tests/test_wgpu_limits.py
# checks this table against the sources.
BINDINGS = {
    "unary": (True, False),
    "binary": (True, True, False),
    "where": (True, True, True, False),
    "copy": (True, False),
    "fill": (False,),
    "unpack": (True, False),
    "pack": (True, False),
    "reduce": (True, False),
    "softmax": (True, False),
    "norm": (True, True, True, False, True),
    "cumsum": (True, True, False),
    "matmul": (True, True, False),
    "matmul_nn": (True, True, False),
    "matmul_nt": (True, True, False),
    "matmul_nt_sg": (True, True, False),
    "matmul_transpose": (True, False),
    "matmul_tiled": (True, True, False),
    "gemv_nt": (True, True, False),
    "gemv_nn": (True, True, False),
    "index_select": (True, True, False),
    "gather": (True, True, False),
    "scatter_add": (True, True, True, False),
    "rope": (True, True, True, False),
    "qmatmul": (True, True, False),
    "conv2d": (True, True, False, True),
}

_PLACEHOLDER = re.compile(r"\{\{([A-Z_0-9]+)\}\}")
_sources = {}


def source(name):
    """The text of shaders/<name>.wgsl (package data, found the same way in a wheel,
    an editable install and Pyodide)."""
    text = _sources.get(name)
    if text is None:
        text = resources.files("ember.shaders").joinpath(f"{name}.wgsl").read_text()
        _sources[name] = text
    return text


def bindings(name, spec):
    """Read-only flag per storage binding of kernel `name` as `spec` fills it: the file's
    row, plus the read-only operands a matmul epilogue adds after it (epilogue.py) or the
    i64 overflow flags (overflow.py)."""
    return (
        BINDINGS[name] + (True,) * spec.get("EPI_READS", 0) + (False,) * bool(spec.get("OVERFLOW"))
    )


def placeholders(name):
    return set(_PLACEHOLDER.findall(source(name)))


def render(name, compute_type, spec, enable_f16=False):
    """Complete WGSL for kernel `name`: header, its parameter slots (params.py), prelude,
    filled template. A spec value may itself be a fragment with placeholders (binary's
    LOAD_B names {{ND}}): it is filled from the spec before it is pasted, so one pass over
    the template suffices and a pasted fragment is never scanned again."""

    def fill_from(values):
        def fill(match):
            key = match.group(1)
            if key not in values:
                raise KeyError(f"kernel {name}: placeholder {{{{{key}}}}} has no value")
            return values[key]

        return fill

    raw = {k: str(v) for k, v in spec.items()}
    filled = {k: _PLACEHOLDER.sub(fill_from(raw), v) for k, v in raw.items()}
    for key, text in filled.items():
        if _PLACEHOLDER.search(text):
            raise KeyError(f"kernel {name}: the fragment {{{{{key}}}}} names another fragment")
    fill = fill_from(filled)
    nan = "nan_f(x)" if compute_type == "f32" else "false"
    header = (
        ("enable f16;\n" if enable_f16 else "")
        + f"alias T = {compute_type};\n"
        + f"fn nan_t(x: T) -> bool {{ return {nan}; }}\n"
        + params.BLOCKS[name].slots(spec).wgsl()
    )
    return header + _PLACEHOLDER.sub(fill, source("prelude")) + _PLACEHOLDER.sub(fill, source(name))


# Fragments (WGSL text) a label leaves out: the pipeline's name stays readable.
_FRAGMENTS = {
    "OP",
    "RESULT",
    "UNPACK",
    "PACK",
    "COMBINE",
    "CONVERT",
    "LOAD_B",
    "INIT",
    "EPILOGUE",
    "STORE_TILE",
    "LOAD_A",
    "A_T",
    "B_T",
    "OVERFLOW",
    "ADD",
    "MUL",
    "ACT",
}


def label(name, spec, op=None):
    inner = ",".join(f"{k}={v}" for k, v in sorted(spec.items()) if k not in _FRAGMENTS)
    return f"{name}:{op}[{inner}]" if op else f"{name}[{inner}]"
