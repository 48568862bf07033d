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
    spec = {"S": t.storage, "ROUND": t.round, "ND": layout.ndim,
            "INTERLEAVED": "true" if interleaved else "false", "WG": WG}
    pipe = rt.kernel("rope", t, spec, op)
    rng, rel = rt.bind(storage, layout.offset, layout.offset + span(shape, layout.strides),
                       t.size, op)
    crng, co = rt.bind(cos, lcos.offset, lcos.offset + span(lcos.shape, lcos.strides),
                       t.size, op)
    srng, so = rt.bind(sin, lsin.offset, lsin.offset + span(lsin.shape, lsin.strides),
                       t.size, op)
    orng, _ = rt.bind(out, 0, layout.numel, t.size, op)
    n = layout.numel
    params = [n, d_model, t_len, rel, co, so, lcos.strides[0], lcos.strides[1],
              lsin.strides[0], lsin.strides[1], 0, 0] + list(shape) + list(layout.strides)
    rt.launch(pipe, params, [rng, crng, srng, orng], rt.grid(n))
    return out
