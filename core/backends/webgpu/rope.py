"""Rotary position embedding on WebGPU: x [..., T, D] rotated by cos/sin tables [T, D/2],
in halves or interleaved pairs, in one elementwise pass."""

from .elementwise import WG
from .shapes import span


def rope(be, storage, layout, cos, lcos, sin, lsin, dtype, interleaved=False):
    rt = be.runtime
    op = "rope"
    t = rt.type_of(dtype, op)
    out = rt.alloc(layout.numel, dtype, op)
    if layout.numel == 0:
        return out
    shape = layout.shape
    d_model, t_len = shape[-1], shape[-2]
    spec = {
        "S": t.storage,
        "ROUND": t.round,
        "ND": layout.ndim,
        "INTERLEAVED": "true" if interleaved else "false",
        "WG": WG,
    }
    pipe = rt.kernel("rope", t, spec, op)
    rng, rel = rt.bind(
        storage, layout.offset, layout.offset + span(shape, layout.strides), t.size, op
    )
    crng, co = rt.bind(cos, lcos.offset, lcos.offset + span(lcos.shape, lcos.strides), t.size, op)
    srng, so = rt.bind(sin, lsin.offset, lsin.offset + span(lsin.shape, lsin.strides), t.size, op)
    orng, _ = rt.bind(out, 0, layout.numel, t.size, op)
    n = layout.numel
    params = {
        "n": n,
        "d": d_model,
        "t": t_len,
        "x_off": rel,
        "cos_off": co,
        "sin_off": so,
        "cos_ts": lcos.strides[0],
        "cos_is": lcos.strides[1],
        "sin_ts": lsin.strides[0],
        "sin_is": lsin.strides[1],
        "x_shape": shape,
        "x_strides": layout.strides,
    }
    rt.launch(pipe, params, [rng, crng, srng, orng], rt.grid(n))
    return out
