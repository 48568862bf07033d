"""One snippet, two places: the same Python text runs in the page (WebGPU on SwiftShader)
and in this process on the native backend, so the two results can be compared.

A case is input tensors (drawn here with numpy, sent as exact float literals) and an
expression over them; the snippet returns {"shape", "dtype", "values"} of the result.
"""
import ast

import numpy as np


def tensor_inputs(seed, **specs):
    """name -> (nested list, dtype name): specs are (shape, dtype[, low, high])."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, spec in specs.items():
        shape, dtype = spec[0], spec[1]
        if dtype in ("i64", "i32", "u32", "u8"):
            low, high = spec[2], spec[3]
            values = rng.integers(low, high, size=shape).tolist()
        else:
            low, high = (spec[2], spec[3]) if len(spec) > 2 else (-2.0, 2.0)
            values = rng.uniform(low, high, size=shape).astype(np.float32).tolist()
        out[name] = (values, dtype)
    return out


def snippet(inputs, expression, setup="", device="dev"):
    lines = ["import ember"]
    for name, (values, dtype) in inputs.items():
        lines.append(f"{name} = ember.tensor({values!r}, dtype=ember.{dtype}, device={device})")
    if setup:
        lines.append(setup)
    lines.append(f"_out = {expression}")
    lines.append('{"shape": list(_out.shape), "dtype": _out.dtype.name, "values": _out.tolist()}')
    return "\n".join(lines)


def run_here(code, dev, **names):
    """Run a snippet in this process with `dev` as the device; the value of its last line."""
    import ember
    tree = ast.parse(code)
    last = tree.body.pop()
    namespace = {"ember": ember, "dev": dev, **names}
    exec(compile(tree, "<snippet>", "exec"), namespace)
    return eval(compile(ast.Expression(last.value), "<snippet>", "eval"), namespace)
